// The Hopper GEMM's fused SwiGLU epilogues (gemm_hopper.cu): the
// consumers stage their tile and hand it to the workers, warps 1-3 of the
// producer warpgroup, which compute the SwiGLU gate (after the gate|up
// product) or its backward (after down_proj's dX product) and store the
// result by TMA while the consumers multiply the next tile. Device code for
// sm_90a only, like hopper_ptx.cuh.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "ops/gemm_hopper_handoff.cuh"
#include "ops/gemm_hopper_tiles.cuh"
#include "ops/hopper_ptx.cuh"
#include "ops/swiglu_math.cuh"

namespace spillway::ops::hopper {

using swiglu_math::silu_times;  // swiglu_cuda.cu's, so the fused gate gives the same bits

// kSwiglu's workers. The leader stores the staged gate|up tile (its gate
// columns in boxes 0-1 of each consumer's half, their up columns in 2-3);
// once the stores have read the staging area, each worker turns its
// vectors' gate values into silu(gate) * up in place (from gate and up as
// rounded to bf16, as the separate kernel reads them), and the leader
// stores those boxes to the SwiGLU output. A thread loads kGateBatch
// vectors before computing any, so their latencies overlap.
inline constexpr int kGateBatch = 4;

__device__ void swiglu_gate_worker(const CUtensorMap* map_gate_up, const CUtensorMap* map_out, const Params& p,
                                   uint8_t* staging) {
  const int w = threadIdx.x - 32;
  const bool leader = w == kWorkerThreads - 1;  // one with the fewest vectors to compute
  constexpr int kHalf = kStagingBytes / kConsumers;
  constexpr int kVectors = kBM * (kBN / 2) / 8;  // the tile's gate values, 8 at a time
  const int tiles = p.num_m * p.num_n;
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    int mb, nb;
    tile_of(t, p, mb, nb);
    workers_take_tile();
    if (leader) {
      for (int c = 0; c < kConsumers; ++c) {
        for (int j = 0; j < 4; ++j) {
          tma_store(map_gate_up, (j < 2 ? 0 : p.ffn) + nb * (kBN / 2) + 64 * (j % 2), mb * kBM + 64 * c,
                    staging + c * kHalf + j * 8192);
        }
      }
      tma_store_commit();
      tma_store_wait_read();
    }
    worker_sync();
    for (int base = w; base < kVectors; base += kWorkerThreads * kGateBatch) {
      uint4 g[kGateBatch], u[kGateBatch];
      int at[kGateBatch];
#pragma unroll
      for (int i = 0; i < kGateBatch; ++i) {
        const int v = base + kWorkerThreads * i;
        at[i] = staged_at(v / 16, 8 * (v % 16));  // 16 vectors of 8 gate values a row
        if (v < kVectors) {
          g[i] = *reinterpret_cast<const uint4*>(staging + at[i]);
          u[i] = *reinterpret_cast<const uint4*>(staging + at[i] + 2 * 8192);
        }
      }
#pragma unroll
      for (int i = 0; i < kGateBatch; ++i) {
        if (base + kWorkerThreads * i >= kVectors) continue;
        const auto* g2 = reinterpret_cast<const __nv_bfloat162*>(&g[i]);
        const auto* u2 = reinterpret_cast<const __nv_bfloat162*>(&u[i]);
        uint4 h;
        auto* h2 = reinterpret_cast<__nv_bfloat162*>(&h);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const float2 gf = __bfloat1622float2(g2[k]), uf = __bfloat1622float2(u2[k]);
          h2[k] = __floats2bfloat162_rn(silu_times(gf.x, uf.x), silu_times(gf.y, uf.y));
        }
        *reinterpret_cast<uint4*>(staging + at[i]) = h;
      }
    }
    fence_async_shared();
    worker_sync();
    if (leader) {
      for (int c = 0; c < kConsumers; ++c) {
        for (int j = 0; j < 2; ++j) {
          tma_store(map_out, nb * (kBN / 2) + 64 * j, mb * kBM + 64 * c, staging + c * kHalf + j * 8192);
        }
      }
      tma_store_commit();
      tma_store_wait_read();
    }
    workers_release_staging(t + static_cast<int>(gridDim.x) < tiles);
  }
  if (leader) tma_store_wait_all();
}

// Eight elements of SwiGLU's backward: dgate and dup from 16 bytes each of
// dout, gate and up.
__device__ __forceinline__ void swiglu_backward8(const uint4& d_raw, const uint4& g_raw, const uint4& u_raw,
                                                 uint4& dg_raw, uint4& du_raw) {
  const auto* d2 = reinterpret_cast<const __nv_bfloat162*>(&d_raw);
  const auto* g2 = reinterpret_cast<const __nv_bfloat162*>(&g_raw);
  const auto* u2 = reinterpret_cast<const __nv_bfloat162*>(&u_raw);
  auto* dg2 = reinterpret_cast<__nv_bfloat162*>(&dg_raw);
  auto* du2 = reinterpret_cast<__nv_bfloat162*>(&du_raw);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 d = __bfloat1622float2(d2[k]), g = __bfloat1622float2(g2[k]), u = __bfloat1622float2(u2[k]);
    float dg0, du0, dg1, du1;
    swiglu_math::grads(d.x, g.x, u.x, dg0, du0);
    swiglu_math::grads(d.y, g.y, u.y, dg1, du1);
    dg2[k] = __floats2bfloat162_rn(dg0, dg1);
    du2[k] = __floats2bfloat162_rn(du0, du1);
  }
}

// A worker's share of a chunk: vectors w, w + 96, w + 192 (those below
// 256) of its 32 rows x 8 vectors, all loaded before any is computed, so
// their latencies overlap; dgate and dup replace gate and up in place.
inline constexpr int kWorkerVectors = (kWorkerRows * 8 + kWorkerThreads - 1) / kWorkerThreads;

__device__ __forceinline__ void swiglu_backward_chunk(const uint8_t* dout, uint8_t* gate, int w) {
  uint4 d[kWorkerVectors], g[kWorkerVectors], u[kWorkerVectors];
  int at[kWorkerVectors];
#pragma unroll
  for (int i = 0; i < kWorkerVectors; ++i) {
    const int v = w + kWorkerThreads * i;
    const int r = v / 8;
    at[i] = r * 128 + (((v % 8) ^ (r % 8)) * 16);  // 128-byte swizzle; rows 32 apart agree mod 8
    if (v < kWorkerRows * 8) {
      d[i] = *reinterpret_cast<const uint4*>(dout + at[i]);
      g[i] = *reinterpret_cast<const uint4*>(gate + at[i]);
      u[i] = *reinterpret_cast<const uint4*>(gate + kWorkerBoxBytes + at[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < kWorkerVectors; ++i) {
    if (w + kWorkerThreads * i < kWorkerRows * 8) {
      uint4 dg, du;
      swiglu_backward8(d[i], g[i], u[i], dg, du);
      *reinterpret_cast<uint4*>(gate + at[i]) = dg;
      *reinterpret_cast<uint4*>(gate + kWorkerBoxBytes + at[i]) = du;
    }
  }
}

// kSwigluBackward's workers (warps 1-3). Chunk c of a tile covers its rows
// 32 (c / 4).. and columns 64 (c % 4).. of dout, i.e. of both the gate and
// the up half of gate|up. One thread (the leader) issues the TMA loads and
// stores; the next chunk's loads run while this one is computed. While the
// workers take a tile, the next tile's gate|up is prefetched into L2, so
// the chunk loads wait for L2, not for device memory.
__device__ void swiglu_backward_worker(const CUtensorMap* map_dgate_up, const CUtensorMap* map_gate_up,
                                       const Params& p, const uint8_t* staging, uint8_t* buffers,
                                       uint64_t* loaded) {
  const int w = threadIdx.x - 32;
  const bool leader = w == kWorkerThreads - 1;  // one with the fewest vectors to compute
  const int tiles = p.num_m * p.num_n;
  // A tile's first gate column and first row.
  auto origin = [&](int t) {
    int mb, nb;
    tile_of(t, p, mb, nb);
    return int2{nb * kBN, mb * kBM};
  };
  auto load = [&](int2 tile, int c, int buffer) {
    const int col = tile.x + 64 * (c % 4), row = tile.y + kWorkerRows * (c / 4);
    uint8_t* gate = buffers + buffer * 2 * kWorkerBoxBytes;
    mbar_expect_tx(&loaded[buffer], 2 * kWorkerBoxBytes);
    tma_load(gate, map_gate_up, col, row, &loaded[buffer]);
    tma_load(gate + kWorkerBoxBytes, map_gate_up, p.ffn + col, row, &loaded[buffer]);
  };
  if (leader && static_cast<int>(blockIdx.x) < tiles) load(origin(blockIdx.x), 0, 0);
  int q = 0;  // chunks taken so far: buffer q % 2, its (q / 2)-th use
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int next_tile = t + static_cast<int>(gridDim.x);
    const int2 here = origin(t);
    const int2 next = next_tile < tiles ? origin(next_tile) : here;
    if (leader && next_tile < tiles) {
      for (int rows = 0; rows < kBM; rows += kWorkerRows) {
        for (int col = 0; col < kBN; col += 64) {
          tma_prefetch_l2(map_gate_up, next.x + col, next.y + rows);
          tma_prefetch_l2(map_gate_up, p.ffn + next.x + col, next.y + rows);
        }
      }
    }
    workers_take_tile();
    for (int c = 0; c < kWorkerChunks; ++c, ++q) {
      const int buffer = q & 1;
      if (leader) {
        if (c + 1 < kWorkerChunks || next_tile < tiles) {
          tma_store_wait_read();  // the other buffer's stores (the chunk before this one)
          load(c + 1 < kWorkerChunks ? here : next, (c + 1) % kWorkerChunks, buffer ^ 1);
        }
      }
      mbar_wait(&loaded[buffer], (q >> 1) & 1);
      uint8_t* gate = buffers + buffer * 2 * kWorkerBoxBytes;
      // The chunk's rows in its consumer's staged 64 x 256 (four 64 x 64 boxes).
      const uint8_t* dout =
          staging + (c / 8) * (kStagingBytes / kConsumers) + (c % 4) * 8192 + ((c / 4) % 2) * kWorkerBoxBytes;
      swiglu_backward_chunk(dout, gate, w);
      fence_async_shared();
      worker_sync();
      if (leader) {
        const int col = here.x + 64 * (c % 4), row = here.y + kWorkerRows * (c / 4);
        tma_store(map_dgate_up, col, row, gate);
        tma_store(map_dgate_up, p.ffn + col, row, gate + kWorkerBoxBytes);
        tma_store_commit();
      }
    }
    workers_release_staging(next_tile < tiles);  // this tile's dout read
  }
  if (leader) tma_store_wait_all();
}

}  // namespace spillway::ops::hopper
