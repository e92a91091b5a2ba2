#include "infer/cuda/cuda_batch_decoder.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/bytes.h"
#include "base/log.h"
#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_device.h"
#include "device/cuda/device_guard.h"
#include "device/cuda/graph_capture.h"
#include "infer/cuda/bf16_upload.h"
#include "infer/cuda/decode_epilogues_cuda.h"
#include "infer/cuda/device_requests.h"
#include "infer/cuda/paged_cache_cuda.h"
#include "infer/llama_cpu_layer.h"
#include "infer/step_passes.h"
#include "ops/add.h"
#include "ops/batch_linear.h"
#include "ops/batch_linear_tc.h"
#include "ops/embedding.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"

namespace spillway::infer {

namespace {

constexpr int64_t kBf16Bytes = 2;

class CudaBatchDecoder final : public BatchDecoder {
 public:
  CudaBatchDecoder(const model::LlamaWeights& w, const KvCacheOptions& cache, const CudaBatchDecoderOptions& o)
      : BatchDecoder(kv_blocks_in_budget(w.config(), cache, kBf16Bytes), cache.block_tokens),
        config_(w.config()),
        ordinal_(o.ordinal),
        max_rows_(o.max_rows),
        logits_rows_(std::min(o.logits_rows, o.max_rows)),
        tensor_cores_(o.tensor_cores),
        fused_epilogues_(o.tensor_cores && o.fused_epilogues),
        cuda_graphs_(o.cuda_graphs) {
    const auto& c = config_;
    const int64_t d = c.hidden_size, hd = c.head_dim(), hq = c.num_attention_heads, hkv = c.num_key_value_heads;
    const int64_t q_row = hq * hd, kv_row = hkv * hd, qkv_row = q_row + 2 * kv_row, ffn = c.intermediate_size;
    SPW_CHECK(o.max_rows > 0 && o.logits_rows > 0, "cuda batch decoder", "max_rows ", o.max_rows,
              " and logits_rows ", o.logits_rows, " must be positive");
    SPW_CHECK(d % 8 == 0 && q_row % 8 == 0 && ffn % 8 == 0, "--device cuda",
              "the GPU's batched decoder needs hidden_size (", d, "), heads x head_dim (", q_row,
              ") and intermediate_size (", ffn, ") to be multiples of 8");
    SPW_CHECK(hd <= kPagedAttentionCudaMaxHeadDim, "--device cuda", "head_dim ", hd, " is more than the GPU ",
              "attention's ", kPagedAttentionCudaMaxHeadDim);
    const int count = cuda_device_count();
    SPW_CHECK(o.ordinal >= 0 && o.ordinal < count, "--device cuda", "no CUDA GPU ", o.ordinal,
              " is visible to this process (", count, " visible)");

    // Weights, cache and activations asked for apart, to name each in the
    // error when they do not fit.
    DeviceRequests weights, kv, work;
    const int64_t staging_floats = Bf16Upload::staging_floats(w);
    weights.add(embed_, c.vocab_size * d, "token embedding (bf16)");
    weights.add(final_norm_, d, "final norm (bf16)");
    if (!c.tie_word_embeddings) weights.add(lm_head_, c.vocab_size * d, "lm_head (bf16)");
    layers_.resize(static_cast<size_t>(c.num_hidden_layers));
    for (size_t i = 0; i < layers_.size(); ++i) {
      Layer& L = layers_[i];
      const std::string p = "layer " + std::to_string(i) + " ";
      weights.add(L.input_norm, d, p + "input norm");
      weights.add(L.wqkv, qkv_row * d, p + "q|k|v projection");
      weights.add(L.wo, d * q_row, p + "o projection");
      weights.add(L.post_norm, d, p + "post-attention norm");
      weights.add(L.gate_up, 2 * ffn * d, p + "gate|up projection");
      weights.add(L.down, d * ffn, p + "down projection");
    }
    work.add(x_, max_rows_ * d, "residual stream");
    work.add(xn_, max_rows_ * d, "normed activations");
    work.add(proj_, max_rows_ * d, "projections");
    work.add(rstd_, max_rows_, "rmsnorm rstd");
    work.add(qkv_, max_rows_ * qkv_row, "queries, keys and values");
    work.add(att_, max_rows_ * q_row, "attention output");
    work.add(attention_splits_,
             paged_attention_workspace_floats(
                 max_rows_, {c.num_attention_heads, c.num_key_value_heads, hd, blocks().block_tokens()}),
             "attention split sums");
    work.add(gate_up_, max_rows_ * 2 * ffn, "MLP gate|up");
    work.add(act_, max_rows_ * ffn, "MLP activation");
    work.add(logits_, logits_rows_ * c.vocab_size, "logits");
    work.add(inv_freq_, hd / 2, "RoPE frequencies");
    work.add(staging_, staging_floats, "fp32 staging for the upload");
    if (tensor_cores_) {
      uint64_t split = 0;
      const std::pair<int64_t, int64_t> shapes[] = {{d, qkv_row}, {q_row, d}, {d, 2 * ffn}, {ffn, d}, {d, c.vocab_size}};
      for (const auto& [in, out] : shapes) {
        const int64_t rows = ops::kBatchLinearTcSplitRows;
        split = std::max(split, fused_epilogues_ ? ops::batch_linear_tc_slices_bytes(rows, in, out)
                                                 : ops::batch_linear_tc_workspace_bytes(rows, in, out));
      }
      if (split > 0) work.add(split_sums_, static_cast<int64_t>(split / sizeof(float)), "matmul slice sums");
    }

    CudaDeviceGuard guard(ordinal_);
    description_ = "cuda:" + std::to_string(ordinal_) + " " + cuda_device_name(ordinal_);
    size_t free_bytes = 0, total_bytes = 0;
    SPW_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (cache.fit_device) fit_cache(weights.bytes() + work.bytes(), free_bytes, total_bytes, kv_row);
    // The cache's pools and the block tables, now that the blocks are known.
    const uint64_t pool = static_cast<uint64_t>(blocks().num_blocks() * blocks().block_tokens() * kv_row);
    for (size_t i = 0; i < layers_.size(); ++i) {
      const std::string p = "layer " + std::to_string(i) + " ";
      kv.add(layers_[i].k_pool, static_cast<int64_t>(pool), p + "key cache");
      kv.add(layers_[i].v_pool, static_cast<int64_t>(pool), p + "value cache");
    }
    meta_count_ = 4 * max_rows_ + blocks().num_blocks();
    work.add(meta_, meta_count_, "step rows and block tables");
    const uint64_t device_bytes = weights.bytes() + kv.bytes() + work.bytes();
    const uint64_t logits_host_bytes = static_cast<uint64_t>(logits_rows_ * c.vocab_size) * sizeof(float);
    const uint64_t meta_host_bytes = static_cast<uint64_t>(meta_count_) * sizeof(int32_t);
    const uint64_t host_bytes =
        MemorySpace::accounted_bytes(logits_host_bytes) + MemorySpace::accounted_bytes(meta_host_bytes);
    SPW_CHECK(device_bytes <= free_bytes, "--device cuda", description_, " cannot hold the model's bf16 weights (",
              format_bytes(weights.bytes()), "), the KV cache (", format_bytes(kv.bytes()),
              ", --kv-cache-mem) and the activations of ", max_rows_, " rows (", format_bytes(work.bytes()),
              "): ", format_bytes(device_bytes), " in all, ", format_bytes(free_bytes), " free of ",
              format_bytes(total_bytes));
    device_ = make_cuda_device(ordinal_, device_bytes, host_bytes);
    stream_ = as_cuda_stream(device_->stream(StreamKind::compute)).handle();
    MemorySpace& mem = device_->device_memory();
    weights.allocate(mem);
    kv.allocate(mem);
    work.allocate(mem);
    logits_host_ = static_cast<float*>(device_->host_memory().allocate(logits_host_bytes, "logits (pinned)"));
    meta_host_ = static_cast<int32_t*>(device_->host_memory().allocate(meta_host_bytes, "step rows (pinned)"));
    if (c.tie_word_embeddings) lm_head_ = embed_;
    upload(w, staging_floats);
    mem.free(staging_);
    staging_ = nullptr;
  }

  ~CudaBatchDecoder() override {
    if (stream_ != nullptr) SPW_CUDA_WARN(cudaStreamSynchronize(stream_));
    for (auto& [rows, replay] : replays_) {
      if (replay.graph != nullptr) SPW_CUDA_WARN(cudaGraphExecDestroy(replay.graph));
    }
  }

  int64_t vocab() const override { return config_.vocab_size; }

  uint64_t cache_bytes() const override {
    return kv_bytes_per_token(config_, kBf16Bytes) *
           static_cast<uint64_t>(blocks().num_blocks() * blocks().block_tokens());
  }

  std::string description() const override {
    return description_ + ", bf16, paged KV cache of " + std::to_string(blocks().num_blocks()) + " blocks of " +
           std::to_string(blocks().block_tokens()) + " tokens (" + format_bytes(cache_bytes()) + ")";
  }

 private:
  struct Layer {
    bf16 *input_norm = nullptr, *wqkv = nullptr, *wo = nullptr, *post_norm = nullptr, *gate_up = nullptr,
         *down = nullptr;
    bf16 *k_pool = nullptr, *v_pool = nullptr;  // [num_blocks, block_tokens, kv_heads * head_dim]
  };

  // KvCacheOptions::fit_device: as many blocks as the device's free memory
  // holds beside `others` (weights and activations) and the reserve, if
  // fewer than the budget's. A block costs its keys and values in every
  // layer and its entry in the step's uploaded tables.
  void fit_cache(uint64_t others, uint64_t free_bytes, uint64_t total_bytes, int64_t kv_row) {
    const uint64_t reserve = cuda_cache_reserve(total_bytes);
    const uint64_t block = static_cast<uint64_t>(2 * config_.num_hidden_layers * blocks().block_tokens() * kv_row) *
                               kBf16Bytes +
                           sizeof(int32_t);
    const uint64_t left = free_bytes > others + reserve ? free_bytes - others - reserve : 0;
    const auto fit = static_cast<int64_t>(left / block);
    SPW_CHECK(fit > 0, "--kv-cache-mem", description_, " has no room for a KV cache block (", format_bytes(block),
              ") beside the model's bf16 weights and activations (", format_bytes(others), ") and a reserve of ",
              format_bytes(reserve), ": ", format_bytes(free_bytes), " free of ", format_bytes(total_bytes));
    if (fit < blocks().num_blocks()) shrink_cache(fit);
  }

  // The weights, fused where one matmul takes two or three (rows stacked in
  // the order the kernels read them: q, k, v; gate, up).
  void upload(const model::LlamaWeights& w, int64_t staging_floats) {
    const auto& c = config_;
    const int64_t d = c.hidden_size, q_row = c.num_attention_heads * c.head_dim(),
                  kv_row = c.num_key_value_heads * c.head_dim(), ffn = c.intermediate_size;
    Bf16Upload up(staging_, staging_floats, stream_);
    up.copy(w.at("model.embed_tokens.weight").data.data(), c.vocab_size * d, embed_);
    up.copy(w.at("model.norm.weight").data.data(), d, final_norm_);
    if (!c.tie_word_embeddings) up.copy(w.at("lm_head.weight").data.data(), c.vocab_size * d, lm_head_);
    const std::vector<LlamaLayerWeights> host = llama_layer_weights(w);
    for (size_t i = 0; i < layers_.size(); ++i) {
      const LlamaLayerWeights& h = host[i];
      Layer& L = layers_[i];
      up.copy(h.input_norm, d, L.input_norm);
      up.copy(h.wq, q_row * d, L.wqkv);
      up.copy(h.wk, kv_row * d, L.wqkv + q_row * d);
      up.copy(h.wv, kv_row * d, L.wqkv + (q_row + kv_row) * d);
      up.copy(h.wo, d * q_row, L.wo);
      up.copy(h.post_norm, d, L.post_norm);
      up.copy(h.gate, ffn * d, L.gate_up);
      up.copy(h.up, ffn * d, L.gate_up + ffn * d);
      up.copy(h.down, d * ffn, L.down);
    }
    const std::vector<float> inv_freq = ops::rope_inv_freq(c.head_dim(), c.rope_theta, c.rope_scaling);
    SPW_CUDA(cudaMemcpyAsync(inv_freq_, inv_freq.data(), inv_freq.size() * sizeof(float), cudaMemcpyHostToDevice,
                             stream_));
    SPW_CUDA(cudaStreamSynchronize(stream_));
  }

  std::span<const float> run(std::span<const SequenceChunk> chunks, std::span<const int64_t> positions) override {
    CudaDeviceGuard guard(ordinal_);
    const size_t size = chunks.size() * static_cast<size_t>(config_.vocab_size);
    const std::vector<StepPass> passes = step_passes(chunks, positions, blocks(), max_rows_);
    // One pass holding every chunk, its logits in one copy (a decode
    // step's): they stay in the pinned buffer they arrive in, in chunk order.
    if (passes.size() == 1 && static_cast<int64_t>(chunks.size()) <= logits_rows_) {
      run_pass(passes[0], nullptr);
      return {logits_host_, size};
    }
    if (step_logits_.size() < size) step_logits_.resize(size);
    for (const StepPass& pass : passes) run_pass(pass, step_logits_.data());
    return {step_logits_.data(), size};
  }

  template <typename Out>
  void linear(const bf16* x, const int32_t* row_index, const bf16* w, Out* y, int64_t rows, int64_t in, int64_t out) {
    if (tensor_cores_) return ops::batch_linear_tc_cuda(x, row_index, w, y, rows, in, out, split_sums_, stream_);
    ops::batch_linear_cuda(x, row_index, w, y, rows, in, out, stream_);
  }

  // The pass's logits into `logits` by chunk; null leaves them in
  // logits_host_ (the caller's one pass of at most logits_rows_ chunks).
  void run_pass(const StepPass& pass, float* logits) {
    const auto n = static_cast<int64_t>(pass.tokens.size());
    const auto wanted = static_cast<int64_t>(pass.last_rows.size());
    // meta_: tokens, positions, table starts, last rows (max_rows_ each),
    // then the tables. The previous pass ended with the stream idle, so the
    // pinned buffer is free to refill.
    auto put = [&](const std::vector<int32_t>& v, int64_t at) {
      std::memcpy(meta_host_ + at, v.data(), v.size() * sizeof(int32_t));
    };
    put(pass.tokens, 0);
    put(pass.positions, max_rows_);
    put(pass.table_start, 2 * max_rows_);
    put(pass.last_rows, 3 * max_rows_);
    put(pass.tables, 4 * max_rows_);
    const auto vocab = static_cast<size_t>(config_.vocab_size);
    auto take_logits = [&](int64_t r0, int64_t len) {
      if (logits == nullptr) return;
      for (int64_t i = 0; i < len; ++i) {
        const size_t chunk = pass.last_chunk[static_cast<size_t>(r0 + i)];
        std::memcpy(logits + chunk * vocab, logits_host_ + i * config_.vocab_size, vocab * sizeof(float));
      }
    };
    const int64_t most_keys =
        pass.positions.empty() ? 0 : *std::max_element(pass.positions.begin(), pass.positions.end()) + 1;
    // A decode pass (every row's logits wanted, one lm_head call) replays
    // the graph of its row count and of whether its attention splits a
    // row's keys, captured the second time that pair comes.
    if (cuda_graphs_ && wanted == n && n <= logits_rows_) {
      Replay& replay = replays_[{n, paged_attention_splits(most_keys) > 1}];
      if (replay.graph == nullptr && replay.eager_runs >= 1) capture(replay, n, most_keys);
      if (replay.graph != nullptr) {
        SPW_CUDA(cudaGraphLaunch(replay.graph, stream_));
        SPW_CUDA(cudaStreamSynchronize(stream_));
        take_logits(0, n);
        return;
      }
      ++replay.eager_runs;
    }
    enqueue_layers(n, (static_cast<size_t>(4 * max_rows_) + pass.tables.size()) * sizeof(int32_t), most_keys);
    for (int64_t r0 = 0; r0 < wanted; r0 += logits_rows_) {
      const int64_t len = std::min(logits_rows_, wanted - r0);
      enqueue_logits(r0, len);
      SPW_CUDA(cudaStreamSynchronize(stream_));
      take_logits(r0, len);
    }
    SPW_CUDA(cudaStreamSynchronize(stream_));
  }

  // The step rows' upload (`meta_bytes` of meta_host_) and the layers over
  // n rows, through the final norm; `most_keys` as paged_attention_cuda's.
  void enqueue_layers(int64_t n, size_t meta_bytes, int64_t most_keys) {
    const auto& c = config_;
    const int64_t d = c.hidden_size, hd = c.head_dim(), hq = c.num_attention_heads, hkv = c.num_key_value_heads;
    const int64_t q_row = hq * hd, kv_row = hkv * hd, qkv_row = q_row + 2 * kv_row, ffn = c.intermediate_size;
    const auto eps = static_cast<float>(c.rms_norm_eps);
    const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
    SPW_CUDA(cudaMemcpyAsync(meta_, meta_host_, meta_bytes, cudaMemcpyHostToDevice, stream_));
    const int32_t* tokens = meta_;
    const PagedRowsCuda rows{n, meta_ + max_rows_, meta_ + 2 * max_rows_, meta_ + 4 * max_rows_};
    const PagedAttentionShape shape{hq, hkv, hd, blocks().block_tokens()};

    ops::embedding_forward_cuda(tokens, embed_, x_, n, c.vocab_size, d, stream_);
    const bool fused = fused_epilogues_ && n <= ops::kBatchLinearTcSplitRows;
    for (Layer& L : layers_) {
      if (fused) {
        enqueue_fused_layer(L, rows, shape, n, most_keys);
        continue;
      }
      ops::rmsnorm_forward_cuda(x_, L.input_norm, xn_, rstd_, n, d, eps, stream_);
      linear(xn_, nullptr, L.wqkv, qkv_, n, d, qkv_row);
      // q and k rotated in place at each row's own position, v carried.
      ops::rope_forward_cuda(qkv_, qkv_, 1, n, hq + 2 * hkv, hd, inv_freq_, 0, stream_, hq + hkv, rows.position);
      paged_kv_write_cuda(qkv_ + q_row, qkv_ + q_row + kv_row, qkv_row, rows, L.k_pool, L.v_pool, shape, stream_);
      paged_attention_cuda(qkv_, qkv_row, att_, q_row, L.k_pool, L.v_pool, rows, shape, scale, most_keys,
                           attention_splits_, stream_);
      linear(att_, nullptr, L.wo, proj_, n, q_row, d);
      ops::add_cuda(x_, proj_, x_, n * d, stream_);

      ops::rmsnorm_forward_cuda(x_, L.post_norm, xn_, rstd_, n, d, eps, stream_);
      linear(xn_, nullptr, L.gate_up, gate_up_, n, d, 2 * ffn);
      ops::swiglu_packed_forward_cuda(gate_up_, act_, n, ffn, stream_);
      linear(act_, nullptr, L.down, proj_, n, ffn, d);
      ops::add_cuda(x_, proj_, x_, n * d, stream_);
    }
    ops::rmsnorm_forward_cuda(x_, final_norm_, xn_, rstd_, n, d, eps, stream_);
  }

  // A layer of a pass of few rows with each matmul's slices added in the
  // kernel of what follows it: the bits of the unfused layer above.
  void enqueue_fused_layer(Layer& L, const PagedRowsCuda& rows, const PagedAttentionShape& shape, int64_t n,
                           int64_t most_keys) {
    const auto& c = config_;
    const int64_t d = c.hidden_size, hd = c.head_dim();
    const int64_t q_row = c.num_attention_heads * hd, qkv_row = q_row + 2 * c.num_key_value_heads * hd;
    const int64_t ffn = c.intermediate_size;
    const auto eps = static_cast<float>(c.rms_norm_eps);
    const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
    const auto slices = [&](const bf16* x, const bf16* w, int64_t in, int64_t out) {
      SPW_CHECK(ops::batch_linear_tc_slices_cuda(x, nullptr, w, split_sums_, n, in, out, stream_),
                "cuda batch decoder", "a fused pass of ", n, " rows did not run split");
      return ops::batch_linear_tc_slices(in);
    };
    ops::rmsnorm_forward_cuda(x_, L.input_norm, xn_, rstd_, n, d, eps, stream_);
    const int64_t qkv_slices = slices(xn_, L.wqkv, d, qkv_row);
    qkv_rope_kv_write_cuda(split_sums_, qkv_slices, inv_freq_, qkv_, qkv_row, rows, L.k_pool, L.v_pool, shape,
                           stream_);
    paged_attention_cuda(qkv_, qkv_row, att_, q_row, L.k_pool, L.v_pool, rows, shape, scale, most_keys,
                         attention_splits_, stream_);
    residual_add_cuda(split_sums_, slices(att_, L.wo, q_row, d), x_, n, d, stream_);
    ops::rmsnorm_forward_cuda(x_, L.post_norm, xn_, rstd_, n, d, eps, stream_);
    gate_up_swiglu_cuda(split_sums_, slices(xn_, L.gate_up, d, 2 * ffn), act_, n, ffn, stream_);
    residual_add_cuda(split_sums_, slices(act_, L.down, ffn, d), x_, n, d, stream_);
  }

  // The logits of wanted rows [r0, r0 + len) (the lm_head reads only
  // those), into logits_host_.
  void enqueue_logits(int64_t r0, int64_t len) {
    const int32_t* last_rows = meta_ + 3 * max_rows_;
    linear(xn_, last_rows + r0, lm_head_, logits_, len, config_.hidden_size, config_.vocab_size);
    SPW_CUDA(cudaMemcpyAsync(logits_host_, logits_, static_cast<size_t>(len * config_.vocab_size) * sizeof(float),
                             cudaMemcpyDeviceToHost, stream_));
  }

  // A decode pass of n rows as a graph: the whole meta buffer uploaded (its
  // tables' length varies from step to step), the layers, the logits. A
  // capture that fails leaves the decoder eager, with a warning.
  struct Replay {
    cudaGraphExec_t graph = nullptr;
    int eager_runs = 0;
  };
  void capture(Replay& replay, int64_t n, int64_t most_keys) {
    std::string why;
    const auto enqueue = [&] {
      enqueue_layers(n, static_cast<size_t>(meta_count_) * sizeof(int32_t), most_keys);
      enqueue_logits(0, n);
    };
    if (!capture_graph(stream_, enqueue, &replay.graph, &why)) {
      log_warn("CUDA graph capture of a decode step failed, decoding stays eager: " + why);
      cuda_graphs_ = false;
    }
  }

  const model::LlamaConfig config_;
  const int ordinal_;
  const int64_t max_rows_;
  const int64_t logits_rows_;
  const bool tensor_cores_;
  const bool fused_epilogues_;
  bool cuda_graphs_;
  std::map<std::pair<int64_t, bool>, Replay> replays_;  // by a decode pass's row count and splitting
  int64_t meta_count_ = 0;
  std::string description_;

  // Declared before everything that points into its memory.
  std::unique_ptr<Device> device_;
  cudaStream_t stream_ = nullptr;

  bf16 *embed_ = nullptr, *final_norm_ = nullptr, *lm_head_ = nullptr;
  std::vector<Layer> layers_;
  int32_t* meta_ = nullptr;
  int32_t* meta_host_ = nullptr;
  bf16 *x_ = nullptr, *xn_ = nullptr, *proj_ = nullptr, *qkv_ = nullptr, *att_ = nullptr, *gate_up_ = nullptr,
       *act_ = nullptr;
  float* rstd_ = nullptr;
  float* attention_splits_ = nullptr;
  float* logits_ = nullptr;
  float* logits_host_ = nullptr;
  std::vector<float> step_logits_;  // a step of several passes' logits, by chunk
  float* inv_freq_ = nullptr;
  float* staging_ = nullptr;
  float* split_sums_ = nullptr;  // with tensor cores, the few-row matmuls' slice sums
};

}  // namespace

std::unique_ptr<BatchDecoder> make_cuda_batch_decoder(const model::LlamaWeights& weights, const KvCacheOptions& cache,
                                                      const CudaBatchDecoderOptions& options) {
  return std::make_unique<CudaBatchDecoder>(weights, cache, options);
}

}  // namespace spillway::infer
