// The Hopper matrix product of gemm_hopper.h. One persistent CTA per SM
// walks the output tiles. Warpgroup 0 is the producer: one thread issues the
// TMA loads of each k-stage into a ring of kStages shared-memory buffers
// (and, with a fused epilogue, its other three warps do that epilogue).
// Warpgroups 1 and 2 are the consumers: each multiplies its 64 rows of the
// 128 x 256 tile with wgmma (m64n256k16, fp32 accumulators in registers) and
// stores its part of the tile. Full/empty mbarriers per stage hand buffers
// between them, so the loads of the next stages (and of the next tile) run
// while the consumers multiply. A consumer's tile leaves through shared
// memory and TMA stores, which run while it multiplies the next tile.
//
// Measured on an H100 (16384 x 16384 x 2048, the 1B model's gate|up):
// 1.43-1.58 ms against cuBLASLt's 1.50-1.63 alone, 1.60-1.65 against
// 1.64-1.68 at the 700 W power cap; the products equal cuBLASLt's bit for
// bit. Three stages fit beside the 64 KiB staging area; storing from
// registers instead (four stages) left the tensor cores idle for the stores
// (1.73 ms), and a ping-pong of 128 x 128 tiles between the consumers ran
// at 480-530 TFLOP/s.
//
// The fused epilogues (the SwiGLU gate after the gate|up product, SwiGLU's
// backward after down_proj's dX product, whose B is stored [k, n]) run on
// the producer warpgroup's three idle warps, the workers, overlapping the
// next tile's products; the consumers only stage their tile for them. At
// the power cap, for the 1B shapes: the gate|up product with the gate 1.68
// ms (the consumers computing the gate during their next mainloop: 1.79-1.82;
// cuBLASLt and the gate kernel: 1.87); down's dX with SwiGLU's backward
// 1.06 ms (cuBLASLt's dout and the separate kernel: 1.25-1.27). The backward
// done by the consumers in the epilogue took 1.25 ms, deferred into their
// next mainloop 1.56-1.80 ms (both stall the tensor cores), and on the
// workers with per-thread global loads instead of TMA 1.53-2.21 ms.
// compute-sanitizer's racecheck reports the consumers' staging writes and
// the workers' reads as hazards: they are ordered by mbarriers (staged,
// staging free), which racecheck does not model; it reports a minimal
// kernel with the same handoff alike whether its readers wait or not.
#include "ops/gemm_hopper.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "ops/swiglu_math.cuh"

namespace spillway::ops {

namespace {

constexpr int kBM = static_cast<int>(kHopperGemmTileM);
constexpr int kBN = static_cast<int>(kHopperGemmTileN);
constexpr int kBK = static_cast<int>(kHopperGemmTileK);
constexpr int kStages = 3;
constexpr int kConsumers = 2;                       // warpgroups of 64 rows each
constexpr int kThreads = 128 * (kConsumers + 1);    // plus the producer
constexpr int kABytes = kBM * kBK * 2;              // 16 KiB a stage
constexpr int kBBytes = kBN * kBK * 2;              // 32 KiB a stage
constexpr int kHalfBBytes = kBBytes / 2;            // one TMA box of 128 rows
// Buffers first (each 1024-byte aligned, as 128-byte swizzling needs): the
// stages, then each consumer's staging area for TMA stores; the barriers
// last; 1 KiB of slack lets the kernel align the dynamic base.
constexpr int kStagingBytes = kConsumers * 64 * kBN * 2;  // each consumer's 64 x 256 outputs, 32 KiB
// m-blocks walked together, so the CTAs running at once share A and B panels
// in L2: 16 m-blocks by about 8 n-blocks is ~8 MiB of each for 132 SMs.
constexpr int kGroupM = 16;

// kSwigluBackward: the product is the gradient of the MLP's SwiGLU output
// (dout = dy * W_down, B stored [k, n]); instead of dout the kernel writes
// dgate|dup from it and the forward's gate|up.
enum class Epilogue { kStore, kSwiglu, kSwigluBackward };

// The fused epilogues' elementwise work runs on warps 1-3 of the producer
// warpgroup (the workers), idle otherwise, while the consumers multiply the
// next tile. kSwigluBackward's workers take a staged dout tile in chunks of
// 32 rows by 64 columns, each chunk's gate and up loaded by TMA into one of
// two buffers, turned into dgate and dup in place and stored from there by
// TMA; kSwiglu's need no buffers (swiglu_gate_worker).
constexpr int kWorkerThreads = 96;
constexpr int kWorkerRows = 32;
constexpr int kWorkerBoxBytes = kWorkerRows * 64 * 2;                // 4 KiB
constexpr int kWorkerBytes = 2 * 2 * kWorkerBoxBytes;                // two buffers of gate and up
constexpr int kWorkerChunks = (kBM / kWorkerRows) * (kBN / 64);     // 16 a tile
constexpr int kBarriers = 2 * kStages + 4;  // full, empty; staged, staging free, two buffers loaded

template <Epilogue kMode>
constexpr int smem_bytes() {
  return kStages * (kABytes + kBBytes) + kStagingBytes + (kMode == Epilogue::kSwigluBackward ? kWorkerBytes : 0) +
         kBarriers * 8 + 1024;
}

// The tiling; the matrices themselves reach the kernel as TMA maps.
struct Params {
  int num_m = 0, num_n = 0, k_blocks = 0;
  int ffn = 0;  // kSwiglu, kSwigluBackward: the gate's width (gate_up is [m, 2 * ffn])
};

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SPILLWAY_HOPPER_KERNELS 1
#endif

#ifdef SPILLWAY_HOPPER_KERNELS

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  const uint32_t addr = smem_addr(bar);
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (!done);
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}

// A 2-d box of `map` at (inner, outer) into shared memory, counted on `bar`.
__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap* map, int inner, int outer, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(inner), "r"(outer), "r"(smem_addr(bar))
      : "memory");
}

// A 2-d box of `map` at (inner, outer) fetched into L2 only.
__device__ __forceinline__ void tma_prefetch_l2(const CUtensorMap* map, int inner, int outer) {
  asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global [%0, {%1, %2}];" ::"l"(reinterpret_cast<uint64_t>(map)),
               "r"(inner), "r"(outer)
               : "memory");
}

// wgmma's view of a K-major bf16 tile that TMA wrote with 128-byte swizzling:
// rows of 64 elements (128 bytes), 8-row groups 1024 bytes apart.
__device__ __forceinline__ uint64_t smem_desc(const void* tile) {
  const uint64_t addr = smem_addr(tile);
  return ((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

// wgmma's view of an N-major bf16 tile (B stored [k, n]): 64-column boxes,
// each a row of 64 elements along n per k (128-byte swizzled), kBK rows
// deep and 8 KiB from the next box; 8-row (k) groups 1024 bytes apart.
__device__ __forceinline__ uint64_t smem_desc_n_major(const void* tile) {
  const uint64_t addr = smem_addr(tile);
  return ((addr & 0x3FFFF) >> 4) | (uint64_t(8192 >> 4) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// d[64 x 256] (+)= A[64 x 16] * B[256 x 16]^T; scale_d = 0 overwrites d.
// kTransB = 1: B sits in shared memory N-major (smem_desc_n_major).
template <int kTransB>
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t desc_a, uint64_t desc_b, uint32_t scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, p, 1, 1, 0, %131;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransB));
}

__device__ __forceinline__ void tile_of(int t, const Params& p, int& mb, int& nb) {
  const int per_group = kGroupM * p.num_n;
  const int first_m = (t / per_group) * kGroupM;
  const int rows = min(p.num_m - first_m, kGroupM);
  const int local = t % per_group;
  mb = first_m + local % rows;
  nb = local / rows;
}

// A 64 x 64 box of shared memory (128-byte swizzled) to `map` at (inner, outer).
__device__ __forceinline__ void tma_store(const CUtensorMap* map, int inner, int outer, const void* src) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(inner), "r"(outer), "r"(smem_addr(src))
               : "memory");
}
__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Until the stores issued so far have read their shared memory.
__device__ __forceinline__ void tma_store_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
__device__ __forceinline__ void tma_store_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
// Makes this thread's shared-memory writes visible to TMA (the async proxy).
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// A barrier among one consumer warpgroup's 128 threads (0 is __syncthreads).
__device__ __forceinline__ void warpgroup_sync(int consumer) {
  asm volatile("bar.sync %0, 128;" ::"r"(1 + consumer) : "memory");
}

using swiglu_math::silu_times;  // swiglu_cuda.cu's, so the fused gate gives the same bits

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

// Hands the staged boxes to TMA: every thread's writes made visible to the
// async proxy, then one thread stores `boxes` boxes, box j to (col(j), row).
template <typename Col>
__device__ __forceinline__ void store_staged(const CUtensorMap* map, uint8_t* staging, int consumer, int boxes,
                                             int row, Col col) {
  fence_async_shared();
  warpgroup_sync(consumer);
  if (threadIdx.x % 128 == 0) {
    for (int j = 0; j < boxes; ++j) tma_store(map, col(j), row, staging + j * 8192);
    tma_store_commit();
  }
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

// kStore's epilogue: the staged tile leaves by TMA stores, which run while
// the consumer multiplies the next tile.
__device__ __forceinline__ void store_tile(const float (&d)[128], const CUtensorMap* map_c, uint8_t* staging,
                                           int consumer, int r0, int lane, int mb, int nb) {
  stage_tile(d, staging, r0, lane);
  store_staged(map_c, staging, consumer, 4, mb * kBM + consumer * 64, [&](int j) { return nb * kBN + 64 * j; });
}

// The fused epilogues' consumers: the tile (gate|up, or dout rounded to
// bf16 as the separate kernel reads it) into the staging area, once the
// workers are done with the previous one, then handed to them.
__device__ __forceinline__ void stage_for_workers(const float (&d)[128], uint8_t* staging, uint64_t* staged,
                                                  uint64_t* staging_free, int local, int consumer, int r0, int lane) {
  mbar_wait(staging_free, (local & 1) ^ 1);
  stage_tile(d, staging, r0, lane);
  fence_async_shared();  // the workers' leader stores gate|up from here by TMA
  warpgroup_sync(consumer);
  if (threadIdx.x % 128 == 0) mbar_arrive(staged);
}

__device__ __forceinline__ void worker_sync() { asm volatile("bar.sync 3, %0;" ::"n"(kWorkerThreads) : "memory"); }

// kSwiglu's workers. The leader stores the staged gate|up tile (its gate
// columns in boxes 0-1 of each consumer's half, their up columns in 2-3);
// once the stores have read the staging area, each worker turns its
// vectors' gate values into silu(gate) * up in place (from gate and up as
// rounded to bf16, as the separate kernel reads them), and the leader
// stores those boxes to the SwiGLU output. A thread loads kGateBatch
// vectors before computing any, so their latencies overlap.
constexpr int kGateBatch = 4;

__device__ void swiglu_gate_worker(const CUtensorMap* map_gate_up, const CUtensorMap* map_out, const Params& p,
                                   uint8_t* staging, uint64_t* staged, uint64_t* staging_free) {
  const int w = threadIdx.x - 32;
  const bool leader = w == kWorkerThreads - 1;  // one with the fewest vectors to compute
  constexpr int kHalf = kStagingBytes / kConsumers;
  constexpr int kVectors = kBM * (kBN / 2) / 8;  // the tile's gate values, 8 at a time
  const int tiles = p.num_m * p.num_n;
  int local = 0;
  for (int t = blockIdx.x; t < tiles; t += gridDim.x, ++local) {
    int mb, nb;
    tile_of(t, p, mb, nb);
    mbar_wait(staged, local & 1);
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
        const int row = v / 16, chunk = v % 16, r = row % 64;
        at[i] = (row / 64) * kHalf + (chunk / 8) * 8192 + r * 128 + (((chunk % 8) ^ (r % 8)) * 16);
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
      mbar_arrive(staging_free);
    }
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
constexpr int kWorkerVectors = (kWorkerRows * 8 + kWorkerThreads - 1) / kWorkerThreads;

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
                                       uint64_t* staged, uint64_t* staging_free, uint64_t* loaded) {
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
  int local = 0;
  for (int t = blockIdx.x; t < tiles; t += gridDim.x, ++local) {
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
    mbar_wait(staged, local & 1);
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
    // Every worker has read this tile's dout (worker_sync after the last chunk).
    if (leader) mbar_arrive(staging_free);
  }
  if (leader) tma_store_wait_all();
}

template <Epilogue kMode>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                const __grid_constant__ CUtensorMap map_c, const __grid_constant__ CUtensorMap map_out, Params p) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* smem_a = smem;
  uint8_t* smem_b = smem_a + kStages * kABytes;
  uint8_t* staging = smem_b + kStages * kBBytes;
  uint8_t* buffers = staging + kStagingBytes;  // kSwigluBackward's workers
  uint64_t* full = reinterpret_cast<uint64_t*>(buffers + (kMode == Epilogue::kSwigluBackward ? kWorkerBytes : 0));
  uint64_t* empty = full + kStages;
  uint64_t* staged = empty + kStages;    // kSwigluBackward: a dout tile staged (one arrival per consumer)
  uint64_t* staging_free = staged + 1;   // kSwigluBackward: the workers done with it
  uint64_t* loaded = staging_free + 1;   // kSwigluBackward: each worker buffer's gate and up loaded

  const int warpgroup = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kConsumers * 4);  // one arrival per consumer warp
    }
    mbar_init(staged, kConsumers);
    mbar_init(staging_free, 1);
    for (int b = 0; b < 2; ++b) mbar_init(&loaded[b], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  const int tiles = p.num_m * p.num_n;
  if (warpgroup == 0) {
    if constexpr (kMode != Epilogue::kStore) {
      // The workers' math wants registers (40 of them: SwiGLU's backward in
      // 1.37 ms for the 1B shape at the power cap; 104, with all of a
      // thread's vectors of a chunk loaded first: 1.06 ms); the consumers'
      // epilogue, only staging the tile, fits in 200.
      asm volatile("setmaxnreg.dec.sync.aligned.u32 104;");
      if (threadIdx.x >= 32) {
        if constexpr (kMode == Epilogue::kSwiglu) {
          swiglu_gate_worker(&map_c, &map_out, p, staging, staged, staging_free);
        } else {
          swiglu_backward_worker(&map_c, &map_out, p, staging, buffers, staged, staging_free, loaded);
        }
        return;
      }
    } else {
      asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    }
    if (threadIdx.x != 0) return;
    int stage = 0;
    uint32_t phase = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
      int mb, nb;
      tile_of(t, p, mb, nb);
      // The B rows of this tile, as two boxes of 128: a plain product's 256
      // consecutive rows, or 128 gate rows and their 128 up rows.
      const int b_first = kMode == Epilogue::kStore ? nb * kBN : nb * (kBN / 2);
      const int b_second = kMode == Epilogue::kStore ? b_first + kBN / 2 : p.ffn + b_first;
      for (int kb = 0; kb < p.k_blocks; ++kb) {
        mbar_wait(&empty[stage], phase ^ 1);
        mbar_expect_tx(&full[stage], kABytes + kBBytes);
        tma_load(smem_a + stage * kABytes, &map_a, kb * kBK, mb * kBM, &full[stage]);
        uint8_t* b = smem_b + stage * kBBytes;
        if constexpr (kMode == Epilogue::kSwigluBackward) {
          // B[k, n] row-major: four boxes of 64 columns by kBK rows.
#pragma unroll
          for (int j = 0; j < 4; ++j) tma_load(b + j * 8192, &map_b, nb * kBN + 64 * j, kb * kBK, &full[stage]);
        } else {
          tma_load(b, &map_b, kb * kBK, b_first, &full[stage]);
          tma_load(b + kHalfBBytes, &map_b, kb * kBK, b_second, &full[stage]);
        }
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
    }
    return;
  }

  if constexpr (kMode != Epilogue::kStore) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 200;");
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  }
  const int consumer = warpgroup - 1;
  const int lane = threadIdx.x % 32;
  uint8_t* my_staging = staging + consumer * (kStagingBytes / kConsumers);
  const int r0 = ((threadIdx.x % 128) / 32) * 16 + lane / 4;
  float d[128];
  int stage = 0;
  uint32_t phase = 0;
  bool stores_pending = false;
  int local = 0;  // tiles done by this CTA
  for (int t = blockIdx.x; t < tiles; t += gridDim.x, ++local) {
    int mb, nb;
    tile_of(t, p, mb, nb);
    int previous = -1;
    for (int kb = 0; kb < p.k_blocks; ++kb) {
      mbar_wait(&full[stage], phase);
      const uint64_t desc_a = smem_desc(smem_a + stage * kABytes + consumer * (kABytes / kConsumers));
      constexpr bool kNMajor = kMode == Epilogue::kSwigluBackward;
      const uint64_t desc_b = kNMajor ? smem_desc_n_major(smem_b + stage * kBBytes) : smem_desc(smem_b + stage * kBBytes);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) {
        // 16 of k further on, in the descriptors' 16-byte address units: 32
        // bytes along a K-major row, or 16 rows (2048 bytes) of an N-major box.
        constexpr uint64_t kBStep = kNMajor ? 128 : 2;
        wgmma_m64n256k16<kNMajor ? 1 : 0>(d, desc_a + 2 * kk, desc_b + kBStep * kk, (kb > 0 || kk > 0) ? 1u : 0u);
      }
      wgmma_commit();
      // Keep this stage's products in flight; the previous stage's are done
      // once at most one group is outstanding, so its buffers go back.
      wgmma_wait<1>();
      if (previous >= 0 && lane == 0) mbar_arrive(&empty[previous]);
      previous = stage;
      if (++stage == kStages) {
        stage = 0;
        phase ^= 1;
      }
    }
    wgmma_wait<0>();
    if (previous >= 0 && lane == 0) mbar_arrive(&empty[previous]);

    if constexpr (kMode != Epilogue::kStore) {
      stage_for_workers(d, my_staging, staged, staging_free, local, consumer, r0, lane);
      continue;
    }
    // The previous tile's stores must have read the staging area.
    if (stores_pending) {
      if (threadIdx.x % 128 == 0) tma_store_wait_read();
      warpgroup_sync(consumer);
    }
    store_tile(d, &map_c, my_staging, consumer, r0, lane, mb, nb);
    stores_pending = true;
  }
  // Shared memory must outlive the stores reading it.
  if (threadIdx.x % 128 == 0) tma_store_wait_all();
}

#else  // no sm_90a code in this compilation pass: never launched (hopper_gemm_available is false)

template <Epilogue kMode>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_kernel(const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap, Params) {}

#endif

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    SPW_CUDA(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found));
    SPW_CHECK(found == cudaDriverEntryPointSuccess && f != nullptr, "hopper_gemm",
              "the CUDA driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// A row-major [rows, cols] bf16 matrix, read in boxes of 64 columns (128
// bytes, swizzled) by box_rows rows.
CUtensorMap tensor_map(const void* base, int64_t rows, int64_t cols, uint32_t box_rows) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols * 2)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(kBK), box_rows};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims,
                                    strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                    CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  SPW_CHECK(r == CUDA_SUCCESS, "hopper_gemm", "cuTensorMapEncodeTiled failed (CUresult ", int(r), ") for a [",
            rows, ", ", cols, "] matrix");
  return map;
}

// Readies the current device for gemm_kernel<kMode> on its first launch
// there (a process may drive several GPUs): checks it can run the kernels
// and opts in to their shared memory. Returns its SM count. Later launches
// pay one cudaGetDevice and a lookup.
template <Epilogue kMode>
int prepare_device(const char* what) {
  static std::mutex mutex;
  static std::map<int, int> sm_counts;  // the devices readied so far
  int device = 0;
  SPW_CUDA(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mutex);
  const auto known = sm_counts.find(device);
  if (known != sm_counts.end()) return known->second;
  SPW_CHECK(hopper_gemm_available(device), what, "needs a Hopper GPU (sm_90) and a build with sm_90a code");
  SPW_CUDA(cudaFuncSetAttribute(gemm_kernel<kMode>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes<kMode>()));
  int count = 0;
  SPW_CUDA(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  sm_counts[device] = count;
  return count;
}

template <Epilogue kMode>
void launch(const char* what, const CUtensorMap& map_a, const CUtensorMap& map_b, const CUtensorMap& map_c,
            const CUtensorMap& map_out, Params p, cudaStream_t stream) {
  const int sms = prepare_device<kMode>(what);
  const int grid = std::min(p.num_m * p.num_n, sms);
  gemm_kernel<kMode><<<grid, kThreads, smem_bytes<kMode>(), stream>>>(map_a, map_b, map_c, map_out, p);
  SPW_CUDA(cudaGetLastError());
}

Params tiling(int64_t m, int64_t n_blocks, int64_t k) {
  Params p;
  p.num_m = static_cast<int>(m / kBM);
  p.num_n = static_cast<int>(n_blocks);
  p.k_blocks = static_cast<int>(k / kBK);
  return p;
}

bool rows_fit(int64_t m, int64_t k) {
  // TMA coordinates are 32-bit; the k-loop has no remainder.
  return m > 0 && k > 0 && m % kBM == 0 && k % kBK == 0 && m < (int64_t(1) << 31) && k < (int64_t(1) << 31);
}

}  // namespace

bool hopper_gemm_available(int device) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  if (major != 9 || minor != 0) return false;
  cudaFuncAttributes attributes{};
  if (cudaFuncGetAttributes(&attributes, gemm_kernel<Epilogue::kStore>) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attributes.binaryVersion == 90;
}

bool hopper_gemm_fits(int64_t m, int64_t n, int64_t k) {
  return rows_fit(m, k) && n > 0 && n % kBN == 0 && n < (int64_t(1) << 31);
}

bool hopper_gemm_swiglu_fits(int64_t m, int64_t ffn, int64_t k) {
  return rows_fit(m, k) && ffn > 0 && ffn % (kBN / 2) == 0 && ffn < (int64_t(1) << 30);
}

void hopper_gemm(const bf16* a, const bf16* b, bf16* c, int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  SPW_CHECK(hopper_gemm_fits(m, n, k), "hopper_gemm", "shape ", m, " x ", n, " x ", k, " is not whole ", kBM, " x ",
            kBN, " x ", kBK, " tiles");
  const CUtensorMap map_c = tensor_map(c, m, n, 64);
  launch<Epilogue::kStore>("hopper_gemm", tensor_map(a, m, k, kBM), tensor_map(b, n, k, kBN / 2), map_c, map_c,
                           tiling(m, n / kBN, k), stream);
}

void hopper_gemm_swiglu(const bf16* x, const bf16* w_gate_up, bf16* gate_up, bf16* out, int64_t m, int64_t ffn,
                        int64_t k, cudaStream_t stream) {
  SPW_CHECK(hopper_gemm_swiglu_fits(m, ffn, k), "hopper_gemm_swiglu", "shape ", m, " x ", ffn, " x ", k,
            " is not whole ", kBM, " x ", kBN / 2, " x ", kBK, " tiles");
  Params p = tiling(m, ffn / (kBN / 2), k);
  p.ffn = static_cast<int>(ffn);
  launch<Epilogue::kSwiglu>("hopper_gemm_swiglu", tensor_map(x, m, k, kBM), tensor_map(w_gate_up, 2 * ffn, k, kBN / 2),
                            tensor_map(gate_up, m, 2 * ffn, 64), tensor_map(out, m, ffn, 64), p, stream);
}

bool hopper_gemm_swiglu_backward_fits(int64_t m, int64_t ffn, int64_t k) {
  return rows_fit(m, k) && ffn > 0 && ffn % kBN == 0 && ffn < (int64_t(1) << 30);
}

void hopper_gemm_swiglu_backward(const bf16* dy, const bf16* w_down, const bf16* gate_up, bf16* dgate_up,
                                 int64_t m, int64_t ffn, int64_t k, cudaStream_t stream) {
  SPW_CHECK(hopper_gemm_swiglu_backward_fits(m, ffn, k), "hopper_gemm_swiglu_backward", "shape ", m, " x ", ffn,
            " x ", k, " is not whole ", kBM, " x ", kBN, " x ", kBK, " tiles");
  Params p = tiling(m, ffn / kBN, k);
  p.ffn = static_cast<int>(ffn);
  // w_down is [k, ffn]: read in boxes of 64 columns by kBK rows.
  launch<Epilogue::kSwigluBackward>("hopper_gemm_swiglu_backward", tensor_map(dy, m, k, kBM),
                                    tensor_map(w_down, k, ffn, kBK), tensor_map(dgate_up, m, 2 * ffn, kWorkerRows),
                                    tensor_map(gate_up, m, 2 * ffn, kWorkerRows), p, stream);
}

}  // namespace spillway::ops
