// The GPU's NF4 dequantization against ops/nf4's CPU one, bit for bit: plain
// and double-quantized scales, full and partial blocks, odd counts, a block
// of zeros and tiny and huge magnitudes; and its bf16 output against the
// CPU's floats rounded as the GPU engines round a master (ops/master_split.h).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_device.h"
#include "ops/master_split.h"
#include "ops/nf4.h"
#include "testing/cuda_arrays.h"
#include "testing/numeric.h"

namespace spillway::ops {
namespace {

using spillway::testing::DeviceArray;

// Normal-ish weights of varied scale per block, with a block of zeros and
// blocks of tiny and huge values where there is room.
std::vector<float> weights(int64_t n, uint64_t seed) {
  std::vector<float> v = spillway::testing::random_vector<float>(n, seed, -1.0, 1.0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t block = i / kNf4Block;
    if (block == 1) v[static_cast<size_t>(i)] = 0.0f;
    if (block == 2) v[static_cast<size_t>(i)] *= 1e-30f;
    if (block == 3) v[static_cast<size_t>(i)] *= 3e37f;
    if (block > 3) v[static_cast<size_t>(i)] *= static_cast<float>(1 + block % 7) * 0.01f;
  }
  return v;
}

// The tensor's arrays on the device, described for the kernels.
struct OnDevice {
  explicit OnDevice(const Nf4Tensor& t)
      : packed(t.packed),
        absmax(t.absmax.empty() ? std::vector<float>{0.0f} : t.absmax),
        qabsmax(t.qabsmax.empty() ? std::vector<uint8_t>{0} : t.qabsmax),
        absmax2(t.absmax2.empty() ? std::vector<float>{0.0f} : t.absmax2) {
    view.numel = t.numel;
    view.block = t.block;
    view.packed = packed.get();
    if (t.double_quantized()) {
      view.qabsmax = qabsmax.get();
      view.absmax2 = absmax2.get();
      view.offset = t.offset;
    } else {
      view.absmax = absmax.get();
    }
  }
  DeviceArray<uint8_t> packed;
  DeviceArray<float> absmax;
  DeviceArray<uint8_t> qabsmax;
  DeviceArray<float> absmax2;
  Nf4DeviceTensor view;
};

TEST(Nf4Cuda, DequantizesBitForBitAsTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  cudaStream_t stream = nullptr;
  SPW_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // 256 * 64 * 3 + 33: three scale blocks of double quantization and a
  // partial one, over NF4 blocks ending in a partial, odd one.
  for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{63}, int64_t{64}, int64_t{65}, int64_t{1000},
                    int64_t{256 * 64 * 3 + 33}}) {
    for (bool dq : {false, true}) {
      SCOPED_TRACE("n " + std::to_string(n) + (dq ? ", double-quantized" : ""));
      const std::vector<float> x = weights(n, 7 + static_cast<uint64_t>(n));
      const Nf4Tensor t = nf4_quantize(x, dq, "test");
      std::vector<float> cpu(static_cast<size_t>(n));
      t.dequantize(cpu);
      OnDevice d(t);
      DeviceArray<float> out(static_cast<size_t>(n));
      nf4_dequantize_cuda(d.view, out.get(), stream);
      SPW_CUDA(cudaStreamSynchronize(stream));
      const std::vector<float> gpu = out.download();
      DeviceArray<bf16> out16(static_cast<size_t>(n));
      nf4_dequantize_bf16_cuda(d.view, out16.get(), stream);
      SPW_CUDA(cudaStreamSynchronize(stream));
      const std::vector<bf16> gpu16 = out16.download();
      int64_t wrong = 0, wrong16 = 0;
      for (size_t i = 0; i < cpu.size(); ++i) {
        if (float_bits(gpu[i]) != float_bits(cpu[i])) ++wrong;
        if (gpu16[i].bits != split_master_bits(float_bits(cpu[i])).working) ++wrong16;
      }
      EXPECT_EQ(wrong, 0) << "f32 values differ from the CPU's";
      EXPECT_EQ(wrong16, 0) << "bf16 values differ from the CPU's rounded";
    }
  }
  SPW_CUDA(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace spillway::ops
