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
// It keeps pace with cuBLASLt on the 1B shapes, and its products equal
// cuBLASLt's bit for bit (docs/performance.md). Three stages fit beside the
// 64 KiB staging area; storing from registers instead (four stages) left
// the tensor cores idle for the stores, and a ping-pong of 128 x 128 tiles
// between the consumers ran slower.
//
// The fused epilogues (the SwiGLU gate after the gate|up product, SwiGLU's
// backward after down_proj's dX product, whose B is stored [k, n], RoPE
// after the q|k|v product) run on the producer warpgroup's three idle
// warps, the workers, overlapping the next tile's products; the consumers
// only stage their tile for them (gemm_hopper_handoff.cuh). Each fused
// kernel beats cuBLASLt and the separate kernel at the power cap; the
// consumers doing the epilogue themselves (in place or deferred into their
// next mainloop) stall the tensor cores, and per-thread global loads on the
// workers were slower than TMA (docs/performance.md has every time).
#include "ops/gemm_hopper.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "ops/gemm_hopper_tiles.cuh"

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SPILLWAY_HOPPER_KERNELS 1
#include "ops/gemm_hopper_handoff.cuh"
#include "ops/gemm_hopper_rope.cuh"
#include "ops/gemm_hopper_swiglu.cuh"
#include "ops/hopper_ptx.cuh"
#endif

namespace spillway::ops {

namespace {

using namespace hopper;

#ifdef SPILLWAY_HOPPER_KERNELS

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

// kStore's epilogue: the staged tile leaves by TMA stores, which run while
// the consumer multiplies the next tile.
__device__ __forceinline__ void store_tile(const float (&d)[128], const CUtensorMap* map_c, uint8_t* staging,
                                           int consumer, int r0, int lane, int mb, int nb) {
  stage_tile(d, staging, r0, lane);
  store_staged(map_c, staging, consumer, 4, mb * kBM + consumer * 64, [&](int j) { return nb * kBN + 64 * j; });
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
  uint64_t* loaded = empty + kStages;  // kSwigluBackward: each worker buffer's gate and up loaded

  const int warpgroup = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kConsumers * 4);  // one arrival per consumer warp
    }
    for (int b = 0; b < 2; ++b) mbar_init(&loaded[b], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  const int tiles = p.num_m * p.num_n;
  if (warpgroup == 0) {
    if constexpr (kMode != Epilogue::kStore) {
      // The workers' math wants registers (104 let a thread load all of a
      // chunk's vectors first, which SwiGLU's backward needs to keep pace:
      // docs/performance.md); the consumers' epilogue, only staging the
      // tile, fits in 200.
      asm volatile("setmaxnreg.dec.sync.aligned.u32 104;");
      if (threadIdx.x >= 32) {
        if constexpr (kMode == Epilogue::kSwiglu) {
          swiglu_gate_worker(&map_c, &map_out, p, staging);
        } else if constexpr (kMode == Epilogue::kRope) {
          rope_worker(&map_c, p, staging);
        } else {
          swiglu_backward_worker(&map_c, &map_out, p, staging, buffers, loaded);
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
      // The B rows of this tile, as two boxes of 128: 256 consecutive rows,
      // or (the gate|up product) 128 gate rows and their 128 up rows.
      constexpr bool kGateUp = kMode == Epilogue::kSwiglu;
      const int b_first = kGateUp ? nb * (kBN / 2) : nb * kBN;
      const int b_second = kGateUp ? p.ffn + b_first : b_first + kBN / 2;
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
      stage_for_workers(d, my_staging, local, consumer, r0, lane);
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

bool hopper_gemm_rope_fits(int64_t m, int64_t n, int64_t k, int64_t seq, int64_t head_dim, int64_t rotated_cols) {
  // At most kRopeMaxHeads heads a tile (head_dim 64, 128 or 256).
  return hopper_gemm_fits(m, n, k) && seq > 0 && seq % kBM == 0 && m % seq == 0 && head_dim >= 64 &&
         kBN % head_dim == 0 && rotated_cols >= 0 && rotated_cols <= n && rotated_cols % head_dim == 0;
}

void hopper_gemm_rope(const bf16* a, const bf16* b, bf16* c, int64_t m, int64_t n, int64_t k, const float* cos_sin,
                      int64_t seq, int64_t head_dim, int64_t rotated_cols, cudaStream_t stream) {
  SPW_CHECK(hopper_gemm_rope_fits(m, n, k, seq, head_dim, rotated_cols), "hopper_gemm_rope", "shape ", m, " x ", n,
            " x ", k, " with seq ", seq, ", head_dim ", head_dim, ", ", rotated_cols,
            " rotated columns is not whole tiles of ", kBM, " x ", kBN, " x ", kBK, " and heads");
  SPW_CHECK(reinterpret_cast<uintptr_t>(cos_sin) % 16 == 0, "hopper_gemm_rope", "cos_sin is not 16-byte aligned");
  Params p = tiling(m, n / kBN, k);
  p.head_dim = static_cast<int>(head_dim);
  p.rotated_cols = static_cast<int>(rotated_cols);
  p.seq = static_cast<int>(seq);
  p.cos_sin = cos_sin;
  const CUtensorMap map_c = tensor_map(c, m, n, 64);
  launch<Epilogue::kRope>("hopper_gemm_rope", tensor_map(a, m, k, kBM), tensor_map(b, n, k, kBN / 2), map_c, map_c, p,
                          stream);
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
