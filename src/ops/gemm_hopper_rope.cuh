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

// A tile holds 256 / head_dim heads of each of its 128 rows (tokens), and
// a token's heads share their cosines and sines: a worker takes one row and
// 8 consecutive pairs (i, i + half) and rotates them in every head of the
// tile, so each cosine and sine is loaded once a tile, not once a head
// (4 times for head_dim 64; the loads come from L2, the table being 1 MiB
// for the 1B model). All the heads' values are loaded before any is
// rotated, so their latencies overlap.
inline constexpr int kRopeMaxHeads = kBN / 64;  // per tile, for head_dim 64; fewer for larger heads

__device__ void rope_worker(const CUtensorMap* map_c, const Params& p, uint8_t* staging) {
  const int w = threadIdx.x - 32;
  const bool leader = w == kWorkerThreads - 1;  // one with the fewest items to rotate
  const int half = p.head_dim / 2;
  const int heads = kBN / p.head_dim;
  const int items = kBM * (half / 8);  // (row, 8 pairs)
  const float* cos_t = p.cos_sin;
  const float* sin_t = p.cos_sin + static_cast<int64_t>(p.seq) * half;
  const int tiles = p.num_m * p.num_n;
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    int mb, nb;
    tile_of(t, p, mb, nb);
    const int col0 = nb * kBN;
    // The tile's heads to rotate (q and k); the rest (v) is stored as it is.
    const int rotated = min(heads, max(0, (p.rotated_cols - col0) / p.head_dim));
    workers_take_tile();
    if (rotated > 0) {
      const int first_pos = (mb * kBM) % p.seq;  // seq is whole tiles: the rows are consecutive positions
      for (int item = w; item < items; item += kWorkerThreads) {
        const int row = item / (half / 8), i0 = 8 * (item % (half / 8));
        const int64_t angle_at = static_cast<int64_t>(first_pos + row) * half + i0;
        float4 c[2], s[2];
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          c[q] = __ldg(reinterpret_cast<const float4*>(cos_t + angle_at) + q);
          s[q] = __ldg(reinterpret_cast<const float4*>(sin_t + angle_at) + q);
        }
        uint4 lo[kRopeMaxHeads], hi[kRopeMaxHeads];
#pragma unroll
        for (int h = 0; h < kRopeMaxHeads; ++h) {
          if (h < rotated) {
            lo[h] = *reinterpret_cast<const uint4*>(staging + staged_at(row, h * p.head_dim + i0));
            hi[h] = *reinterpret_cast<const uint4*>(staging + staged_at(row, h * p.head_dim + half + i0));
          }
        }
        const float cs[8] = {c[0].x, c[0].y, c[0].z, c[0].w, c[1].x, c[1].y, c[1].z, c[1].w};
        const float sn[8] = {s[0].x, s[0].y, s[0].z, s[0].w, s[1].x, s[1].y, s[1].z, s[1].w};
#pragma unroll
        for (int h = 0; h < kRopeMaxHeads; ++h) {
          if (h >= rotated) continue;
          const auto* l2 = reinterpret_cast<const __nv_bfloat162*>(&lo[h]);
          const auto* h2 = reinterpret_cast<const __nv_bfloat162*>(&hi[h]);
          uint4 new_lo, new_hi;
          auto* nl2 = reinterpret_cast<__nv_bfloat162*>(&new_lo);
          auto* nh2 = reinterpret_cast<__nv_bfloat162*>(&new_hi);
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            const float2 l = __bfloat1622float2(l2[k]), hv = __bfloat1622float2(h2[k]);
            float l0, h0, l1, h1;
            rope_math::rotate(l.x, hv.x, cs[2 * k], sn[2 * k], l0, h0);
            rope_math::rotate(l.y, hv.y, cs[2 * k + 1], sn[2 * k + 1], l1, h1);
            nl2[k] = __floats2bfloat162_rn(l0, l1);
            nh2[k] = __floats2bfloat162_rn(h0, h1);
          }
          *reinterpret_cast<uint4*>(staging + staged_at(row, h * p.head_dim + i0)) = new_lo;
          *reinterpret_cast<uint4*>(staging + staged_at(row, h * p.head_dim + half + i0)) = new_hi;
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
