// NF4: QLoRA's 4-bit NormalFloat, exactly as bitsandbytes defines it
// (bitsandbytes.functional.quantize_4bit / dequantize_4bit with
// quant_type="nf4" on the CPU, whose quantizer is torch code in
// backends/default/ops.py). bitsandbytes' CUDA kernel (dQuantizeNF4's
// decision tree) compares with the same 15 float32 midpoints and sends a
// tie to the lower code too, so finite values of full blocks with an
// absmax of at least 1e-38 get the same codes; at the edges it differs: it
// multiplies the last partial block by the reciprocal as well, has no
// 1e-38 floor, and its fmaxf passes over NaN while its tree sends NaN to
// code 0. spillway follows the CPU path.
//
// A tensor is quantized flattened, in blocks of `block` values (64 by
// default); the last block may be partial. Each block keeps its absmax (the
// largest |x|, float32) and each value the 4-bit index of the NF4 code
// nearest to x / absmax:
//   - a full block scales by multiplying with 1 / max(absmax, 1e-38); the
//     last partial block divides by max(absmax, 1e-38), and that clamped
//     value is what it stores as its absmax (full blocks store theirs as is);
//   - the scaled value is clamped to [-1, 1], and its index is the number of
//     midpoints (code[i] + code[i+1]) / 2 (float32) it lies above: a value
//     exactly on a midpoint takes the lower code;
//   - NaN (a NaN in the block makes its absmax NaN, and inf * 0 is NaN too)
//     takes the top index, 15, as torch.bucketize gives it;
//   - two indices share a byte, the first in the high nibble; an odd count
//     pads the last low nibble with index 7 (the code 0).
// Dequantizing is code[index] * absmax, in float32.
//
// Double quantization (compress_statistics=True) stores the absmax too in
// 8 bits: their mean (the offset) is taken off, and the rest quantized in
// blocks of 256 over bitsandbytes' signed dynamic map
// (create_dynamic_map()), each 256-block with its own float32 absmax, as
// bitsandbytes' CPU library does it (nearest code through a table of 65536
// steps over [-1, 1]); the absmax come back as code * absmax2 + offset.
// bitsandbytes takes the offset as torch's float32 mean, whose summation
// order depends on the CPU's vector width; spillway's is the mean summed in
// double and rounded to float32 (nf4_scale_offset), which may differ from
// torch's in the last bit. Given the same offset, every byte and float
// matches.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace spillway::ops {

inline constexpr int64_t kNf4Block = 64;
inline constexpr int64_t kNf4ScaleBlock = 256;

// The 16 NF4 values (bitsandbytes' get_4bit_type("nf4"), float32), ascending:
// index 0 is -1, 7 is 0, 15 is 1.
const std::array<float, 16>& nf4_code();
// bitsandbytes' signed 8-bit dynamic map (create_dynamic_map()), ascending.
const std::array<float, 256>& dynamic_map_code();

inline int64_t nf4_blocks(int64_t numel, int64_t block = kNf4Block) { return (numel + block - 1) / block; }
inline int64_t nf4_packed_bytes(int64_t numel) { return (numel + 1) / 2; }

// x → packed [nf4_packed_bytes(n)] and absmax [nf4_blocks(n, block)].
void nf4_quantize(std::span<const float> x, int64_t block, std::span<uint8_t> packed, std::span<float> absmax);
// packed and absmax → out [n]: out.size() says n.
void nf4_dequantize(std::span<const uint8_t> packed, std::span<const float> absmax, int64_t block,
                    std::span<float> out);

// The offset double quantization subtracts: the mean of the absmax (summed
// in double, rounded to float32).
float nf4_scale_offset(std::span<const float> absmax);
// bitsandbytes' blockwise 8-bit quantization over the dynamic map:
// x → codes [n] and absmax [ceil(n / block)]. A block whose absmax is 0
// gets codes 0.
void dynamic_quantize(std::span<const float> x, int64_t block, std::span<uint8_t> codes, std::span<float> absmax);
// codes and absmax → out [n]: dynamic_map_code()[code] * absmax.
void dynamic_dequantize(std::span<const uint8_t> codes, std::span<const float> absmax, int64_t block,
                        std::span<float> out);

// One tensor stored NF4, with its scales plain or double-quantized.
struct Nf4Tensor {
  int64_t numel = 0;
  int64_t block = kNf4Block;
  std::vector<uint8_t> packed;
  // Plain: the absmax. Double-quantized: empty, the three below instead.
  std::vector<float> absmax;
  std::vector<uint8_t> qabsmax;  // the absmax less the offset, 8-bit
  std::vector<float> absmax2;    // one per kNf4ScaleBlock of qabsmax
  float offset = 0;

  bool double_quantized() const { return !qabsmax.empty(); }
  // The bytes stored: the packed codes and the scales.
  uint64_t bytes() const;
  // The absmax, dequantized where double-quantized.
  std::vector<float> scales() const;
  void dequantize(std::span<float> out) const;
};

// The bytes an Nf4Tensor of `numel` values keeps (its bytes()), without
// quantizing: what a QLoRA base will take, for planning.
uint64_t nf4_stored_bytes(int64_t numel, bool double_quant, int64_t block = kNf4Block);

// Quantizes x; with `double_quant` its scales too. Throws Error naming
// `what` when x holds a NaN or an infinity (whose blocks bitsandbytes turns
// into NaN: a weight stored so would be lost).
Nf4Tensor nf4_quantize(std::span<const float> x, bool double_quant, const char* what, int64_t block = kNf4Block);

}  // namespace spillway::ops

#ifdef SPILLWAY_HAS_CUDA
#include <cuda_runtime_api.h>

#include "base/dtype.h"

namespace spillway::ops {

// An Nf4Tensor's arrays in device memory.
struct Nf4DeviceTensor {
  int64_t numel = 0;
  int64_t block = kNf4Block;
  const uint8_t* packed = nullptr;
  const float* absmax = nullptr;  // plain scales; null where double-quantized
  const uint8_t* qabsmax = nullptr;  // double-quantized: the three below instead
  const float* absmax2 = nullptr;
  float offset = 0;
};

// GPU Nf4Tensor::dequantize into `out` [numel], bit for bit: each scale, and
// each code times its scale, rounded alone as the CPU (built without
// contraction) rounds them.
void nf4_dequantize_cuda(const Nf4DeviceTensor& t, float* out, cudaStream_t stream);
// The same values rounded to bf16 as the GPU engines round a master to the
// working copy the matmuls read (ops/master_split.h: nearest, ties away from
// zero): a QLoRA step's weight, made just before the matmul that reads it.
void nf4_dequantize_bf16_cuda(const Nf4DeviceTensor& t, bf16* out, cudaStream_t stream);

}  // namespace spillway::ops
#endif
