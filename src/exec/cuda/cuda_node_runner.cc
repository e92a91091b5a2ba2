#include "exec/cuda/cuda_node_runner.h"

#include <algorithm>
#include <cmath>

#include "base/log.h"
#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "ops/add.h"
#include "ops/attention.h"
#include "ops/cast.h"
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "ops/fill.h"
#include "ops/gemm_hopper.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"

namespace spillway::exec {

using graph::Graph;
using graph::Node;
using graph::OpKind;
using graph::Value;

namespace {

ops::AttentionShape attention_shape(const Graph& g, const Node& n) {
  const graph::AttentionDims d = graph::attention_dims(g, n);
  return ops::AttentionShape{d.batch, d.seq, d.heads, d.kv_heads, d.head_dim, n.attrs.packed};
}

ops::AttentionPass pass_of(const Node& n) {
  return n.kind == OpKind::attention ? ops::AttentionPass::kForward : ops::AttentionPass::kBackward;
}

// The column blocks of a packed q|k|v (see ops::AttentionShape::packed_qkv).
struct QkvBlocks {
  int64_t rows, q_cols, kv_cols;
  explicit QkvBlocks(const ops::AttentionShape& s) : rows(s.batch * s.seq), q_cols(s.q_width()), kv_cols(s.kv_width()) {}
  int64_t width() const { return q_cols + 2 * kv_cols; }
  uint64_t dense_bytes() const { return static_cast<uint64_t>(rows * width()) * sizeof(bf16); }
  bf16* q(void* packed) const { return static_cast<bf16*>(packed); }
  bf16* k(void* packed) const { return static_cast<bf16*>(packed) + q_cols; }
  bf16* v(void* packed) const { return static_cast<bf16*>(packed) + q_cols + kv_cols; }
};

// The own kernels take q, k and v as three dense tensors: a packed input is
// copied apart into `dense` (laid out q, then k, then v), and dense
// gradients copied back into the packed one, by strided 2-D copies.
void copy_blocks(const QkvBlocks& b, const bf16* from, bool from_packed, bf16* to, cudaStream_t stream) {
  const int64_t cols[3] = {b.q_cols, b.kv_cols, b.kv_cols};
  int64_t packed_at = 0, dense_at = 0;
  for (int64_t c : cols) {
    const size_t packed_pitch = static_cast<size_t>(b.width()) * sizeof(bf16);
    const size_t dense_pitch = static_cast<size_t>(c) * sizeof(bf16);
    const bf16* src = from + (from_packed ? packed_at : dense_at);
    bf16* dst = to + (from_packed ? dense_at : packed_at);
    SPW_CUDA(cudaMemcpy2DAsync(dst, from_packed ? dense_pitch : packed_pitch, src,
                               from_packed ? packed_pitch : dense_pitch, dense_pitch, static_cast<size_t>(b.rows),
                               cudaMemcpyDeviceToDevice, stream));
    packed_at += c;
    dense_at += b.rows * c;
  }
}

}  // namespace

CudaNodeRunner::CudaNodeRunner(const Graph& graph, MemorySpace& memory, cudaStream_t stream, bool deterministic,
                               int matmul_candidates, bool own_gemm)
    : memory_(memory), stream_(stream) {
  int device = 0;
  SPW_CUDA(cudaGetDevice(&device));
  const bool hopper = own_gemm && ops::hopper_gemm_available(device);
  matmul_workspace_ = memory_.allocate(ops::CublasLtMatmul::kDefaultWorkspaceBytes, "cuBLASLt workspace");
  matmul_ = std::make_unique<ops::CublasLtMatmul>(matmul_workspace_, ops::CublasLtMatmul::kDefaultWorkspaceBytes,
                                                  matmul_candidates);
  const std::vector<int> readers = graph::reader_counts(graph);
  for (const Node& n : graph.nodes()) {
    if (n.kind != OpKind::embedding_backward || n.inputs.size() != 3 || !graph.is_accumulated(n.outputs[0])) continue;
    const Value base = n.inputs[2];
    const int32_t p = graph.value(base).producer;
    if (p < 0 || readers[static_cast<size_t>(base.id)] != 1 || graph.is_output(base)) continue;
    const Node& product = graph.nodes()[static_cast<size_t>(p)];
    if (!graph::is_plain_product(graph, product)) continue;
    tied_scatter_[&product] = &n;
    tied_scatter_[&n] = &n;
  }
  uint64_t need = 0;
  for (const Node& n : graph.nodes()) {
    const auto& in0 = graph.value(n.inputs.empty() ? n.outputs[0] : n.inputs[0]).shape;
    switch (n.kind) {
      case OpKind::matmul: {
        // The own Hopper GEMM takes bf16 operands and output only.
        const auto [m, cols, k] = graph::matmul_dims(graph, n);
        const DType out_dtype = graph.value(n.outputs[0]).dtype;
        const bool bf16_only = graph.value(n.inputs[0]).dtype == DType::bf16 &&
                               graph.value(n.inputs[1]).dtype == DType::bf16 && out_dtype == DType::bf16;
        if (n.attrs.swiglu_backward) {
          // Down's dX with SwiGLU's backward (graph/fuse_matmul_swiglu.h):
          // off the Hopper kernel, dout is made in the workspace first.
          const bool own = hopper && bf16_only && !n.attrs.trans_a && !n.attrs.trans_b &&
                           ops::hopper_gemm_swiglu_backward_fits(m, cols, k);
          use_hopper_gemm_backward_[&n] = own;
          if (!own) need = std::max(need, static_cast<uint64_t>(m * cols) * dtype_size(out_dtype));
        } else if (n.outputs.size() == 2) {
          // The product and its SwiGLU gate (graph/fuse_matmul_swiglu.h).
          use_hopper_gemm_[&n] = hopper && bf16_only && !n.attrs.trans_a && n.attrs.trans_b &&
                                 ops::hopper_gemm_swiglu_fits(m, cols / 2, k);
        } else if (n.attrs.rope) {
          // The q|k|v product and its rope (graph/fuse_matmul_rope.h).
          const graph::RopeDims r = graph::rope_dims(graph, n);
          const bool own = hopper && bf16_only && !n.attrs.trans_a && n.attrs.trans_b &&
                           ops::hopper_gemm_rope_fits(m, cols, k, r.seq, r.head_dim, r.rotated_cols());
          use_hopper_gemm_rope_[&n] = own;
          // Made now, not in the step (which may be captured as a CUDA graph).
          if (own) {
            const auto& inv_freq = *n.attrs.inv_freq;
            rope_table_on_device(inv_freq, inv_freq_on_device(inv_freq), r.seq, r.head_dim, n.attrs.pos0);
          }
        }
        break;
      }
      case OpKind::rmsnorm_backward: {
        const Shape& x = graph.value(n.inputs[1]).shape;
        need = std::max(need, ops::rmsnorm_backward_workspace_bytes(x.rows(), x.last()));
        break;
      }
      case OpKind::embedding_backward:
        need = std::max(need, ops::embedding_backward_workspace_bytes(in0.numel(), graph.value(n.outputs[0]).shape[0]));
        break;
      case OpKind::cross_entropy:
        need = std::max(need, n.outputs.size() == 3 ? ops::cross_entropy_forward_backward_workspace_bytes(in0.rows())
                                                    : ops::cross_entropy_forward_workspace_bytes(in0.rows()));
        break;
      case OpKind::attention:
      case OpKind::attention_backward: {
        if (!cudnn_) {
          cudnn_ = std::make_unique<ops::CudnnAttention>(deterministic ? ops::CudnnBackwardOrder::kDeterministic
                                                                       : ops::CudnnBackwardOrder::kAtomic);
        }
        const auto shape = attention_shape(graph, n);
        bool cudnn_ok = false;
        try {
          cudnn_ok = cudnn_->supports(shape, n.attrs.scale, pass_of(n));
          if (!cudnn_ok) cudnn_->workspace_bytes(shape, n.attrs.scale, pass_of(n));  // throws the reason
        } catch (const Error& e) {
          cudnn_ok = false;
          log_warn(std::string(graph::op_name(n.kind)) + " '" + n.name + "' runs on the own kernel: " + e.what());
        }
        use_cudnn_[&n] = cudnn_ok;
        if (cudnn_ok) {
          need = std::max(need, cudnn_->workspace_bytes(shape, n.attrs.scale, pass_of(n)));
        } else {
          // The own kernels: dense copies of a packed q|k|v (and of its
          // gradient), then the backward's row terms.
          ops::AttentionShape dense = shape;
          dense.packed_qkv = false;
          const uint64_t copies = shape.packed_qkv ? QkvBlocks(shape).dense_bytes() : 0;
          if (n.kind == OpKind::attention_backward) {
            need = std::max(need, 2 * copies + ops::attention_backward_cuda_workspace_bytes(dense));
          } else {
            need = std::max(need, copies);
          }
        }
        break;
      }
      default:
        break;
    }
  }
  if (need > 0) workspace_ = memory_.allocate(need, "kernel workspace");
}

CudaNodeRunner::~CudaNodeRunner() {
  SPW_CUDA_WARN(cudaStreamSynchronize(stream_));
  for (auto& [key, ptr] : inv_freq_) memory_.free(ptr);
  for (auto& [key, ptr] : rope_tables_) memory_.free(ptr);
  matmul_.reset();
  memory_.free(matmul_workspace_);
  memory_.free(workspace_);
}

int CudaNodeRunner::cudnn_attention_nodes() const {
  return static_cast<int>(std::count_if(use_cudnn_.begin(), use_cudnn_.end(), [](const auto& p) { return p.second; }));
}

std::string CudaNodeRunner::attention_summary() const {
  return "attention through cuDNN in " + std::to_string(cudnn_attention_nodes()) + " of " +
         std::to_string(use_cudnn_.size()) + " nodes";
}

std::string CudaNodeRunner::gemm_summary() const {
  auto count = [](const std::map<const graph::Node*, bool>& use, const std::string& what) -> std::string {
    if (use.empty()) return "";
    const auto own = std::count_if(use.begin(), use.end(), [](const auto& p) { return p.second; });
    return what + " in the own Hopper GEMM in " + std::to_string(own) + " of " + std::to_string(use.size()) + " nodes";
  };
  std::string summary;
  for (const std::string& part : {count(use_hopper_gemm_rope_, "q|k|v with its RoPE"),
                                  count(use_hopper_gemm_, "gate|up with its SwiGLU gate"),
                                  count(use_hopper_gemm_backward_, "down's dX with SwiGLU's backward")}) {
    if (!part.empty()) summary += (summary.empty() ? "" : "; ") + part;
  }
  if (tied_gradient_in_place_ && !tied_scatter_.empty()) {
    summary += std::string(summary.empty() ? "" : "; ") + "lm_head's dW written into the tied embedding's gradient";
  }
  return summary;
}

void CudaNodeRunner::synchronize() { SPW_CUDA(cudaStreamSynchronize(stream_)); }

const float* CudaNodeRunner::inv_freq_on_device(const std::vector<float>& inv_freq) {
  auto it = inv_freq_.find(&inv_freq);
  if (it != inv_freq_.end()) return static_cast<const float*>(it->second);
  void* ptr = memory_.allocate(inv_freq.size() * sizeof(float), "rope frequencies");
  SPW_CUDA(cudaMemcpyAsync(ptr, inv_freq.data(), inv_freq.size() * sizeof(float), cudaMemcpyHostToDevice, stream_));
  SPW_CUDA(cudaStreamSynchronize(stream_));  // the host vector may go before the copy runs otherwise
  inv_freq_[&inv_freq] = ptr;
  return static_cast<const float*>(ptr);
}

const float* CudaNodeRunner::rope_table_on_device(const std::vector<float>& inv_freq, const float* inv_freq_device,
                                                  int64_t seq, int64_t head_dim, int64_t pos0) {
  const auto key = std::make_tuple(&inv_freq, seq, head_dim, pos0);
  auto it = rope_tables_.find(key);
  if (it != rope_tables_.end()) return static_cast<const float*>(it->second);
  void* ptr = memory_.allocate(static_cast<uint64_t>(seq * head_dim) * sizeof(float), "rope cos/sin table");
  ops::rope_table_cuda(inv_freq_device, seq, head_dim, pos0, static_cast<float*>(ptr), stream_);
  rope_tables_[key] = ptr;
  return static_cast<const float*>(ptr);
}

void CudaNodeRunner::run_packed_attention(const Node& n, const ops::AttentionShape& shape, void* qkv, void* dout,
                                          void* out_in, void* lse_in, void* out, void* lse, void* dqkv) {
  const QkvBlocks b(shape);
  const double scale = n.attrs.scale;
  const bool forward = n.kind == OpKind::attention;
  if (use_cudnn_.at(&n)) {
    if (forward) {
      cudnn_->forward(b.q(qkv), b.k(qkv), b.v(qkv), static_cast<bf16*>(out), static_cast<float*>(lse), shape, scale,
                      workspace_, stream_);
    } else {
      cudnn_->backward(static_cast<bf16*>(dout), b.q(qkv), b.k(qkv), b.v(qkv), static_cast<bf16*>(out_in),
                       static_cast<float*>(lse_in), b.q(dqkv), b.k(dqkv), b.v(dqkv), shape, scale, workspace_,
                       stream_);
    }
    return;
  }
  ops::AttentionShape dense_shape = shape;
  dense_shape.packed_qkv = false;
  bf16* dense = static_cast<bf16*>(workspace_);
  const int64_t kv_elems = b.rows * b.kv_cols, q_elems = b.rows * b.q_cols;
  copy_blocks(b, static_cast<const bf16*>(qkv), true, dense, stream_);
  if (forward) {
    ops::attention_forward_cuda(dense, dense + q_elems, dense + q_elems + kv_elems, static_cast<bf16*>(out),
                                static_cast<float*>(lse), dense_shape, scale, stream_);
    return;
  }
  bf16* grads = dense + b.rows * b.width();
  ops::attention_backward_cuda(static_cast<bf16*>(dout), dense, dense + q_elems, dense + q_elems + kv_elems,
                               static_cast<bf16*>(out_in), static_cast<float*>(lse_in), grads, grads + q_elems,
                               grads + q_elems + kv_elems, dense_shape, scale, grads + b.rows * b.width(), stream_);
  copy_blocks(b, grads, false, static_cast<bf16*>(dqkv), stream_);
}

const Node* CudaNodeRunner::tied_in_place(const Node& n) const {
  if (!tied_gradient_in_place_) return nullptr;
  const auto it = tied_scatter_.find(&n);
  if (it == tied_scatter_.end()) return nullptr;
  return !it->second->attrs.accumulate || overwrite_accumulated_ ? it->second : nullptr;
}

void CudaNodeRunner::run(const Graph& g, const Node& n, const std::vector<void*>& data) {
  auto in = [&](size_t i) { return data[static_cast<size_t>(n.inputs[i].id)]; };
  auto out = [&](size_t i) { return data[static_cast<size_t>(n.outputs[i].id)]; };
  auto bf = [](void* p) { return static_cast<bf16*>(p); };
  auto f32 = [](void* p) { return static_cast<float*>(p); };
  auto ids = [](void* p) { return static_cast<const int32_t*>(p); };
  const auto& a = n.attrs;
  const auto& out0 = g.value(n.outputs[0]);
  const bool accumulate = a.accumulate && !overwrite_accumulated_;
  switch (n.kind) {
    case OpKind::fill:
      // Accumulating adds zeros (graph.h allows no other value): nothing to do.
      if (!accumulate) ops::fill_cuda(out(0), out0.dtype, out0.shape.numel(), a.fill_value, stream_);
      break;
    case OpKind::embedding: {
      const Shape& table = g.value(n.inputs[0]).shape;
      ops::embedding_forward_cuda(ids(in(1)), bf(in(0)), bf(out(0)), g.value(n.inputs[1]).shape.numel(), table[0],
                                  table[1], stream_);
      break;
    }
    case OpKind::embedding_backward: {
      // A third input is added to dtable (graph/fuse_embedding_add.h); when
      // its product was written into dtable already, the rows are added there.
      const bool base_in_place = tied_in_place(n) != nullptr;
      ops::embedding_backward_cuda(ids(in(0)), bf(in(1)), f32(out(0)), g.value(n.inputs[0]).shape.numel(),
                                   out0.shape[0], out0.shape[1], workspace_, stream_, accumulate || base_in_place,
                                   n.inputs.size() == 3 && !base_in_place ? f32(in(2)) : nullptr);
      break;
    }
    case OpKind::rmsnorm: {
      const Shape& x = g.value(n.inputs[0]).shape;
      ops::rmsnorm_forward_cuda(bf(in(0)), bf(in(1)), bf(out(0)), f32(out(1)), x.rows(), x.last(),
                                static_cast<float>(a.eps), stream_);
      break;
    }
    case OpKind::rmsnorm_backward: {
      const Shape& x = g.value(n.inputs[1]).shape;
      // A fifth input is added to dx (graph/fuse_rmsnorm_add.h).
      const bf16* dx_addend = n.inputs.size() == 5 ? bf(in(4)) : nullptr;
      ops::rmsnorm_backward_cuda(bf(in(0)), bf(in(1)), bf(in(2)), f32(in(3)), bf(out(0)), f32(out(1)), x.rows(),
                                 x.last(), workspace_, stream_, accumulate, dx_addend);
      break;
    }
    case OpKind::matmul: {
      const auto& va = g.value(n.inputs[0]);
      const auto& vb = g.value(n.inputs[1]);
      const auto [m, nn, k] = graph::matmul_dims(g, n);
      // beta = 1 adds into the caller's buffer (an accumulated gradient).
      if (a.swiglu_backward) {
        // dout of SwiGLU, then its backward (graph/fuse_matmul_swiglu.h): one
        // Hopper kernel where the shape is whole tiles, else dout in the
        // workspace and the separate kernel.
        if (use_hopper_gemm_backward_.at(&n)) {
          ops::hopper_gemm_swiglu_backward(bf(in(0)), bf(in(1)), bf(in(2)), bf(out(0)), m, nn, k, stream_);
        } else {
          matmul_->run(a.trans_a, a.trans_b, m, nn, k, 1.0f, in(0), va.dtype, in(1), vb.dtype, 0.0f, workspace_,
                       out0.dtype, stream_);
          ops::swiglu_packed_backward_cuda(static_cast<const bf16*>(workspace_), bf(in(2)), bf(out(0)), m, nn, stream_);
        }
      } else if (n.inputs.size() == 3) {
        // out = a·b + addend in the matmul's epilogue (graph/fuse_matmul_add.h).
        matmul_->run_with_addend(a.trans_a, a.trans_b, m, nn, k, in(0), va.dtype, in(1), vb.dtype, in(2), out(0),
                                 out0.dtype, stream_);
      } else if (a.rope) {
        // The q|k|v product and its rope (graph/fuse_matmul_rope.h): one
        // Hopper kernel where the shape is whole tiles, else the product
        // rotated in place by the rope kernel.
        const graph::RopeDims r = graph::rope_dims(g, n);
        const float* freq = inv_freq_on_device(*a.inv_freq);
        if (use_hopper_gemm_rope_.at(&n)) {
          ops::hopper_gemm_rope(bf(in(0)), bf(in(1)), bf(out(0)), m, nn, k,
                                rope_table_on_device(*a.inv_freq, freq, r.seq, r.head_dim, a.pos0), r.seq, r.head_dim,
                                r.rotated_cols(), stream_);
        } else {
          matmul_->run(a.trans_a, a.trans_b, m, nn, k, 1.0f, in(0), va.dtype, in(1), vb.dtype, 0.0f, out(0),
                       out0.dtype, stream_);
          ops::rope_forward_cuda(bf(out(0)), bf(out(0)), r.batch, r.seq, r.heads, r.head_dim, freq, a.pos0, stream_,
                                 r.rotated_heads);
        }
      } else if (n.outputs.size() == 2) {
        // The product and its SwiGLU gate (graph/fuse_matmul_swiglu.h): one
        // Hopper kernel where the shape is whole tiles, else the two ops.
        const int64_t ffn = nn / 2;
        if (use_hopper_gemm_.at(&n)) {
          ops::hopper_gemm_swiglu(bf(in(0)), bf(in(1)), bf(out(0)), bf(out(1)), m, ffn, k, stream_);
        } else {
          matmul_->run(a.trans_a, a.trans_b, m, nn, k, 1.0f, in(0), va.dtype, in(1), vb.dtype, 0.0f, out(0),
                       out0.dtype, stream_);
          ops::swiglu_packed_forward_cuda(bf(out(0)), bf(out(1)), m, ffn, stream_);
        }
      } else {
        // A tied embedding's product goes straight to its gradient (set_tied_gradient_in_place).
        const Node* scatter = tied_in_place(n);
        void* to = scatter ? data[static_cast<size_t>(scatter->outputs[0].id)] : out(0);
        matmul_->run(a.trans_a, a.trans_b, m, nn, k, 1.0f, in(0), va.dtype, in(1), vb.dtype,
                     accumulate ? 1.0f : 0.0f, to, out0.dtype, stream_);
      }
      break;
    }
    case OpKind::rope:
    case OpKind::rope_backward: {
      const graph::RopeDims r = graph::rope_dims(g, n);
      const float* freq = inv_freq_on_device(*a.inv_freq);
      if (n.kind == OpKind::rope) {
        ops::rope_forward_cuda(bf(in(0)), bf(out(0)), r.batch, r.seq, r.heads, r.head_dim, freq, a.pos0, stream_,
                               r.rotated_heads);
      } else {
        ops::rope_backward_cuda(bf(in(0)), bf(out(0)), r.batch, r.seq, r.heads, r.head_dim, freq, a.pos0, stream_,
                                r.rotated_heads);
      }
      break;
    }
    case OpKind::attention: {
      const auto shape = attention_shape(g, n);
      if (a.packed) {
        run_packed_attention(n, shape, in(0), nullptr, nullptr, nullptr, out(0), out(1), nullptr);
      } else if (use_cudnn_.at(&n)) {
        cudnn_->forward(bf(in(0)), bf(in(1)), bf(in(2)), bf(out(0)), f32(out(1)), shape, a.scale, workspace_, stream_);
      } else {
        ops::attention_forward_cuda(bf(in(0)), bf(in(1)), bf(in(2)), bf(out(0)), f32(out(1)), shape, a.scale, stream_);
      }
      break;
    }
    case OpKind::attention_backward: {
      const auto shape = attention_shape(g, n);
      if (a.packed) {
        run_packed_attention(n, shape, in(1), in(0), in(2), in(3), nullptr, nullptr, out(0));
      } else if (use_cudnn_.at(&n)) {
        cudnn_->backward(bf(in(0)), bf(in(1)), bf(in(2)), bf(in(3)), bf(in(4)), f32(in(5)), bf(out(0)), bf(out(1)),
                         bf(out(2)), shape, a.scale, workspace_, stream_);
      } else {
        ops::attention_backward_cuda(bf(in(0)), bf(in(1)), bf(in(2)), bf(in(3)), bf(in(4)), f32(in(5)), bf(out(0)),
                                     bf(out(1)), bf(out(2)), shape, a.scale, workspace_, stream_);
      }
      break;
    }
    case OpKind::swiglu:
      if (a.packed) {
        ops::swiglu_packed_forward_cuda(bf(in(0)), bf(out(0)), out0.shape.rows(), out0.shape.last(), stream_);
      } else {
        ops::swiglu_forward_cuda(bf(in(0)), bf(in(1)), bf(out(0)), out0.shape.numel(), stream_);
      }
      break;
    case OpKind::swiglu_backward:
      if (a.packed) {
        const Shape& dout = g.value(n.inputs[0]).shape;
        ops::swiglu_packed_backward_cuda(bf(in(0)), bf(in(1)), bf(out(0)), dout.rows(), dout.last(), stream_);
      } else {
        ops::swiglu_backward_cuda(bf(in(0)), bf(in(1)), bf(in(2)), bf(out(0)), bf(out(1)), out0.shape.numel(),
                                  stream_);
      }
      break;
    case OpKind::add:
      if (out0.dtype == DType::f32) {
        ops::add_cuda(f32(in(0)), f32(in(1)), f32(out(0)), out0.shape.numel(), stream_, accumulate);
      } else {
        ops::add_cuda(bf(in(0)), bf(in(1)), bf(out(0)), out0.shape.numel(), stream_, accumulate);
      }
      break;
    case OpKind::cross_entropy: {
      const Shape& logits = g.value(n.inputs[0]).shape;
      if (n.outputs.size() == 3) {  // with dlogits: graph/fuse_loss_gradient.h
        ops::cross_entropy_forward_backward_cuda(bf(in(0)), ids(in(1)), static_cast<float>(a.dloss), f32(out(1)),
                                                 f32(out(0)), bf(out(2)), logits.rows(), logits.last(), workspace_,
                                                 stream_);
        break;
      }
      ops::cross_entropy_forward_cuda(bf(in(0)), ids(in(1)), f32(out(1)), f32(out(0)), logits.rows(), logits.last(),
                                      workspace_, stream_);
      break;
    }
    case OpKind::cross_entropy_backward: {
      const Shape& logits = g.value(n.inputs[0]).shape;
      ops::cross_entropy_backward_cuda(bf(in(0)), ids(in(1)), f32(in(2)), f32(in(3)), bf(out(0)), logits.rows(),
                                       logits.last(), stream_);
      break;
    }
    case OpKind::cast:
      ops::cast_cuda(in(0), g.value(n.inputs[0]).dtype, out(0), out0.dtype, out0.shape.numel(), stream_);
      break;
  }
}

}  // namespace spillway::exec
