// The Hopper GEMM's fused RoPE epilogue (gemm_hopper.cu, Epilogue::kRope):
// after the q|k|v projection, the workers (warps 1-3 of the producer
// warpgroup) rotate the q and k heads of the staged tile in place and the
// leader stores the tile by TMA, while the consumers multiply the next one.
// The rotated q|k|v is never stored unrotated and read back, as it is by
// the projection followed by the separate rope kernel. Device code for
// sm_90a only, like hopper_ptx.cuh.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "ops/gemm_hopper_handoff.cuh"
#include "ops/gemm_hopper_tiles.cuh"
#include "ops/hopper_ptx.cuh"
#include "ops/rope_math.cuh"

namespace spillway::ops::hopper {

// The byte offset of column `col`'s 16-byte chunk of tile row `row` in the
// staging area: each consumer's 64 rows as four 64 x 64 boxes, 128-byte
// swizzled (stage_tile).
__device__ __forceinline__ int staged_at(int row, int col) {
  const int r = row % 64;
  return (row / 64) * (kStagingBytes / kConsumers) + (col / 64) * 8192 + r * 128 + ((((col % 64) / 8) ^ (r % 8)) * 16);
}

// A thread loads kRopeBatch vectors (8 pairs each, with their cosines and
// sines) before rotating any, so their latencies overlap.
inline constexpr int kRopeBatch = 2;

__device__ void rope_worker(const CUtensorMap* map_c, const Params& p, uint8_t* staging) {
  const int w = threadIdx.x - 32;
  const bool leader = w == kWorkerThreads - 1;  // one with the fewest vectors to rotate
  const int half = p.head_dim / 2;
  // A tile row's 256 columns hold 128 pairs (i, i + half) of its heads: 16 vectors of 8.
  constexpr int kVectors = kBM * (kBN / 2) / 8;
  const float* cos_t = p.cos_sin;
  const float* sin_t = p.cos_sin + static_cast<int64_t>(p.seq) * half;
  const int tiles = p.num_m * p.num_n;
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    int mb, nb;
    tile_of(t, p, mb, nb);
    const int col0 = nb * kBN;
    workers_take_tile();
    if (col0 < p.rotated_cols) {  // else all v: stored as it is
      const int first_pos = (mb * kBM) % p.seq;  // seq is whole tiles: the rows are consecutive positions
      for (int base = w; base < kVectors; base += kWorkerThreads * kRopeBatch) {
        uint4 lo[kRopeBatch], hi[kRopeBatch];
        float4 c[kRopeBatch][2], s[kRopeBatch][2];
        int at_lo[kRopeBatch], at_hi[kRopeBatch];
        bool rotates[kRopeBatch];
#pragma unroll
        for (int b = 0; b < kRopeBatch; ++b) {
          const int v = base + kWorkerThreads * b;
          const int row = v / 16, e = 8 * (v % 16);
          const int i0 = e % half, col = (e / half) * p.head_dim + i0;
          rotates[b] = v < kVectors && col0 + col < p.rotated_cols;
          if (rotates[b]) {
            at_lo[b] = staged_at(row, col);
            at_hi[b] = staged_at(row, col + half);
            lo[b] = *reinterpret_cast<const uint4*>(staging + at_lo[b]);
            hi[b] = *reinterpret_cast<const uint4*>(staging + at_hi[b]);
            const int64_t angle_at = static_cast<int64_t>(first_pos + row) * half + i0;
#pragma unroll
            for (int q = 0; q < 2; ++q) {
              c[b][q] = __ldg(reinterpret_cast<const float4*>(cos_t + angle_at) + q);
              s[b][q] = __ldg(reinterpret_cast<const float4*>(sin_t + angle_at) + q);
            }
          }
        }
#pragma unroll
        for (int b = 0; b < kRopeBatch; ++b) {
          if (!rotates[b]) continue;
          const auto* l2 = reinterpret_cast<const __nv_bfloat162*>(&lo[b]);
          const auto* h2 = reinterpret_cast<const __nv_bfloat162*>(&hi[b]);
          const float cs[8] = {c[b][0].x, c[b][0].y, c[b][0].z, c[b][0].w, c[b][1].x, c[b][1].y, c[b][1].z, c[b][1].w};
          const float sn[8] = {s[b][0].x, s[b][0].y, s[b][0].z, s[b][0].w, s[b][1].x, s[b][1].y, s[b][1].z, s[b][1].w};
          uint4 new_lo, new_hi;
          auto* nl2 = reinterpret_cast<__nv_bfloat162*>(&new_lo);
          auto* nh2 = reinterpret_cast<__nv_bfloat162*>(&new_hi);
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            const float2 l = __bfloat1622float2(l2[k]), h = __bfloat1622float2(h2[k]);
            float l0, h0, l1, h1;
            rope_math::rotate(l.x, h.x, cs[2 * k], sn[2 * k], l0, h0);
            rope_math::rotate(l.y, h.y, cs[2 * k + 1], sn[2 * k + 1], l1, h1);
            nl2[k] = __floats2bfloat162_rn(l0, l1);
            nh2[k] = __floats2bfloat162_rn(h0, h1);
          }
          *reinterpret_cast<uint4*>(staging + at_lo[b]) = new_lo;
          *reinterpret_cast<uint4*>(staging + at_hi[b]) = new_hi;
        }
      }
    }
    fence_async_shared();
    worker_sync();
    if (leader) {
      for (int c = 0; c < kConsumers; ++c) {
        for (int j = 0; j < 4; ++j) {
          tma_store(map_c, col0 + 64 * j, mb * kBM + 64 * c, staging + c * (kStagingBytes / kConsumers) + j * 8192);
        }
      }
      tma_store_commit();
      tma_store_wait_read();
    }
    workers_release_staging(t + static_cast<int>(gridDim.x) < tiles);
  }
  if (leader) tma_store_wait_all();
}

}  // namespace spillway::ops::hopper
