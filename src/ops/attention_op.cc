// attention's definition: the forward and backward of causal GQA attention,
// through cuDNN where it takes the shape and the own kernel elsewhere.
#include "ops/attention_op.h"

#include <algorithm>

#include "ops/op_definition.h"
#ifdef SPILLWAY_HAS_CUDA
#include "base/log.h"
#include "device/cuda/cuda_check.h"
#endif

namespace spillway::ops {

namespace {

// The document starts input of an attention or attention_backward node
// (ops/attention.h), or an invalid value where it has none: it comes after
// the tensors the plain op reads.
graph::Value doc_starts_of(const Node& n) {
  const size_t tensors = n.kind == OpKind::attention ? (n.attrs.packed ? 1 : 3) : (n.attrs.packed ? 4 : 6);
  return n.inputs.size() > tensors ? n.inputs[tensors] : graph::Value{};
}

// Its data in `x`, or null.
const int32_t* doc_starts_data(const Operands& x) {
  return doc_starts_of(x.node()).valid() ? x.in<int32_t>(x.node().inputs.size() - 1) : nullptr;
}

void attention_vjp(graph::Vjp& vjp, const Node& n, graph::Value dout) {
  const auto& in = n.inputs;
  const std::string name = graph::backward_name(n);
  const graph::Value docs = doc_starts_of(n);
  if (n.attrs.packed) {
    vjp.add(in[0],
            attention_packed_backward(vjp.b, dout, in[0], n.outputs[0], n.outputs[1], n.attrs, name, docs));
    return;
  }
  const auto d =
      attention_backward(vjp.b, dout, in[0], in[1], in[2], n.outputs[0], n.outputs[1], n.attrs, name, docs);
  for (size_t j = 0; j < 3; ++j) vjp.add(in[j], d[j]);
}

// Causal attention's model FLOPs (the masked keys not counted: half the
// square, plus every key before a query offset); the backward does 2.5
// times the forward's.
graph::OpCost attention_cost(const Graph& g, const Node& n) {
  const AttentionShape a = attention_shape(g, n);
  const double b = static_cast<double>(a.batch), s = static_cast<double>(a.seq);
  const double head_dim = static_cast<double>(a.head_dim);
  const double d = static_cast<double>(a.q_heads) * head_dim;
  const double keys_seen = s * static_cast<double>(a.q_start) + s * s / 2.0;
  const double forward = 2.0 * 2.0 * b * keys_seen * d;
  return {n.kind == OpKind::attention ? forward : 2.5 * forward, graph::operand_bytes(g, n),
          head_dim <= 64 ? graph::RateClass::attention_head_dim_64 : graph::RateClass::attention};
}

// The CPU kernels read q, k and v as separate tensors.
AttentionShape dense(AttentionShape s) {
  s.packed_qkv = false;
  return s;
}

// A packed q|k|v [rows, (heads + 2 kv_heads) * head_dim] and the three
// separate tensors the CPU attention takes: copied apart for the forward
// pass, and the three gradients copied back together.
template <typename T>
struct UnpackedQkv {
  int64_t rows, q_cols, kv_cols;
  std::vector<T> q, k, v;
  explicit UnpackedQkv(const AttentionShape& s)
      : rows(s.batch * s.seq),
        q_cols(s.q_width()),
        kv_cols(s.kv_width()),
        q(static_cast<size_t>(rows * q_cols)),
        k(static_cast<size_t>(rows * kv_cols)),
        v(static_cast<size_t>(rows * kv_cols)) {}
  int64_t width() const { return q_cols + 2 * kv_cols; }
  void split(const T* packed) {
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = packed + r * width();
      std::copy_n(row, q_cols, q.data() + r * q_cols);
      std::copy_n(row + q_cols, kv_cols, k.data() + r * kv_cols);
      std::copy_n(row + q_cols + kv_cols, kv_cols, v.data() + r * kv_cols);
    }
  }
  void join(T* packed) const {
    for (int64_t r = 0; r < rows; ++r) {
      T* row = packed + r * width();
      std::copy_n(q.data() + r * q_cols, q_cols, row);
      std::copy_n(k.data() + r * kv_cols, kv_cols, row + q_cols);
      std::copy_n(v.data() + r * kv_cols, kv_cols, row + q_cols + kv_cols);
    }
  }
};

template <typename T>
void cpu_attention(const Operands& x) {
  const AttentionShape shape = dense(attention_shape(x.graph(), x.node()));
  const double scale = x.attrs().scale;
  const int32_t* docs = doc_starts_data(x);
  if (!x.attrs().packed) {
    attention_forward(x.in<T>(0), x.in<T>(1), x.in<T>(2), x.out<T>(0), x.out<T>(1), shape, scale, docs);
    return;
  }
  UnpackedQkv<T> qkv(shape);
  qkv.split(x.in<T>(0));
  attention_forward(qkv.q.data(), qkv.k.data(), qkv.v.data(), x.out<T>(0), x.out<T>(1), shape, scale, docs);
}

template <typename T>
void cpu_attention_backward(const Operands& x) {
  const AttentionShape shape = dense(attention_shape(x.graph(), x.node()));
  const double scale = x.attrs().scale;
  const int32_t* docs = doc_starts_data(x);
  if (!x.attrs().packed) {
    attention_backward(x.in<T>(0), x.in<T>(1), x.in<T>(2), x.in<T>(3), x.in<T>(4), x.in<T>(5), x.out<T>(0),
                       x.out<T>(1), x.out<T>(2), shape, scale, docs);
    return;
  }
  UnpackedQkv<T> qkv(shape), grads(shape);
  qkv.split(x.in<T>(1));
  attention_backward(x.in<T>(0), qkv.q.data(), qkv.k.data(), qkv.v.data(), x.in<T>(2), x.in<T>(3), grads.q.data(),
                     grads.k.data(), grads.v.data(), shape, scale, docs);
  grads.join(x.out<T>(0));
}

#ifdef SPILLWAY_HAS_CUDA
AttentionPass pass_of(const Node& n) {
  return n.kind == OpKind::attention ? AttentionPass::kForward : AttentionPass::kBackward;
}

// The column blocks of a packed q|k|v (see AttentionShape::packed_qkv).
struct QkvBlocks {
  int64_t rows, q_cols, kv_cols;
  explicit QkvBlocks(const AttentionShape& s) : rows(s.batch * s.seq), q_cols(s.q_width()), kv_cols(s.kv_width()) {}
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

// cuDNN where it supports the shape and pass (else the own kernel, with the
// reason logged), and the workspace either needs.
uint64_t prepare_attention(const Graph& g, const Node& n, CudaOpContext& cuda) {
  const AttentionShape shape = attention_shape(g, n);
  CudnnAttention& cudnn = cuda.cudnn();
  // The own kernels start every query's keys at 0 of its own sequence.
  if (shape.offset()) {
    try {
      const uint64_t workspace = cudnn.workspace_bytes(shape, n.attrs.scale, pass_of(n));
      cuda.preferred[&n] = true;
      return workspace;
    } catch (const Error& e) {
      throw Error(node_label(n), std::string("attention from a query offset (context parallelism) runs on cuDNN ") +
                                     "alone, which refused it: " + e.what());
    }
  }
  bool cudnn_ok = false;
  // The cuDNN graphs here are built without a document mask: packed rows
  // take the own kernel, which masks by document.
  if (!doc_starts_of(n).valid()) {
    try {
      cudnn_ok = cudnn.supports(shape, n.attrs.scale, pass_of(n));
      if (!cudnn_ok) cudnn.workspace_bytes(shape, n.attrs.scale, pass_of(n));  // throws the reason
    } catch (const Error& e) {
      cudnn_ok = false;
      log_warn(graph::node_label(n) + " runs on the own kernel: " + e.what());
    }
  }
  cuda.preferred[&n] = cudnn_ok;
  if (cudnn_ok) return cudnn.workspace_bytes(shape, n.attrs.scale, pass_of(n));
  // The own kernels: dense copies of a packed q|k|v (and of its gradient),
  // then the backward's row terms.
  const uint64_t copies = shape.packed_qkv ? QkvBlocks(shape).dense_bytes() : 0;
  if (n.kind == OpKind::attention_backward) return 2 * copies + attention_backward_cuda_workspace_bytes(dense(shape));
  return copies;
}

// Attention over a packed q|k|v: cuDNN reads the column blocks in place;
// the own kernels get dense copies made in the workspace. Forward passes
// out and lse; backward passes dout, out_in, lse_in and dqkv.
void run_packed_attention(const Node& n, const AttentionShape& shape, CudaOpContext& cuda, void* qkv, void* dout,
                          void* out_in, void* lse_in, void* out, void* lse, void* dqkv, const int32_t* docs) {
  const QkvBlocks b(shape);
  const double scale = n.attrs.scale;
  const bool forward = n.kind == OpKind::attention;
  if (cuda.preferred.at(&n)) {
    if (forward) {
      cuda.cudnn().forward(b.q(qkv), b.k(qkv), b.v(qkv), static_cast<bf16*>(out), static_cast<float*>(lse), shape,
                           scale, cuda.workspace, cuda.stream);
    } else {
      cuda.cudnn().backward(static_cast<bf16*>(dout), b.q(qkv), b.k(qkv), b.v(qkv), static_cast<bf16*>(out_in),
                            static_cast<float*>(lse_in), b.q(dqkv), b.k(dqkv), b.v(dqkv), shape, scale, cuda.workspace,
                            cuda.stream);
    }
    return;
  }
  const AttentionShape dense_shape = dense(shape);
  bf16* packed_apart = static_cast<bf16*>(cuda.workspace);
  const int64_t kv_elems = b.rows * b.kv_cols, q_elems = b.rows * b.q_cols;
  copy_blocks(b, static_cast<const bf16*>(qkv), true, packed_apart, cuda.stream);
  if (forward) {
    attention_forward_cuda(packed_apart, packed_apart + q_elems, packed_apart + q_elems + kv_elems,
                           static_cast<bf16*>(out), static_cast<float*>(lse), dense_shape, scale, cuda.stream, docs);
    return;
  }
  bf16* grads = packed_apart + b.rows * b.width();
  attention_backward_cuda(static_cast<bf16*>(dout), packed_apart, packed_apart + q_elems,
                          packed_apart + q_elems + kv_elems, static_cast<bf16*>(out_in), static_cast<float*>(lse_in),
                          grads, grads + q_elems, grads + q_elems + kv_elems, dense_shape, scale,
                          grads + b.rows * b.width(), cuda.stream, docs);
  copy_blocks(b, grads, false, static_cast<bf16*>(dqkv), cuda.stream);
}

void cuda_attention(const Graph& g, const Node& n, const std::vector<void*>& data, CudaOpContext& cuda) {
  const Operands x(g, n, data);
  const AttentionShape shape = attention_shape(g, n);
  const double scale = n.attrs.scale;
  const int32_t* docs = doc_starts_data(x);
  if (n.attrs.packed) {
    run_packed_attention(n, shape, cuda, x.in(0), nullptr, nullptr, nullptr, x.out(0), x.out(1), nullptr, docs);
  } else if (cuda.preferred.at(&n)) {
    cuda.cudnn().forward(x.in<bf16>(0), x.in<bf16>(1), x.in<bf16>(2), x.out<bf16>(0), x.out<float>(1), shape, scale,
                         cuda.workspace, cuda.stream);
  } else {
    attention_forward_cuda(x.in<bf16>(0), x.in<bf16>(1), x.in<bf16>(2), x.out<bf16>(0), x.out<float>(1), shape, scale,
                           cuda.stream, docs);
  }
}

void cuda_attention_backward(const Graph& g, const Node& n, const std::vector<void*>& data, CudaOpContext& cuda) {
  const Operands x(g, n, data);
  const AttentionShape shape = attention_shape(g, n);
  const double scale = n.attrs.scale;
  const int32_t* docs = doc_starts_data(x);
  if (n.attrs.packed) {
    run_packed_attention(n, shape, cuda, x.in(1), x.in(0), x.in(2), x.in(3), nullptr, nullptr, x.out(0), docs);
  } else if (cuda.preferred.at(&n)) {
    cuda.cudnn().backward(x.in<bf16>(0), x.in<bf16>(1), x.in<bf16>(2), x.in<bf16>(3), x.in<bf16>(4), x.in<float>(5),
                          x.out<bf16>(0), x.out<bf16>(1), x.out<bf16>(2), shape, scale, cuda.workspace, cuda.stream);
  } else {
    attention_backward_cuda(x.in<bf16>(0), x.in<bf16>(1), x.in<bf16>(2), x.in<bf16>(3), x.in<bf16>(4),
                            x.in<float>(5), x.out<bf16>(0), x.out<bf16>(1), x.out<bf16>(2), shape, scale,
                            cuda.workspace, cuda.stream, docs);
  }
}
#endif

// Heads split by columns: each rank attends with its own query heads and
// the key/value heads they share (whole groups: kv_heads split alike).
void attention_shard(Sharder& s, const Node& n) {
  const size_t tensors = n.attrs.packed ? 1 : 3;
  for (size_t i = 0; i < tensors; ++i) {
    if (s.placement(n.inputs[i]) != Placement::columns) return s.whole(n);
  }
  const int64_t heads = s.divided(n.attrs.heads, "the query heads of " + node_label(n));
  const int64_t kv_heads = s.divided(n.attrs.kv_heads, "the key/value heads of " + node_label(n));
  const graph::Value docs = doc_starts_of(n);
  const graph::Value local_docs = docs.valid() ? s.as(docs, Placement::whole) : docs;
  auto piece = [&](size_t i) { return s.as(n.inputs[i], Placement::columns); };
  if (n.attrs.packed) {
    attention_packed(s.b, piece(0), heads, kv_heads, n.attrs.scale, n.name, local_docs);
  } else {
    attention(s.b, piece(0), piece(1), piece(2), heads, kv_heads, n.attrs.scale, n.name, local_docs, n.attrs.pos0);
  }
  s.define(n, Placement::columns);
}

}  // namespace

namespace {

// The inputs of an attention node: `tensors`, then the document starts if
// given, checked to be [batch, seq] i32.
std::vector<graph::Value> with_doc_starts(graph::Builder& b, std::vector<graph::Value> tensors, graph::Value docs,
                                          const Shape& q_shape, const std::string& label) {
  if (!docs.valid()) return tensors;
  const graph::ValueInfo& di = b.info(docs);
  const Shape want{q_shape[0], q_shape[1]};
  SPW_CHECK(di.dtype == DType::i32 && di.shape == want, label, "document starts must be i32 ", want.str(), ", got ",
            dtype_name(di.dtype), " ", di.shape.str());
  tensors.push_back(docs);
  return tensors;
}

}  // namespace

graph::Value attention(graph::Builder& b, graph::Value q, graph::Value k, graph::Value v, int64_t q_heads,
                       int64_t kv_heads, double scale, std::string_view name, graph::Value doc_starts,
                       int64_t q_start) {
  const graph::ValueInfo& qi = b.info(q);
  const graph::ValueInfo& ki = b.info(k);
  const graph::ValueInfo& vi = b.info(v);
  const std::string label = b.label(OpKind::attention, name);
  SPW_CHECK(qi.shape.rank() == 3, label, "q must be [batch, seq, heads * head_dim], got ", qi.shape.str());
  SPW_CHECK(q_heads > 0 && kv_heads > 0 && q_heads % kv_heads == 0, label, q_heads,
            " query heads are not a multiple of ", kv_heads, " kv heads");
  SPW_CHECK(qi.shape.last() % q_heads == 0, label, "q ", qi.shape.str(), " does not split into ", q_heads, " heads");
  const int64_t head_dim = qi.shape.last() / q_heads;
  // Keys for every query position up to the last: q_start + seq of them at
  // least (context parallelism's chunk of queries against every key).
  const int64_t keys = ki.shape.rank() == 3 ? ki.shape[1] : -1;
  SPW_CHECK(q_start >= 0 && keys >= q_start + qi.shape[1], label, "queries from position ", q_start, " need ",
            q_start + qi.shape[1], " keys at least; k is ", ki.shape.str());
  SPW_CHECK((q_start == 0 && keys == qi.shape[1]) || !doc_starts.valid(), label,
            "documents and a query offset together are not supported");
  const Shape kv_shape{qi.shape[0], keys, kv_heads * head_dim};
  SPW_CHECK(ki.shape == kv_shape, label, "k ", ki.shape.str(), " does not match q ", qi.shape.str(), " with ",
            kv_heads, " kv heads (expected ", kv_shape.str(), ")");
  SPW_CHECK(vi.shape == kv_shape, label, "v ", vi.shape.str(), " does not match k ", ki.shape.str());
  graph::NodeAttrs attrs;
  attrs.heads = q_heads;
  attrs.kv_heads = kv_heads;
  attrs.scale = scale;
  attrs.pos0 = q_start;
  const Shape lse{qi.shape[0], q_heads, qi.shape[1]};
  return b.emit(OpKind::attention, name, with_doc_starts(b, {q, k, v}, doc_starts, qi.shape, label),
                {{qi.shape, qi.dtype, ""}, {lse, graph::accumulation_dtype(qi.dtype), "lse"}}, attrs)[0];
}

graph::Value attention_packed(graph::Builder& b, graph::Value qkv, int64_t q_heads, int64_t kv_heads, double scale,
                              std::string_view name, graph::Value doc_starts) {
  const graph::ValueInfo& xi = b.info(qkv);
  const std::string label = b.label(OpKind::attention, name);
  SPW_CHECK(xi.shape.rank() == 3, label, "qkv must be [batch, seq, (q_heads + 2 kv_heads) * head_dim], got ",
            xi.shape.str());
  SPW_CHECK(q_heads > 0 && kv_heads > 0 && q_heads % kv_heads == 0, label, q_heads,
            " query heads are not a multiple of ", kv_heads, " kv heads");
  const int64_t heads_in_row = q_heads + 2 * kv_heads;
  SPW_CHECK(xi.shape.last() % heads_in_row == 0, label, "qkv ", xi.shape.str(), " does not split into ", q_heads,
            " + 2 x ", kv_heads, " heads");
  const int64_t head_dim = xi.shape.last() / heads_in_row;
  graph::NodeAttrs attrs;
  attrs.heads = q_heads;
  attrs.kv_heads = kv_heads;
  attrs.scale = scale;
  attrs.packed = true;
  const Shape out{xi.shape[0], xi.shape[1], q_heads * head_dim};
  const Shape lse{xi.shape[0], q_heads, xi.shape[1]};
  return b.emit(OpKind::attention, name, with_doc_starts(b, {qkv}, doc_starts, xi.shape, label),
                {{out, xi.dtype, ""}, {lse, graph::accumulation_dtype(xi.dtype), "lse"}}, attrs)[0];
}

std::vector<graph::Value> attention_backward(graph::Builder& b, graph::Value dout, graph::Value q, graph::Value k,
                                             graph::Value v, graph::Value out, graph::Value lse,
                                             const graph::NodeAttrs& forward_attrs, std::string_view name,
                                             graph::Value doc_starts) {
  std::vector<graph::Value> inputs{dout, q, k, v, out, lse};
  if (doc_starts.valid()) inputs.push_back(doc_starts);
  return b.emit(OpKind::attention_backward, name, inputs,
                {{b.info(q).shape, b.info(q).dtype, "dq"},
                 {b.info(k).shape, b.info(k).dtype, "dk"},
                 {b.info(v).shape, b.info(v).dtype, "dv"}},
                forward_attrs);
}

graph::Value attention_packed_backward(graph::Builder& b, graph::Value dout, graph::Value qkv, graph::Value out,
                                       graph::Value lse, const graph::NodeAttrs& forward_attrs,
                                       std::string_view name, graph::Value doc_starts) {
  std::vector<graph::Value> inputs{dout, qkv, out, lse};
  if (doc_starts.valid()) inputs.push_back(doc_starts);
  return b.emit(OpKind::attention_backward, name, inputs,
                {{b.info(qkv).shape, b.info(qkv).dtype, "dqkv"}}, forward_attrs)[0];
}

AttentionShape attention_shape(const Graph& g, const Node& n) {
  const bool forward = n.kind == OpKind::attention;
  const Shape& q = g.value(n.inputs[forward ? 0 : 1]).shape;
  const int64_t heads_in_row = n.attrs.heads + (n.attrs.packed ? 2 * n.attrs.kv_heads : 0);
  AttentionShape s{q[0], q[1], n.attrs.heads, n.attrs.kv_heads, q.last() / heads_in_row, n.attrs.packed};
  if (!n.attrs.packed) s.kv_seq = g.value(n.inputs[forward ? 1 : 2]).shape[1];
  s.q_start = n.attrs.pos0;
  return s;
}

#ifdef SPILLWAY_HAS_CUDA
namespace {

bool is_attention(const Node& n) { return n.kind == OpKind::attention || n.kind == OpKind::attention_backward; }

}  // namespace

int cudnn_attention_nodes(const CudaOpContext& cuda) {
  return static_cast<int>(std::count_if(cuda.preferred.begin(), cuda.preferred.end(),
                                        [](const auto& p) { return is_attention(*p.first) && p.second; }));
}

std::string attention_summary(const CudaOpContext& cuda) {
  const auto nodes = std::count_if(cuda.preferred.begin(), cuda.preferred.end(),
                                   [](const auto& p) { return is_attention(*p.first); });
  return "attention through cuDNN in " + std::to_string(cudnn_attention_nodes(cuda)) + " of " +
         std::to_string(nodes) + " nodes";
}
#endif

constinit const graph::OpDef attention_def{
    .backward = attention_vjp,
    .cost = attention_cost,
    .shard = attention_shard,
    .cpu = on_cpu<cpu_attention<float>, cpu_attention<double>>,
#ifdef SPILLWAY_HAS_CUDA
    .cuda_prepare = prepare_attention,
    .cuda = cuda_attention,
#endif
};

constinit const graph::OpDef attention_backward_def{
    .cost = attention_cost,
    .cpu = on_cpu<cpu_attention_backward<float>, cpu_attention_backward<double>>,
#ifdef SPILLWAY_HAS_CUDA
    .cuda_prepare = prepare_attention,
    .cuda = cuda_attention_backward,
#endif
};

}  // namespace spillway::ops
