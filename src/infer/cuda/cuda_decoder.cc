#include "infer/cuda/cuda_decoder.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/bytes.h"
#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_device.h"
#include "device/cuda/device_guard.h"
#include "infer/cuda/bf16_upload.h"
#include "infer/cuda/device_requests.h"
#include "ops/add.h"
#include "ops/attention.h"
#include "ops/attention_cached.h"
#include "ops/embedding.h"
#include "ops/matmul_cuda.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"

namespace spillway::infer {

namespace {

constexpr uint64_t kMatmulWorkspaceBytes = 32ull << 20;

class CudaDecoder final : public Decoder {
 public:
  CudaDecoder(const model::LlamaWeights& w, int64_t max_len, const CudaDecoderOptions& o)
      : config_(w.config()), max_len_(max_len), ordinal_(o.ordinal) {
    const auto& c = config_;
    SPW_CHECK(max_len > 0, "generation", "the context length must be positive, got ", max_len);
    SPW_CHECK(o.prefill_chunk > 0 && o.logits_rows > 0, "cuda decoder", "prefill_chunk ", o.prefill_chunk,
              " and logits_rows ", o.logits_rows, " must be positive");
    SPW_CHECK(c.head_dim() <= ops::kAttentionCachedCudaMaxHeadDim, "--device cuda", "head_dim ", c.head_dim(),
              " is more than the GPU attention's ", ops::kAttentionCachedCudaMaxHeadDim);
    const int count = cuda_device_count();
    SPW_CHECK(o.ordinal >= 0 && o.ordinal < count, "--device cuda", "no CUDA GPU ", o.ordinal,
              " is visible to this process (", count, " visible)");
    chunk_ = std::min(o.prefill_chunk, max_len);
    logits_rows_ = std::min(o.logits_rows, chunk_);
    const int64_t d = c.hidden_size, hd = c.head_dim();
    const int64_t q_row = c.num_attention_heads * hd, kv_row = c.num_key_value_heads * hd;
    const int64_t ffn = c.intermediate_size, vocab = c.vocab_size;

    // Every device buffer, asked for first so the pool is sized exactly.
    DeviceRequests requests;
    const int64_t staging_floats = Bf16Upload::staging_floats(w);
    for (const auto& t : w.tensors()) requests.add(weights_[t.name], t.shape.numel(), t.name + " (bf16)");
    layers_.resize(static_cast<size_t>(c.num_hidden_layers));
    for (size_t i = 0; i < layers_.size(); ++i) {
      requests.add(layers_[i].k_cache, max_len * kv_row, "layer " + std::to_string(i) + " key cache");
      requests.add(layers_[i].v_cache, max_len * kv_row, "layer " + std::to_string(i) + " value cache");
    }
    requests.add(tokens_, chunk_, "tokens");
    requests.add(x_, chunk_ * d, "residual stream");
    requests.add(xn_, chunk_ * d, "normed activations");
    requests.add(proj_, chunk_ * d, "projections");
    requests.add(rstd_, chunk_, "rmsnorm rstd");
    requests.add(q_, chunk_ * q_row, "queries");
    requests.add(att_, chunk_ * q_row, "attention output");
    requests.add(lse_, chunk_ * c.num_attention_heads, "attention log-sum-exp");
    requests.add(gate_, chunk_ * ffn, "MLP gate");
    requests.add(up_, chunk_ * ffn, "MLP up");
    requests.add(logits_, logits_rows_ * vocab, "logits");
    requests.add(inv_freq_, hd / 2, "RoPE frequencies");
    requests.add(attention_workspace_, static_cast<int64_t>(ops::kAttentionCachedCudaWorkspaceBytes),
            "attention workspace");
    requests.add(matmul_workspace_, static_cast<int64_t>(kMatmulWorkspaceBytes), "cuBLASLt workspace");
    requests.add(staging_, staging_floats, "fp32 staging for the upload");
    const uint64_t device_bytes = requests.bytes();
    const uint64_t host_bytes = MemorySpace::accounted_bytes(static_cast<uint64_t>(logits_rows_ * vocab) * 4);

    CudaDeviceGuard guard(ordinal_);
    device_ = make_cuda_device(ordinal_, device_bytes, host_bytes);
    stream_ = as_cuda_stream(device_->stream(StreamKind::compute)).handle();
    MemorySpace& mem = device_->device_memory();
    requests.allocate(mem);
    logits_host_ = static_cast<float*>(device_->host_memory().allocate(host_bytes, "logits (pinned)"));
    matmul_ = std::make_unique<ops::CublasLtMatmul>(matmul_workspace_, kMatmulWorkspaceBytes);
    cudaDeviceProp prop{};
    SPW_CUDA(cudaGetDeviceProperties(&prop, ordinal_));
    description_ = "cuda:" + std::to_string(ordinal_) + " " + prop.name + ", bf16";

    Bf16Upload upload(staging_, staging_floats, stream_);
    for (const auto& t : w.tensors()) upload.copy(t.data.data(), t.shape.numel(), weights_.at(t.name));
    const std::vector<float> inv_freq = ops::rope_inv_freq(hd, c.rope_theta, c.rope_scaling);
    SPW_CUDA(cudaMemcpyAsync(inv_freq_, inv_freq.data(), inv_freq.size() * 4, cudaMemcpyHostToDevice, stream_));
    SPW_CUDA(cudaStreamSynchronize(stream_));
    mem.free(staging_);
    staging_ = nullptr;

    auto at = [&](const std::string& name) -> const bf16* {
      auto it = weights_.find(name);
      SPW_CHECK(it != weights_.end(), "cuda decoder", "the weights have no tensor '", name, "'");
      return it->second;
    };
    embed_ = at("model.embed_tokens.weight");
    final_norm_ = at("model.norm.weight");
    lm_head_ = c.tie_word_embeddings ? embed_ : at("lm_head.weight");
    for (size_t i = 0; i < layers_.size(); ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      Layer& L = layers_[i];
      L.input_norm = at(p + "input_layernorm.weight");
      L.wq = at(p + "self_attn.q_proj.weight");
      L.wk = at(p + "self_attn.k_proj.weight");
      L.wv = at(p + "self_attn.v_proj.weight");
      L.wo = at(p + "self_attn.o_proj.weight");
      L.post_norm = at(p + "post_attention_layernorm.weight");
      L.gate = at(p + "mlp.gate_proj.weight");
      L.up = at(p + "mlp.up_proj.weight");
      L.down = at(p + "mlp.down_proj.weight");
    }
  }

  ~CudaDecoder() override {
    if (stream_ != nullptr) SPW_CUDA_WARN(cudaStreamSynchronize(stream_));
  }

  std::vector<float> forward(std::span<const int32_t> tokens) override { return run(tokens, true); }

  std::vector<float> forward_last(std::span<const int32_t> tokens) override {
    SPW_CHECK(!tokens.empty(), "generation", "no tokens to feed");
    return run(tokens, false);
  }

  int64_t position() const override { return pos_; }
  int64_t capacity() const override { return max_len_; }
  void reset() override { pos_ = 0; }
  std::string description() const override { return description_; }

 private:
  struct Layer {
    const bf16 *input_norm = nullptr, *wq = nullptr, *wk = nullptr, *wv = nullptr, *wo = nullptr,
               *post_norm = nullptr, *gate = nullptr, *up = nullptr, *down = nullptr;
    bf16* k_cache = nullptr;  // [max_len, kv_heads * head_dim]
    bf16* v_cache = nullptr;
  };

  // y[rows, out] = x[rows, in] W^T, W stored [out, in] as in the checkpoint.
  void linear(const bf16* x, const bf16* w, bf16* y, int64_t rows, int64_t in, int64_t out) {
    matmul_->run(false, true, rows, out, in, 1.0f, x, DType::bf16, w, DType::bf16, 0.0f, y, DType::bf16, stream_);
  }

  std::vector<float> run(std::span<const int32_t> tokens, bool all_rows) {
    const auto& c = config_;
    const auto n = static_cast<int64_t>(tokens.size());
    SPW_CHECK(pos_ + n <= max_len_, "generation", "context of ", max_len_, " tokens is full (at ", pos_,
              ", feeding ", n, ")");
    for (int64_t t = 0; t < n; ++t) {
      SPW_CHECK(tokens[t] >= 0 && tokens[t] < c.vocab_size, "embedding", "id ", tokens[t], " at position ", t,
                " is outside [0, ", c.vocab_size, ")");
    }
    CudaDeviceGuard guard(ordinal_);
    std::vector<float> logits(static_cast<size_t>((all_rows ? n : 1) * c.vocab_size));
    for (int64_t start = 0; start < n; start += chunk_) {
      const int64_t len = std::min(chunk_, n - start);
      run_chunk(tokens.subspan(static_cast<size_t>(start), static_cast<size_t>(len)));
      if (all_rows) {
        copy_logits(0, len, logits.data() + start * c.vocab_size);
      } else if (start + len == n) {
        copy_logits(len - 1, 1, logits.data());
      }
    }
    return logits;  // copy_logits waited for the stream
  }

  // Runs the layers over `tokens` at positions pos_..., leaving the final
  // norm's output in xn_, and advances pos_.
  void run_chunk(std::span<const int32_t> tokens) {
    const auto& c = config_;
    const auto n = static_cast<int64_t>(tokens.size());
    const int64_t d = c.hidden_size, hd = c.head_dim(), hq = c.num_attention_heads, hkv = c.num_key_value_heads;
    const int64_t q_row = hq * hd, kv_row = hkv * hd, ffn = c.intermediate_size;
    const auto eps = static_cast<float>(c.rms_norm_eps);
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    SPW_CUDA(cudaMemcpyAsync(tokens_, tokens.data(), tokens.size_bytes(), cudaMemcpyHostToDevice, stream_));
    ops::embedding_forward_cuda(tokens_, embed_, x_, n, c.vocab_size, d, stream_);
    for (Layer& L : layers_) {
      // The new keys and values go straight into their rows of the cache.
      bf16* k_new = L.k_cache + pos_ * kv_row;
      bf16* v_new = L.v_cache + pos_ * kv_row;
      ops::rmsnorm_forward_cuda(x_, L.input_norm, xn_, rstd_, n, d, eps, stream_);
      linear(xn_, L.wq, q_, n, d, q_row);
      linear(xn_, L.wk, k_new, n, d, kv_row);
      linear(xn_, L.wv, v_new, n, d, kv_row);
      ops::rope_forward_cuda(q_, q_, 1, n, hq, hd, inv_freq_, pos_, stream_);
      ops::rope_forward_cuda(k_new, k_new, 1, n, hkv, hd, inv_freq_, pos_, stream_);
      if (pos_ == 0) {
        // Nothing cached yet: plain causal attention over the chunk, which
        // the training's flash kernel (tensor cores) does fastest; the cache
        // rows it reads are [n, kv_heads * head_dim] as that kernel wants.
        ops::attention_forward_cuda(q_, L.k_cache, L.v_cache, att_, lse_, ops::AttentionShape{1, n, hq, hkv, hd},
                                    scale, stream_);
      } else {
        ops::attention_cached_cuda(q_, L.k_cache, L.v_cache, att_,
                                   ops::CachedAttentionShape{1, n, pos_ + n, max_len_, hq, hkv, hd}, scale,
                                   attention_workspace_, ops::kAttentionCachedCudaWorkspaceBytes, stream_);
      }
      linear(att_, L.wo, proj_, n, q_row, d);
      ops::add_cuda(x_, proj_, x_, n * d, stream_);

      ops::rmsnorm_forward_cuda(x_, L.post_norm, xn_, rstd_, n, d, eps, stream_);
      linear(xn_, L.gate, gate_, n, d, ffn);
      linear(xn_, L.up, up_, n, d, ffn);
      ops::swiglu_forward_cuda(gate_, up_, gate_, n * ffn, stream_);
      linear(gate_, L.down, proj_, n, ffn, d);
      ops::add_cuda(x_, proj_, x_, n * d, stream_);
    }
    ops::rmsnorm_forward_cuda(x_, final_norm_, xn_, rstd_, n, d, eps, stream_);
    pos_ += n;
  }

  // Logits of rows first .. first+rows-1 of the last chunk into host memory,
  // logits_rows_ at a time; returns when they are there.
  void copy_logits(int64_t first, int64_t rows, float* host) {
    const auto& c = config_;
    const int64_t d = c.hidden_size, vocab = c.vocab_size;
    for (int64_t r0 = 0; r0 < rows; r0 += logits_rows_) {
      const int64_t len = std::min(logits_rows_, rows - r0);
      matmul_->run(false, true, len, vocab, d, 1.0f, xn_ + (first + r0) * d, DType::bf16, lm_head_, DType::bf16,
                   0.0f, logits_, DType::f32, stream_);
      const size_t bytes = static_cast<size_t>(len * vocab) * sizeof(float);
      SPW_CUDA(cudaMemcpyAsync(logits_host_, logits_, bytes, cudaMemcpyDeviceToHost, stream_));
      SPW_CUDA(cudaStreamSynchronize(stream_));
      std::memcpy(host + r0 * vocab, logits_host_, bytes);
    }
  }

  const model::LlamaConfig config_;
  const int64_t max_len_;
  const int ordinal_;
  int64_t chunk_ = 0;
  int64_t logits_rows_ = 0;
  std::string description_;

  // Declared before everything that points into its memory.
  std::unique_ptr<Device> device_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<ops::CublasLtMatmul> matmul_;

  std::unordered_map<std::string, bf16*> weights_;
  const bf16* embed_ = nullptr;
  const bf16* final_norm_ = nullptr;
  const bf16* lm_head_ = nullptr;
  std::vector<Layer> layers_;
  int32_t* tokens_ = nullptr;
  bf16 *x_ = nullptr, *xn_ = nullptr, *proj_ = nullptr, *q_ = nullptr, *att_ = nullptr, *gate_ = nullptr,
       *up_ = nullptr;
  float* rstd_ = nullptr;
  float* lse_ = nullptr;
  float* logits_ = nullptr;
  float* logits_host_ = nullptr;
  float* inv_freq_ = nullptr;
  char* attention_workspace_ = nullptr;
  char* matmul_workspace_ = nullptr;
  float* staging_ = nullptr;
  int64_t pos_ = 0;
};

}  // namespace

std::unique_ptr<Decoder> make_cuda_decoder(const model::LlamaWeights& weights, int64_t max_len,
                                           const CudaDecoderOptions& options) {
  return std::make_unique<CudaDecoder>(weights, max_len, options);
}

}  // namespace spillway::infer
