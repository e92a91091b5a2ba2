#include <cuda_bf16.h>

#include <cstdint>

#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/dependent_launch.cuh"
#include "ops/batch_linear_tc.h"
#include "ops/batch_linear_tc_slices.cuh"

namespace spillway::ops {

namespace {

constexpr int kWarps = 4;         // a block's warps, each its own 8 output columns
constexpr int kColumns = 8;       // a warp's columns: one mma tile's n
constexpr int64_t kBlock = 32;    // inputs a step of the chain takes (two instructions)
constexpr int kSplitDepth = 8;    // blocks a warp loads ahead running split (4 KB of W)

// d += a b over one m16n8k16 tile: bf16 inputs, fp32 sums.
__device__ inline void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ inline int64_t slice_end(int64_t s0, int64_t in) {
  return s0 + kBatchLinearTcSlice < in ? s0 + kBatchLinearTcSlice : in;
}

__device__ inline uint4 load16(const __nv_bfloat16* p, bool ok) {
  return ok ? __ldg(reinterpret_cast<const uint4*>(p)) : make_uint4(0, 0, 0, 0);
}

// x's row for y's row r, or null past the rows (read as zeros).
__device__ inline const __nv_bfloat16* x_row(const __nv_bfloat16* x, const int32_t* row_index, int64_t r,
                                             int64_t rows, int64_t in) {
  if (r >= rows) return nullptr;
  return x + (row_index != nullptr ? static_cast<int64_t>(row_index[r]) : r) * in;
}

// One slice's sums for a warp's `Tiles` m16 tiles (rows r0 + 16 t + ...) and
// its 8 columns (n0 + ...), from zero.
//
// Lane (g, q) = (lane / 4, lane % 4) loads 8 consecutive inputs at block
// offset 8q: of W's row n0 + g, and of x's rows g and g + 8 of each tile.
// The first instruction takes inputs 8q..8q+3 of every lane, the second
// 8q+4..8q+7, both as the fragments' k = 2q, 2q+1 (first pair) and 2q+8,
// 2q+9 (second pair): x and W see the same order, so the product is the
// matmul's, its order fixed by `in` alone.
//
// `Depth` blocks are loaded before any of them is multiplied: left to
// itself the compiler waits for each block's loads before issuing the
// next block's, one 16-byte load in flight a lane, and a decode step then
// reads its weights at half the card's bandwidth.
//
// Launched dependent (device/cuda/dependent_launch.cuh): W's first `Depth`
// blocks are in flight before the wait for the kernels that make x.
template <int Tiles, int Depth>
__device__ inline void slice_sums(const __nv_bfloat16* x, const int32_t* row_index, const __nv_bfloat16* w,
                                  int64_t rows, int64_t in, int64_t out, int64_t r0, int64_t n0, int64_t k_begin,
                                  int64_t k_end, float (&sums)[Tiles][4]) {
  const int lane = static_cast<int>(threadIdx.x % 32), g = lane / 4, q = lane % 4;
  const bool column_ok = n0 + g < out;
  const __nv_bfloat16* w_row = w + (column_ok ? n0 + g : 0) * in;
  uint4 b[Depth];
  auto load_w = [&](int64_t k0) {
#pragma unroll
    for (int u = 0; u < Depth; ++u) {
      const int64_t k = k0 + u * kBlock + 8 * q;
      b[u] = load16(w_row + k, column_ok && k < k_end);
    }
  };
  load_w(k_begin);
  prior_grids_wait();
  const __nv_bfloat16* lo[Tiles];
  const __nv_bfloat16* hi[Tiles];
#pragma unroll
  for (int t = 0; t < Tiles; ++t) {
    lo[t] = x_row(x, row_index, r0 + 16 * t + g, rows, in);
    hi[t] = x_row(x, row_index, r0 + 16 * t + g + 8, rows, in);
#pragma unroll
    for (int i = 0; i < 4; ++i) sums[t][i] = 0.0f;
  }
  for (int64_t k0 = k_begin; k0 < k_end; k0 += Depth * kBlock) {
    if (k0 != k_begin) load_w(k0);
    uint4 a[Depth][Tiles], c[Depth][Tiles];
#pragma unroll
    for (int u = 0; u < Depth; ++u) {
      const int64_t k = k0 + u * kBlock + 8 * q;
      const bool k_ok = k < k_end;
#pragma unroll
      for (int t = 0; t < Tiles; ++t) {
        a[u][t] = load16(lo[t] + k, lo[t] != nullptr && k_ok);
        c[u][t] = load16(hi[t] + k, hi[t] != nullptr && k_ok);
      }
    }
#pragma unroll
    for (int u = 0; u < Depth; ++u) {
      if (k0 + u * kBlock >= k_end) break;  // the same for every lane: past the slice
#pragma unroll
      for (int t = 0; t < Tiles; ++t) {
        mma_bf16(sums[t], a[u][t].x, c[u][t].x, a[u][t].y, c[u][t].y, b[u].x, b[u].y);
        mma_bf16(sums[t], a[u][t].z, c[u][t].z, a[u][t].w, c[u][t].w, b[u].z, b[u].w);
      }
    }
  }
}

__device__ inline void store(float* y, float v) { *y = v; }
__device__ inline void store(__nv_bfloat16* y, float v) { *y = __float2bfloat16_rn(v); }

// Element i of a lane's tile: row g (+ 8 for i >= 2), column 2q + i % 2.
__device__ inline int64_t tile_row(int i) { return static_cast<int64_t>(threadIdx.x % 32 / 4 + (i >= 2 ? 8 : 0)); }
__device__ inline int64_t tile_column(int i) { return static_cast<int64_t>(threadIdx.x % 4 * 2 + i % 2); }

// Running whole, a block's 8 warps share tiles of x and W staged in shared
// memory: the block computes 128 rows x 64 columns, warp (wm, wn) of them
// rows 64 wm.. (four m16 tiles) and columns 16 wn.. (two n8 tiles). Each
// block of 32 inputs is copied in (cp.async, kStages ahead) and every lane
// then reads the 16 bytes slice_sums would have read from global memory,
// so the same mma instructions see the same operands in the same order:
// the same bits as the split path, slice by slice, each slice's sums added
// to the running ones in order.
constexpr int kTileRows = 128, kTileColumns = 64, kTileWarps = 8, kStages = 3;

__device__ inline void copy16(__nv_bfloat16* shared, const __nv_bfloat16* global, bool ok) {
  const auto to = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(global), "r"(ok ? 16 : 0)
               : "memory");
}
__device__ inline void copies_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ inline void copies_wait_all_but_newest() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kStages - 2) : "memory");
}

template <typename Out>
__global__ void __launch_bounds__(kTileWarps * 32)
    whole_kernel(const __nv_bfloat16* x, const int32_t* row_index, const __nv_bfloat16* w, Out* y, int64_t rows,
                 int64_t in, int64_t out) {
  __shared__ __align__(16) __nv_bfloat16 xs[kStages][kTileRows * kBlock];
  __shared__ __align__(16) __nv_bfloat16 ws[kStages][kTileColumns * kBlock];
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int g = lane / 4, q = lane % 4;
  const int64_t block_r0 = static_cast<int64_t>(blockIdx.y) * kTileRows;
  const int64_t block_n0 = static_cast<int64_t>(blockIdx.x) * kTileColumns;
  const int wr0 = (warp / 4) * 64, wn0 = (warp % 4) * 16;

  // Thread i copies 16 bytes of x's tile rows i / 4 and i / 4 + 64 and of
  // W's tile row i / 4 (inputs 8 (i % 4)..): zeros past the rows, columns
  // or inputs.
  const int copy_row = static_cast<int>(threadIdx.x / 4), copy_k = static_cast<int>(threadIdx.x % 4) * 8;
  const __nv_bfloat16* x_from[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) x_from[h] = x_row(x, row_index, block_r0 + copy_row + 64 * h, rows, in);
  const bool w_ok = block_n0 + copy_row < out;
  const __nv_bfloat16* w_from = w + (w_ok ? block_n0 + copy_row : 0) * in;
  const int64_t k_blocks = (in + kBlock - 1) / kBlock;
  auto stage_in = [&](int64_t kb) {
    const int st = static_cast<int>(kb % kStages);
    const int64_t k = kb * kBlock + copy_k;
    const bool k_ok = k < in;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const bool ok = x_from[h] != nullptr && k_ok;
      copy16(&xs[st][(copy_row + 64 * h) * kBlock + copy_k], ok ? x_from[h] + k : x, ok);
    }
    copy16(&ws[st][copy_row * kBlock + copy_k], w_ok && k_ok ? w_from + k : w, w_ok && k_ok);
  };

  float part[4][2][4] = {}, total[4][2][4] = {};
#pragma unroll
  for (int kb = 0; kb < kStages - 1; ++kb) {
    if (kb < k_blocks) stage_in(kb);
    copies_commit();
  }
  constexpr int64_t kBlocksPerSlice = kBatchLinearTcSlice / kBlock;
  for (int64_t kb = 0; kb < k_blocks; ++kb) {
    copies_wait_all_but_newest();
    __syncthreads();  // block kb is in, and every warp is done with the stage refilled next
    if (kb + kStages - 1 < k_blocks) stage_in(kb + kStages - 1);
    copies_commit();
    const int st = static_cast<int>(kb % kStages);
    uint4 b[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      b[j] = *reinterpret_cast<const uint4*>(&ws[st][(wn0 + 8 * j + g) * kBlock + 8 * q]);
    }
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const uint4 a = *reinterpret_cast<const uint4*>(&xs[st][(wr0 + 16 * t + g) * kBlock + 8 * q]);
      const uint4 c = *reinterpret_cast<const uint4*>(&xs[st][(wr0 + 16 * t + g + 8) * kBlock + 8 * q]);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        mma_bf16(part[t][j], a.x, c.x, a.y, c.y, b[j].x, b[j].y);
        mma_bf16(part[t][j], a.z, c.z, a.w, c.w, b[j].z, b[j].w);
      }
    }
    if ((kb + 1) % kBlocksPerSlice == 0 || kb + 1 == k_blocks) {  // a slice's end
      const bool first = kb < kBlocksPerSlice;
      float* p = &part[0][0][0];
      float* sum = &total[0][0][0];
#pragma unroll
      for (int e = 0; e < 32; ++e) {
        sum[e] = first ? p[e] : __fadd_rn(sum[e], p[e]);
        p[e] = 0.0f;
      }
    }
  }
#pragma unroll
  for (int t = 0; t < 4; ++t) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t r = block_r0 + wr0 + 16 * t + tile_row(i), n = block_n0 + wn0 + 8 * j + tile_column(i);
        if (r < rows && n < out) store(y + r * out + n, total[t][j][i]);
      }
    }
  }
}

// Running split: block (x, s) sums slice s for its warps' columns and at
// most 16 Tiles rows into workspace[s][row][column]. The more tiles, the
// fewer blocks a warp loads ahead (its registers hold every tile's x).
template <int Tiles>
__global__ void __launch_bounds__(kWarps * 32)
    slice_kernel(const __nv_bfloat16* x, const int32_t* row_index, const __nv_bfloat16* w, float* workspace,
                 int64_t rows, int64_t in, int64_t out) {
  const int64_t n0 = (static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32) * kColumns;
  const int64_t s = blockIdx.y, s0 = s * kBatchLinearTcSlice;
  dependents_may_start();
  // A warp past the columns (n0 >= out) still waits inside, loading zeros.
  float part[Tiles][4];
  slice_sums<Tiles, kSplitDepth / Tiles>(x, row_index, w, rows, in, out, 0, n0, s0, slice_end(s0, in), part);
#pragma unroll
  for (int t = 0; t < Tiles; ++t) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t r = 16 * t + tile_row(i), n = n0 + tile_column(i);
      if (r < rows && n < out) workspace[(s * rows + r) * out + n] = part[t][i];
    }
  }
}

// The slices' sums added in order, one thread an output element (blocks of
// 64: a decode step's few thousand elements still reach most SMs).
template <typename Out>
__global__ void add_slices_kernel(const float* workspace, Out* y, int64_t rows, int64_t out, int64_t slices) {
  dependents_may_start();
  prior_grids_wait();
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= rows * out) return;
  store(y + e, split_sums::sum(workspace, rows * out, slices, e));
}

void check_shape(const bf16* x, const bf16* w, int64_t rows, int64_t in, int64_t out) {
  SPW_CHECK(in > 0 && in % 8 == 0, "batch_linear_tc_cuda", "the input width must be a positive multiple of 8, got ",
            in);
  SPW_CHECK(reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0,
            "batch_linear_tc_cuda", "x and w must be 16-byte aligned");
  const int64_t column_blocks = (out + kWarps * kColumns - 1) / (kWarps * kColumns);
  SPW_CHECK(rows >= 0 && out > 0 && column_blocks < (1ll << 31) && rows / kTileRows < 65535,
            "batch_linear_tc_cuda", "bad shape: ", rows, " rows, ", out, " outputs");
}

// The split half: every slice's sums into the workspace (rows 1..64).
void launch_slices(const bf16* x, const int32_t* row_index, const bf16* w, float* workspace, int64_t rows,
                   int64_t in, int64_t out, cudaStream_t stream) {
  const auto* xb = reinterpret_cast<const __nv_bfloat16*>(x);
  const auto* wb = reinterpret_cast<const __nv_bfloat16*>(w);
  const int64_t column_blocks = (out + kWarps * kColumns - 1) / (kWarps * kColumns);
  const dim3 grid(static_cast<unsigned>(column_blocks), static_cast<unsigned>(batch_linear_tc_slices(in)));
  if (rows <= 16) {
    launch_dependent(slice_kernel<1>, grid, dim3(kWarps * 32), 0, stream, xb, row_index, wb, workspace, rows,
                     in, out);
  } else if (rows <= 32) {
    launch_dependent(slice_kernel<2>, grid, dim3(kWarps * 32), 0, stream, xb, row_index, wb, workspace, rows,
                     in, out);
  } else {
    static_assert(kBatchLinearTcSplitRows == 64, "split rows beyond four tiles");
    launch_dependent(slice_kernel<4>, grid, dim3(kWarps * 32), 0, stream, xb, row_index, wb, workspace, rows,
                     in, out);
  }
  SPW_CUDA(cudaGetLastError());
}

template <typename Out>
void launch(const bf16* x, const int32_t* row_index, const bf16* w, Out* y, int64_t rows, int64_t in, int64_t out,
            float* workspace, cudaStream_t stream) {
  check_shape(x, w, rows, in, out);
  if (rows == 0) return;
  const auto* xb = reinterpret_cast<const __nv_bfloat16*>(x);
  const auto* wb = reinterpret_cast<const __nv_bfloat16*>(w);
  if (workspace != nullptr && batch_linear_tc_workspace_bytes(rows, in, out) > 0) {
    launch_slices(x, row_index, w, workspace, rows, in, out, stream);
    const int64_t elements = rows * out;
    launch_dependent(add_slices_kernel<Out>, dim3(static_cast<unsigned>((elements + 63) / 64)), dim3(64), 0, stream,
                     static_cast<const float*>(workspace), y, rows, out, batch_linear_tc_slices(in));
  } else {
    const auto row_blocks = static_cast<unsigned>((rows + kTileRows - 1) / kTileRows);
    const auto tile_columns = static_cast<unsigned>((out + kTileColumns - 1) / kTileColumns);
    whole_kernel<<<dim3(tile_columns, row_blocks), kTileWarps * 32, 0, stream>>>(xb, row_index, wb, y, rows, in,
                                                                                out);
  }
  SPW_CUDA(cudaGetLastError());
}

}  // namespace

void batch_linear_tc_cuda(const bf16* x, const int32_t* row_index, const bf16* w, bf16* y, int64_t rows, int64_t in,
                          int64_t out, float* workspace, cudaStream_t stream) {
  launch(x, row_index, w, reinterpret_cast<__nv_bfloat16*>(y), rows, in, out, workspace, stream);
}

void batch_linear_tc_cuda(const bf16* x, const int32_t* row_index, const bf16* w, float* y, int64_t rows, int64_t in,
                          int64_t out, float* workspace, cudaStream_t stream) {
  launch(x, row_index, w, y, rows, in, out, workspace, stream);
}

bool batch_linear_tc_slices_cuda(const bf16* x, const int32_t* row_index, const bf16* w, float* workspace,
                                 int64_t rows, int64_t in, int64_t out, cudaStream_t stream) {
  check_shape(x, w, rows, in, out);
  if (batch_linear_tc_slices_bytes(rows, in, out) == 0) return false;
  SPW_CHECK(workspace != nullptr, "batch_linear_tc_slices_cuda", "no workspace for ", rows, " rows");
  launch_slices(x, row_index, w, workspace, rows, in, out, stream);
  return true;
}

}  // namespace spillway::ops
