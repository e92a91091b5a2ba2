// What generation needs from a model: feed tokens at the next positions of a
// key/value cache, batch one, and get their logits back. Two kinds:
// LlamaDecoder (llama_decoder.h: the CPU, float32, weights read in place) and
// the CUDA decoder (cuda/cuda_decoder.h: bf16 weights and cache on one GPU).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/llama_weights.h"

namespace spillway::infer {

class Decoder {
 public:
  virtual ~Decoder() = default;

  // Logits [tokens.size(), vocab] (float32, row-major) for the fed tokens.
  // Throws Error when the cache would overflow or a token is outside the
  // vocabulary; the position is then unchanged.
  virtual std::vector<float> forward(std::span<const int32_t> tokens) = 0;
  // Feeds the tokens as forward() does and returns the logits of the last
  // one only [vocab]: what generation reads, without the other rows' work.
  virtual std::vector<float> forward_last(std::span<const int32_t> tokens) = 0;

  virtual int64_t position() const = 0;  // tokens fed so far
  virtual int64_t capacity() const = 0;  // tokens the cache holds
  virtual void reset() = 0;              // forget everything fed
  // Where it runs, for people: "cpu, 16 threads, float32",
  // "cuda:0 NVIDIA H100 80GB HBM3, bf16".
  virtual std::string description() const = 0;
};

// Decoder names --device accepts.
inline constexpr const char* kDecoderDevices = "auto, cpu or cuda";

// Whether `device` means the GPU: "cuda", or "auto" where a GPU is visible
// (and spillway was built with CUDA). Throws Error naming --device for a name
// outside kDecoderDevices, and for "cuda" in a build without CUDA.
bool device_is_cuda(const std::string& device);

// A decoder for `weights` with room for `max_len` tokens on `device`: "cpu",
// "cuda" (GPU 0), or "auto" (the GPU when one is visible, the CPU otherwise).
// The CPU decoder reads `weights` in place, so they must outlive it; the CUDA
// decoder copies them. Throws Error naming --device for an unknown device,
// and for "cuda" without a GPU or in a build without CUDA.
std::unique_ptr<Decoder> make_decoder(const model::LlamaWeights& weights, int64_t max_len,
                                      const std::string& device);

}  // namespace spillway::infer
