// LLaMA inference on one GPU: the weights in bf16, uploaded once; a bf16
// key/value cache on the device; activations in bf16 with fp32 accumulation
// (matmuls through cuBLASLt, attention through attention_forward_cuda or
// attention_cached_cuda); logits in fp32, copied back only for the rows asked
// for. Same semantics as the CPU's LlamaDecoder, to bf16 precision.
//
// All device memory (weights, cache, activations for one chunk of tokens,
// workspaces) is reserved once in the device's pool when the decoder is made;
// a model that does not fit fails there, with one line naming the sizes.
#pragma once

#include <cstdint>
#include <memory>

#include "infer/decoder.h"
#include "model/llama_weights.h"

namespace spillway::infer {

struct CudaDecoderOptions {
  int ordinal = 0;  // which GPU
  // Longest run of tokens one pass takes: longer inputs (a long prompt) go in
  // pieces of this many, each attending to the cache the earlier ones filled.
  // Bounds the activation memory. A piece fed to an empty cache takes the
  // flash kernel (attention_forward_cuda, on tensor cores); the others, and
  // every token after the prompt, attention_cached_cuda.
  int64_t prefill_chunk = 2048;
  // forward() computes and copies back the logits of this many rows at a
  // time ([rows, vocab] fp32 on the device and in pinned host memory).
  int64_t logits_rows = 64;
};

std::unique_ptr<Decoder> make_cuda_decoder(const model::LlamaWeights& weights, int64_t max_len,
                                           const CudaDecoderOptions& options = {});

}  // namespace spillway::infer
