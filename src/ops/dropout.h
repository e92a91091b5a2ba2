// Dropout, as LoRA trains with it (PEFT's lora_dropout on an adapter's
// input): out = x * keep / (1 - p), keep drawn per element with probability
// 1 - p.
//
// Contract: the draw is a pure function of (key, salt, index): `key` is the
// micro-batch's (the step's input, two i32 words, low then high), `salt`
// the node's, `index` the element's place in the tensor. Every backend makes
// the same draws, so the CPU and the GPU drop the same elements, a replayed
// step drops them again, and the backward (the same op over dout) drops
// exactly what the forward did. Probabilities resolve to 2^-24.
#pragma once

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define SPW_HOST_DEVICE __host__ __device__
#else
#define SPW_HOST_DEVICE
#endif

namespace spillway::ops {

// The draw's threshold for probability p in [0, 1): an element is dropped
// when its 24-bit draw falls below it.
inline uint32_t dropout_threshold(double p) { return static_cast<uint32_t>(std::llround(p * 16777216.0)); }

// splitmix64's finalizer over the key, the salt and the index.
SPW_HOST_DEVICE inline bool dropout_keeps(uint64_t key, uint32_t salt, uint64_t index, uint32_t threshold) {
  uint64_t z = key + 0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(salt) + 1) + 0xD1B54A32D192ED03ull * index;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<uint32_t>(z >> 40) >= threshold;
}

SPW_HOST_DEVICE inline uint64_t dropout_key(const int32_t* words) {
  return static_cast<uint64_t>(static_cast<uint32_t>(words[0])) |
         (static_cast<uint64_t>(static_cast<uint32_t>(words[1])) << 32);
}
// The key's two words, as the step's input holds them.
inline void dropout_key_words(uint64_t key, int32_t* words) {
  words[0] = static_cast<int32_t>(static_cast<uint32_t>(key));
  words[1] = static_cast<int32_t>(static_cast<uint32_t>(key >> 32));
}

// A micro-batch's key: from the run's seed, the optimizer steps taken
// before it and the micro-batch's place in the optimizer step (counted over
// the data-parallel ranks, so a layout drops what one device would).
uint64_t dropout_micro_batch_key(uint64_t seed, int64_t step, int64_t micro_batch);

// out[i] = keep(i) ? x[i] * scale : 0 over n elements (out may be x), with
// scale = 1 / (1 - p) rounded to T first.
template <typename T>
void dropout_forward(const T* x, T* out, int64_t n, uint64_t key, uint32_t salt, uint32_t threshold, double scale);

}  // namespace spillway::ops

#ifdef SPILLWAY_HAS_CUDA
#include <cuda_runtime_api.h>

#include "base/dtype.h"

namespace spillway::ops {

// GPU: the contract above on bf16, each kept element scaled in fp32; the
// key read from device memory (the step's input), so a replayed CUDA graph
// sees each micro-batch's.
void dropout_forward_cuda(const bf16* x, bf16* out, int64_t n, const int32_t* key, uint32_t salt,
                          uint32_t threshold, float scale, cudaStream_t stream);

}  // namespace spillway::ops
#endif
