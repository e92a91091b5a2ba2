// The GPU's batched decoder (batch_decoder.h): LLaMA in bf16 with fp32 sums
// over a paged bf16 key/value cache on the device, laid out by the same
// block tables as the CPU's (paged_kv_blocks.h; the step's tables are copied
// to the device with its tokens). Logits come back in fp32; sampling stays
// on the CPU.
//
// Every kernel of a step is batch-invariant, so a row's logits are the same
// bits alone or in a batch and however its prompt is cut: the matmuls are
// ops/batch_linear.h's (each weight matrix read once for all of a step's
// rows), the attention paged_cache_cuda.h's, and the norms, RoPE, SwiGLU and
// residual adds are per row or per element (the ops the batch-1 CudaDecoder
// runs). q|k|v and gate|up are uploaded fused, one matmul each.
//
// All device memory (weights, cache, activations of `max_rows` rows) is
// reserved when the decoder is made, from the cache's budget and the model's
// size; when they do not fit, one line names each size and what is free.
#pragma once

#include <cstdint>
#include <memory>

#include "infer/batch_decoder.h"
#include "model/llama_weights.h"

namespace spillway::infer {

struct CudaBatchDecoderOptions {
  int ordinal = 0;  // which GPU
  // Rows one pass through the layers takes at most: a step of more rows (a
  // long prompt chunk beside many decoding sequences) runs as several passes,
  // cutting a chunk where needed, which gives the same bits since every
  // kernel is batch-invariant. Bounds the activations' memory.
  int64_t max_rows = 512;
  // lm_head rows computed and copied back at a time ([rows, vocab] fp32 on
  // the device and in pinned host memory).
  int64_t logits_rows = 64;
  // The matmuls on tensor cores (ops/batch_linear_tc.h) instead of CUDA
  // cores (ops/batch_linear.h): batch-invariant either way, their sums in
  // different orders. On H200 the 8B shape's decode at 8 rows runs 1.9x
  // and prefill 5x the CUDA-core kernel's rate (docs/inference.md).
  bool tensor_cores = true;
  // Decode passes (one token for each of at most logits_rows sequences)
  // replayed as CUDA graphs, one per row count, instead of some 400 kernel
  // launches a pass; the same kernels, so the same bits.
  bool cuda_graphs = true;
  // With tensor cores, a pass of at most ops::kBatchLinearTcSplitRows rows
  // adds each matmul's slices in the kernel of what follows it (RoPE and
  // the cache write, SwiGLU, the residual add: decode_epilogues_cuda.h),
  // five kernels a layer fewer and the same bits (one sequence: 167.7 ->
  // 174.2 tok/s on an H200, bench/results/gpu.jsonl).
  bool fused_epilogues = true;
};

std::unique_ptr<BatchDecoder> make_cuda_batch_decoder(const model::LlamaWeights& weights, const KvCacheOptions& cache,
                                                      const CudaBatchDecoderOptions& options = {});

}  // namespace spillway::infer
