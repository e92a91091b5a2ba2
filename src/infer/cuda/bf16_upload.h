// Host fp32 weights into device bf16 for the GPU decoders: through an fp32
// staging buffer on the device, cast piece by piece in stream order, so the
// host needs no bf16 copy of a model and the device no fp32 one.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "base/dtype.h"
#include "model/llama_weights.h"

namespace spillway::infer {

class Bf16Upload {
 public:
  // The staging buffer's size for `w`'s tensors. Throws Error naming a
  // tensor that does not hold as many values as its shape says.
  static int64_t staging_floats(const model::LlamaWeights& w);

  // `staging`: device memory of staging_floats() floats, free again
  // once the stream has run what copy() queued.
  Bf16Upload(float* staging, int64_t staging_floats, cudaStream_t stream)
      : staging_(staging), staging_floats_(staging_floats), stream_(stream) {}
  // device[0 .. n) = bf16(host[0 .. n)), queued on the stream.
  void copy(const float* host, int64_t n, bf16* device);

 private:
  float* staging_;
  int64_t staging_floats_;
  cudaStream_t stream_;
};

}  // namespace spillway::infer
