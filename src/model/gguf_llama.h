// A llama.cpp LLaMA GGUF (general.architecture "llama") as spillway's
// LlamaWeights: the config from the llama.* metadata, tensors renamed to
// Hugging Face's names (token_embd -> model.embed_tokens, blk.N.attn_q ->
// model.layers.N.self_attn.q_proj, ..., output -> lm_head, absent: tied).
//
// llama.cpp's converter reorders the rows of q_proj and k_proj so that its
// RoPE, which rotates adjacent pairs (x[2i], x[2i+1]), computes what HF's
// rotate-half RoPE computes on pairs (x[i], x[i + head_dim/2]). Per head, HF
// row j * head_dim/2 + i (j in {0, 1}) becomes GGUF row 2 i + j: the rows
// viewed as [heads, 2, head_dim/2, cols] are transposed to
// [heads, head_dim/2, 2, cols]. Loading undoes it, so spillway's rotate-half
// RoPE on the loaded weights gives llama.cpp's attention scores.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "model/gguf.h"
#include "model/llama_weights.h"
#include "model/tokenizer.h"

namespace spillway::model {

// The config from `llama.*` metadata; Error naming the file and the key when
// something is missing, inconsistent or unsupported by spillway (RoPE
// scaling, a head size other than hidden / heads).
LlamaConfig gguf_llama_config(const GgufFile& file);

// Every parameter, dequantized to float32 and in HF layout. A tensor that is
// missing, misshapen, or not part of a plain LLaMA (a bias, say) is an Error
// naming the file and the tensor.
LlamaWeights load_gguf_llama(const GgufFile& file);
LlamaWeights load_gguf_llama(const std::string& path);

// load_gguf_llama's checks (the layer count, every parameter present in its
// shape, no tensor a plain LLaMA lacks), and one parameter read under its
// HF name into `out` (float32, HF layout): a model read a tensor at a time.
void check_gguf_llama_tensors(const GgufFile& file, const LlamaConfig& config);
void read_gguf_llama_tensor(const GgufFile& file, const LlamaConfig& config, const std::string& hf_name,
                            std::span<float> out);

// Writes `weights` (and, when given, the tokenizer: gguf_tokenizer.h) as a
// GGUF file llama.cpp reads: general.* and llama.* metadata, tensors under
// llama.cpp's names with q and k in its row order, matrices as `type` (1-D
// norms as F32, as llama.cpp's converter keeps them; a matrix whose rows do
// not fill Q8_0 blocks as F16). Written atomically. Error for what llama.cpp
// could not read back the same (LLaMA-3.1 RoPE scaling).
void save_gguf_llama(const std::string& path, const LlamaWeights& weights, const Tokenizer* tokenizer, GgmlType type,
                     const std::string& name);

// The GGUF tensor name of an HF parameter name ("lm_head.weight" ->
// "output.weight"); Error naming it when it is not a LLaMA parameter.
std::string gguf_tensor_name(const std::string& hf_name);

// Rows of a [heads * head_dim, cols] q or k matrix: HF order to llama.cpp's
// (what its converter writes), and back. `heads` is the head count of that
// projection (key/value heads for k). in and out must not overlap.
void permute_qk_rows_to_gguf(std::span<const float> hf, std::span<float> gguf, int64_t heads, int64_t head_dim,
                             int64_t cols);
void unpermute_qk_rows_from_gguf(std::span<const float> gguf, std::span<float> hf, int64_t heads, int64_t head_dim,
                                 int64_t cols);

}  // namespace spillway::model
