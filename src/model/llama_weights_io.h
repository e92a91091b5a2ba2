// A LLaMA model on disk, in Hugging Face's layout: config.json beside
// model.safetensors (or its shards and index), parameters under their
// transformers names, so transformers and spillway read each other's files.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "base/dtype.h"

#include "model/llama_weights.h"

namespace spillway::model {

// Reads config.json and every parameter (f32, f16 or bf16 on disk, float32
// in memory); `dir` may also be a GGUF file (gguf_llama.h). A missing
// tensor, or one whose shape disagrees with the config, is an Error naming
// the file and the tensor; so is a layer count other than the config's, or
// a tensor the model has no place for (llama_weights_check.h).
LlamaWeights load_llama(const std::string& dir);

// Writes config.json and the weights as `dtype` (f32, bf16 or f16) into
// `dir` (created if needed), each file atomically; shards past
// `max_shard_bytes`.
void save_llama(const std::string& dir, const LlamaWeights& weights, uint64_t max_shard_bytes = 5'000'000'000,
                DType dtype = DType::f32);

// Parameter `i` of parameter_specs(config)'s order, as float32, into `out`
// (its whole size): weights that live elsewhere (a GPU engine's state) read
// tensor by tensor.
using ParameterReader = std::function<void(size_t i, std::span<float> out)>;

// save_llama of the parameters `read` gives, each read when its file is
// written, so they are never all in host memory at once.
void save_llama(const std::string& dir, const LlamaConfig& config, const ParameterReader& read,
                uint64_t max_shard_bytes = 5'000'000'000, DType dtype = DType::f32);
// Makes every read save_llama would make, in its order, and writes nothing:
// for a data-parallel rank whose reads are collectives the writing rank's
// need it to join.
void walk_llama_reads(const LlamaConfig& config, const ParameterReader& read, uint64_t max_shard_bytes = 5'000'000'000);

// The dtype a model's weights are stored in: a folder's embedding's
// safetensors dtype, or a GGUF file's embedding type (F32, F16, BF16; a
// quantized type gives bf16, the closest dtype a model folder holds).
DType stored_dtype(const std::string& dir_or_gguf);

}  // namespace spillway::model
