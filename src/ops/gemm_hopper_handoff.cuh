// How the Hopper GEMM's consumers hand a finished tile to the workers
// (warps 1-3 of the producer warpgroup) that run a fused epilogue on it
// (gemm_hopper_swiglu.cuh, gemm_hopper_rope.cuh), and get their staging
// area back. Named barriers, one pair per consumer among its 128 threads
// and the 96 workers: the consumers arrive without waiting, so the workers
// take a tile while the consumers multiply the next one. Device code for
// sm_90a only, like hopper_ptx.cuh.
//
// An earlier version handed over through mbarriers (one arrival per
// consumer) at about the same speed, but compute-sanitizer's racecheck does
// not model mbarrier waits: it reported every staged value the workers read
// as a hazard, so it could not check these kernels at all. Now it reports
// none.
#pragma once

#include <cstdint>

#include "ops/gemm_hopper_tiles.cuh"
#include "ops/hopper_ptx.cuh"

namespace spillway::ops::hopper {

// Named barrier ids: 0 is __syncthreads, 1-2 warpgroup_sync, 3 worker_sync.
inline constexpr int kWorkerSyncBarrier = 3;
inline constexpr int kStagedBarrier = 4;        // + consumer: its tile is staged
inline constexpr int kStagingFreeBarrier = 6;   // + consumer: the workers are done with its staging area
inline constexpr int kHandoffThreads = 128 + kWorkerThreads;

__device__ __forceinline__ void worker_sync() { named_sync(kWorkerSyncBarrier, kWorkerThreads); }

// A consumer's tile (the accumulators rounded to bf16) into its staging
// area, once the workers are done with the previous one (`local`: tiles
// this CTA did before), then handed to them.
__device__ __forceinline__ void stage_for_workers(const float (&d)[128], uint8_t* staging, int local, int consumer,
                                                  int r0, int lane) {
  if (local > 0) named_sync(kStagingFreeBarrier + consumer, kHandoffThreads);
  stage_tile(d, staging, r0, lane);
  fence_async_shared();  // the workers' leader stores from here by TMA
  named_arrive(kStagedBarrier + consumer, kHandoffThreads);
}

// The workers: until both consumers have staged their half of the tile.
__device__ __forceinline__ void workers_take_tile() {
  for (int c = 0; c < kConsumers; ++c) named_sync(kStagedBarrier + c, kHandoffThreads);
}

// The workers: done with the staging area (read, and any TMA store from it
// has read it). Skipped after this CTA's last tile, since the consumers
// wait for it only before staging another.
__device__ __forceinline__ void workers_release_staging(bool another_tile) {
  if (!another_tile) return;
  for (int c = 0; c < kConsumers; ++c) named_arrive(kStagingFreeBarrier + c, kHandoffThreads);
}

}  // namespace spillway::ops::hopper
