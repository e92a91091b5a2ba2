// The tiling of the Hopper GEMM (gemm_hopper.cu) and the layout of the
// shared memory its fused epilogues (gemm_hopper_swiglu.cuh) share with it:
// tile and stage sizes, the persistent CTAs' tile order, and how a
// consumer's accumulators are staged as TMA boxes.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "ops/gemm_hopper.h"

namespace spillway::ops::hopper {

inline constexpr int kBM = static_cast<int>(kHopperGemmTileM);
inline constexpr int kBN = static_cast<int>(kHopperGemmTileN);
inline constexpr int kBK = static_cast<int>(kHopperGemmTileK);
inline constexpr int kStages = 3;
inline constexpr int kConsumers = 2;                       // warpgroups of 64 rows each
inline constexpr int kThreads = 128 * (kConsumers + 1);    // plus the producer
inline constexpr int kABytes = kBM * kBK * 2;              // 16 KiB a stage
inline constexpr int kBBytes = kBN * kBK * 2;              // 32 KiB a stage
inline constexpr int kHalfBBytes = kBBytes / 2;            // one TMA box of 128 rows
// Buffers first (each 1024-byte aligned, as 128-byte swizzling needs): the
// stages, then each consumer's staging area for TMA stores; the barriers
// last; 1 KiB of slack lets the kernel align the dynamic base.
inline constexpr int kStagingBytes = kConsumers * 64 * kBN * 2;  // each consumer's 64 x 256 outputs, 32 KiB
// m-blocks walked together, so the CTAs running at once share A and B panels
// in L2: 16 m-blocks by about 8 n-blocks is ~8 MiB of each for 132 SMs.
inline constexpr int kGroupM = 16;

// kSwigluBackward: the product is the gradient of the MLP's SwiGLU output
// (dout = dy * W_down, B stored [k, n]); instead of dout the kernel writes
// dgate|dup from it and the forward's gate|up. kRope: the q|k|v projection,
// its q and k heads rotated before they are stored.
enum class Epilogue { kStore, kSwiglu, kSwigluBackward, kRope };

// The fused epilogues' elementwise work runs on warps 1-3 of the producer
// warpgroup (the workers), idle otherwise, while the consumers multiply the
// next tile. kSwigluBackward's workers take a staged dout tile in chunks of
// 32 rows by 64 columns, each chunk's gate and up loaded by TMA into one of
// two buffers, turned into dgate and dup in place and stored from there by
// TMA; kSwiglu's need no buffers (swiglu_gate_worker).
inline constexpr int kWorkerThreads = 96;
inline constexpr int kWorkerRows = 32;
inline constexpr int kWorkerBoxBytes = kWorkerRows * 64 * 2;                // 4 KiB
inline constexpr int kWorkerBytes = 2 * 2 * kWorkerBoxBytes;                // two buffers of gate and up
inline constexpr int kWorkerChunks = (kBM / kWorkerRows) * (kBN / 64);     // 16 a tile
inline constexpr int kBarriers = 2 * kStages + 2;  // full, empty; kSwigluBackward's two buffers loaded

template <Epilogue kMode>
constexpr int smem_bytes() {
  return kStages * (kABytes + kBBytes) + kStagingBytes + (kMode == Epilogue::kSwigluBackward ? kWorkerBytes : 0) +
         kBarriers * 8 + 1024;
}

// The tiling; the matrices themselves reach the kernel as TMA maps.
struct Params {
  int num_m = 0, num_n = 0, k_blocks = 0;
  int ffn = 0;  // kSwiglu, kSwigluBackward: the gate's width (gate_up is [m, 2 * ffn])
  // kRope: the product's columns [0, rotated_cols) are heads of head_dim
  // to rotate; row r is the token at position r % seq (from pos0, which
  // cos_sin holds: [2][seq][head_dim / 2], its cosines then its sines).
  int head_dim = 0, rotated_cols = 0, seq = 0;
  const float* cos_sin = nullptr;
};

__device__ __forceinline__ void tile_of(int t, const Params& p, int& mb, int& nb) {
  const int per_group = kGroupM * p.num_n;
  const int first_m = (t / per_group) * kGroupM;
  const int rows = min(p.num_m - first_m, kGroupM);
  const int local = t % per_group;
  mb = first_m + local % rows;
  nb = local / rows;
}

// Writes 16-byte chunk `i` (columns 8i..8i+7 of a 64-row block, as four
// 64 x 64 boxes) of rows r and r + 8 into `staging` in TMA's 128-byte
// swizzle: chunk c of row r sits at chunk c ^ (r % 8), which also spreads a
// warp's writes over all banks. `pair` is this thread's two columns, packed.
__device__ __forceinline__ void stage_pair(uint8_t* staging, int i, int r, int lane, uint32_t pair) {
  uint8_t* box = staging + (i / 8) * 8192;
  const int chunk = (i % 8) ^ (r % 8);
  *reinterpret_cast<uint32_t*>(box + r * 128 + chunk * 16 + 4 * (lane % 4)) = pair;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// The byte offset of column `col`'s 16-byte chunk of tile row `row` in the
// staging area: each consumer's 64 rows as four 64 x 64 boxes, 128-byte
// swizzled (stage_tile).
__device__ __forceinline__ int staged_at(int row, int col) {
  const int r = row % 64;
  return (row / 64) * (kStagingBytes / kConsumers) + (col / 64) * 8192 + r * 128 + ((((col % 64) / 8) ^ (r % 8)) * 16);
}

// A consumer's 64 x 256 accumulators, rounded to bf16, into `staging` as
// four 64 x 64 boxes in TMA's 128-byte swizzle. Thread (warp w, lane l)
// holds, for each 8-column chunk i, columns 8i + 2(l % 4) + {0, 1} of rows
// r0 = 16w + l / 4 and r0 + 8 (wgmma's accumulator layout).
__device__ __forceinline__ void stage_tile(const float (&d)[128], uint8_t* staging, int r0, int lane) {
#pragma unroll
  for (int i = 0; i < 32; ++i) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      stage_pair(staging, i, r0 + 8 * half, lane, pack_bf16(d[4 * i + 2 * half], d[4 * i + 2 * half + 1]));
    }
  }
}

}  // namespace spillway::ops::hopper
