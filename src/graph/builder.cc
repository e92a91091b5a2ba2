#include "graph/builder.h"

#include <cmath>

#include "base/status.h"

namespace spillway::graph {

namespace {
// "matmul 'layers.0.attn.q_proj'": what build-time errors name.
std::string op_label(OpKind kind, const std::string& path) {
  return std::string(op_name(kind)) + " '" + path + "'";
}
}  // namespace

Builder::Scope::Scope(Builder& b, std::string_view name) : b_(b), saved_(b.scope_.size()) {
  if (!b_.scope_.empty()) b_.scope_ += ".";
  b_.scope_ += name;
}
Builder::Scope::~Scope() { b_.scope_.resize(saved_); }

std::string Builder::path(std::string_view name) const {
  return scope_.empty() ? std::string(name) : scope_ + "." + std::string(name);
}

Value Builder::new_value(std::string name, Shape shape, DType dtype) {
  return g_.add_value(ValueInfo{std::move(name), std::move(shape), dtype, ValueRole::computed, -1});
}

std::vector<Value> Builder::emit(OpKind kind, std::string_view name, std::vector<Value> inputs,
                                 std::vector<std::pair<Shape, DType>> outputs,
                                 std::vector<std::string_view> output_suffixes, NodeAttrs attrs) {
  Node node{kind, path(name), std::move(inputs), {}, std::move(attrs), backward_};
  g_.check_reads(node.name, node.inputs);  // before any output value exists
  for (size_t i = 0; i < outputs.size(); ++i) {
    std::string value_name = node.name;
    if (!output_suffixes[i].empty()) value_name += "." + std::string(output_suffixes[i]);
    node.outputs.push_back(new_value(std::move(value_name), outputs[i].first, outputs[i].second));
  }
  std::vector<Value> outs = node.outputs;
  g_.add_node(std::move(node));
  return outs;
}

Value Builder::input(std::string_view name, Shape shape, DType dtype) {
  return g_.add_value(ValueInfo{path(name), std::move(shape), dtype, ValueRole::input, -1});
}

Value Builder::parameter(std::string_view name, Shape shape) {
  return g_.add_value(ValueInfo{path(name), std::move(shape), dtype_, ValueRole::parameter, -1});
}

Value Builder::fill(std::string_view name, Shape shape, double value, DType dtype) {
  NodeAttrs attrs;
  attrs.fill_value = value;
  return emit(OpKind::fill, name, {}, {{std::move(shape), dtype}}, {""}, attrs)[0];
}

Value Builder::embedding(Value table, Value ids, std::string_view name) {
  const ValueInfo& t = info(table);
  const ValueInfo& i = info(ids);
  std::string label = op_label(OpKind::embedding, path(name));
  SPW_CHECK(t.shape.rank() == 2, label, "table must be [vocab, dim], got ", t.shape.str());
  SPW_CHECK(i.dtype == DType::i32, label, "ids must be i32, got ", dtype_name(i.dtype));
  std::vector<int64_t> dims = i.shape.dims();
  dims.push_back(t.shape[1]);
  return emit(OpKind::embedding, name, {table, ids}, {{Shape(dims), t.dtype}}, {""})[0];
}

Value Builder::rmsnorm(Value x, Value weight, double eps, std::string_view name) {
  const ValueInfo& xi = info(x);
  const ValueInfo& wi = info(weight);
  SPW_CHECK(wi.shape == Shape{xi.shape.last()}, op_label(OpKind::rmsnorm, path(name)),
            "weight ", wi.shape.str(), " does not match the last dimension of x ", xi.shape.str());
  NodeAttrs attrs;
  attrs.eps = eps;
  return emit(OpKind::rmsnorm, name, {x, weight},
              {{xi.shape, xi.dtype}, {Shape{xi.shape.rows()}, accumulation_dtype(xi.dtype)}}, {"", "rstd"},
              attrs)[0];
}

Value Builder::linear(Value x, Value weight, std::string_view name) {
  return matmul(x, weight, false, true, name);
}

Value Builder::matmul(Value a, Value b, bool trans_a, bool trans_b, std::string_view name,
                      const Shape* out_shape, std::optional<DType> out_dtype) {
  const ValueInfo& ai = info(a);
  const ValueInfo& bi = info(b);
  std::string label = op_label(OpKind::matmul, path(name));
  SPW_CHECK(ai.dtype == bi.dtype, label, "dtypes differ: a ", dtype_name(ai.dtype), ", b ",
            dtype_name(bi.dtype));
  int64_t m = trans_a ? ai.shape.last() : ai.shape.rows();
  int64_t k_a = trans_a ? ai.shape.rows() : ai.shape.last();
  int64_t k_b = trans_b ? bi.shape.last() : bi.shape.rows();
  int64_t n = trans_b ? bi.shape.rows() : bi.shape.last();
  SPW_CHECK(k_a == k_b, label, "inner dimensions differ: a ", ai.shape.str(),
            trans_a ? " (transposed)" : "", " gives ", k_a, ", b ", bi.shape.str(),
            trans_b ? " (transposed)" : "", " gives ", k_b);
  Shape out = trans_a ? Shape{m, n} : ai.shape.with_last(n);
  if (out_shape) {
    SPW_CHECK(out_shape->numel() == m * n, label, "requested output ", out_shape->str(),
              " does not hold [", m, ", ", n, "]");
    out = *out_shape;
  }
  NodeAttrs attrs;
  attrs.trans_a = trans_a;
  attrs.trans_b = trans_b;
  return emit(OpKind::matmul, name, {a, b}, {{out, out_dtype.value_or(ai.dtype)}}, {""}, attrs)[0];
}

Value Builder::rope(Value x, int64_t heads, std::shared_ptr<const std::vector<float>> inv_freq,
                    int64_t pos0, std::string_view name, int64_t rotated_heads) {
  const ValueInfo& xi = info(x);
  std::string label = op_label(OpKind::rope, path(name));
  SPW_CHECK(xi.shape.rank() == 3, label, "x must be [batch, seq, heads * head_dim], got ", xi.shape.str());
  SPW_CHECK(heads > 0 && xi.shape.last() % heads == 0, label, "last dimension of ", xi.shape.str(),
            " is not a multiple of ", heads, " heads");
  SPW_CHECK(inv_freq && static_cast<int64_t>(inv_freq->size()) * 2 == xi.shape.last() / heads, label,
            "head_dim ", xi.shape.last() / heads, " needs ", xi.shape.last() / heads / 2,
            " rotary frequencies, got ", inv_freq ? inv_freq->size() : 0);
  SPW_CHECK(rotated_heads >= 0 && rotated_heads <= heads, label, "cannot rotate ", rotated_heads, " of ", heads,
            " heads");
  NodeAttrs attrs;
  attrs.heads = heads;
  attrs.rotated_heads = rotated_heads;
  attrs.inv_freq = std::move(inv_freq);
  attrs.pos0 = pos0;
  return emit(OpKind::rope, name, {x}, {{xi.shape, xi.dtype}}, {""}, attrs)[0];
}

Value Builder::attention(Value q, Value k, Value v, int64_t q_heads, int64_t kv_heads,
                         double scale, std::string_view name) {
  const ValueInfo& qi = info(q);
  const ValueInfo& ki = info(k);
  const ValueInfo& vi = info(v);
  std::string label = op_label(OpKind::attention, path(name));
  SPW_CHECK(qi.shape.rank() == 3, label, "q must be [batch, seq, heads * head_dim], got ", qi.shape.str());
  SPW_CHECK(q_heads > 0 && kv_heads > 0 && q_heads % kv_heads == 0, label, q_heads,
            " query heads are not a multiple of ", kv_heads, " kv heads");
  SPW_CHECK(qi.shape.last() % q_heads == 0, label, "q ", qi.shape.str(), " does not split into ",
            q_heads, " heads");
  int64_t head_dim = qi.shape.last() / q_heads;
  Shape kv_shape{qi.shape[0], qi.shape[1], kv_heads * head_dim};
  SPW_CHECK(ki.shape == kv_shape, label, "k ", ki.shape.str(), " does not match q ", qi.shape.str(),
            " with ", kv_heads, " kv heads (expected ", kv_shape.str(), ")");
  SPW_CHECK(vi.shape == kv_shape, label, "v ", vi.shape.str(), " does not match k ", ki.shape.str());
  NodeAttrs attrs;
  attrs.heads = q_heads;
  attrs.kv_heads = kv_heads;
  attrs.scale = scale;
  Shape lse{qi.shape[0], q_heads, qi.shape[1]};
  return emit(OpKind::attention, name, {q, k, v}, {{qi.shape, qi.dtype}, {lse, accumulation_dtype(qi.dtype)}},
              {"", "lse"}, attrs)[0];
}

Value Builder::attention_packed(Value qkv, int64_t q_heads, int64_t kv_heads, double scale,
                                std::string_view name) {
  const ValueInfo& xi = info(qkv);
  std::string label = op_label(OpKind::attention, path(name));
  SPW_CHECK(xi.shape.rank() == 3, label, "qkv must be [batch, seq, (q_heads + 2 kv_heads) * head_dim], got ",
            xi.shape.str());
  SPW_CHECK(q_heads > 0 && kv_heads > 0 && q_heads % kv_heads == 0, label, q_heads,
            " query heads are not a multiple of ", kv_heads, " kv heads");
  const int64_t heads_in_row = q_heads + 2 * kv_heads;
  SPW_CHECK(xi.shape.last() % heads_in_row == 0, label, "qkv ", xi.shape.str(), " does not split into ", q_heads,
            " + 2 x ", kv_heads, " heads");
  const int64_t head_dim = xi.shape.last() / heads_in_row;
  NodeAttrs attrs;
  attrs.heads = q_heads;
  attrs.kv_heads = kv_heads;
  attrs.scale = scale;
  attrs.packed = true;
  const Shape out{xi.shape[0], xi.shape[1], q_heads * head_dim};
  const Shape lse{xi.shape[0], q_heads, xi.shape[1]};
  return emit(OpKind::attention, name, {qkv}, {{out, xi.dtype}, {lse, accumulation_dtype(xi.dtype)}}, {"", "lse"},
              attrs)[0];
}

Value Builder::swiglu(Value gate, Value up, std::string_view name) {
  const ValueInfo& gi = info(gate);
  SPW_CHECK(gi.shape == info(up).shape, op_label(OpKind::swiglu, path(name)), "gate ",
            gi.shape.str(), " and up ", info(up).shape.str(), " differ");
  return emit(OpKind::swiglu, name, {gate, up}, {{gi.shape, gi.dtype}}, {""})[0];
}

Value Builder::swiglu_packed(Value gate_up, std::string_view name) {
  const ValueInfo& gi = info(gate_up);
  SPW_CHECK(gi.shape.rank() >= 1 && gi.shape.last() % 2 == 0, op_label(OpKind::swiglu, path(name)), "gate_up ",
            gi.shape.str(), " does not split into gate and up halves");
  NodeAttrs attrs;
  attrs.packed = true;
  return emit(OpKind::swiglu, name, {gate_up}, {{gi.shape.with_last(gi.shape.last() / 2), gi.dtype}}, {""}, attrs)[0];
}

Value Builder::add(Value a, Value b, std::string_view name) {
  const ValueInfo& ai = info(a);
  const ValueInfo& bi = info(b);
  std::string label = op_label(OpKind::add, path(name));
  SPW_CHECK(ai.shape == bi.shape, label, "shapes differ: a ", ai.shape.str(), ", b ", bi.shape.str());
  SPW_CHECK(ai.dtype == bi.dtype, label, "dtypes differ: a ", dtype_name(ai.dtype), ", b ",
            dtype_name(bi.dtype));
  return emit(OpKind::add, name, {a, b}, {{ai.shape, ai.dtype}}, {""})[0];
}

Value Builder::cross_entropy(Value logits, Value targets, std::string_view name) {
  const ValueInfo& li = info(logits);
  const ValueInfo& ti = info(targets);
  std::string label = op_label(OpKind::cross_entropy, path(name));
  SPW_CHECK(ti.dtype == DType::i32, label, "targets must be i32, got ", dtype_name(ti.dtype));
  SPW_CHECK(ti.shape.numel() == li.shape.rows(), label, "targets ", ti.shape.str(),
            " do not match the rows of logits ", li.shape.str());
  return emit(OpKind::cross_entropy, name, {logits, targets},
              {{Shape{}, accumulation_dtype(li.dtype)}, {Shape{li.shape.rows()}, accumulation_dtype(li.dtype)}},
              {"", "lse"})[0];
}

Value Builder::cast(Value x, DType to, std::string_view name) {
  const ValueInfo& xi = info(x);
  SPW_CHECK(dtype_is_float(xi.dtype) && dtype_is_float(to), op_label(OpKind::cast, path(name)),
            "cannot cast ", dtype_name(xi.dtype), " to ", dtype_name(to));
  return emit(OpKind::cast, name, {x}, {{xi.shape, to}}, {""})[0];
}

Value Builder::embedding_backward(Value ids, Value dout, int64_t vocab, std::string_view name) {
  const ValueInfo& di = info(dout);
  return emit(OpKind::embedding_backward, name, {ids, dout},
              {{Shape{vocab, di.shape.last()}, accumulation_dtype(di.dtype)}}, {""})[0];
}

std::vector<Value> Builder::rmsnorm_backward(Value dy, Value x, Value weight, Value rstd,
                                             std::string_view name) {
  return emit(OpKind::rmsnorm_backward, name, {dy, x, weight, rstd},
              {{info(x).shape, info(x).dtype}, {info(weight).shape, accumulation_dtype(info(weight).dtype)}},
              {"dx", "dweight"});
}

Value Builder::rope_backward(Value dout, const NodeAttrs& forward_attrs, std::string_view name) {
  return emit(OpKind::rope_backward, name, {dout}, {{info(dout).shape, info(dout).dtype}}, {""},
              forward_attrs)[0];
}

std::vector<Value> Builder::attention_backward(Value dout, Value q, Value k, Value v, Value out,
                                               Value lse, const NodeAttrs& forward_attrs,
                                               std::string_view name) {
  return emit(OpKind::attention_backward, name, {dout, q, k, v, out, lse},
              {{info(q).shape, info(q).dtype}, {info(k).shape, info(k).dtype},
               {info(v).shape, info(v).dtype}},
              {"dq", "dk", "dv"}, forward_attrs);
}

Value Builder::attention_packed_backward(Value dout, Value qkv, Value out, Value lse,
                                         const NodeAttrs& forward_attrs, std::string_view name) {
  return emit(OpKind::attention_backward, name, {dout, qkv, out, lse}, {{info(qkv).shape, info(qkv).dtype}},
              {"dqkv"}, forward_attrs)[0];
}

Value Builder::swiglu_packed_backward(Value dout, Value gate_up, std::string_view name) {
  NodeAttrs attrs;
  attrs.packed = true;
  return emit(OpKind::swiglu_backward, name, {dout, gate_up}, {{info(gate_up).shape, info(gate_up).dtype}},
              {"dgate_up"}, attrs)[0];
}

std::vector<Value> Builder::swiglu_backward(Value dout, Value gate, Value up, std::string_view name) {
  return emit(OpKind::swiglu_backward, name, {dout, gate, up},
              {{info(gate).shape, info(gate).dtype}, {info(up).shape, info(up).dtype}},
              {"dgate", "dup"});
}

Value Builder::cross_entropy_backward(Value logits, Value targets, Value lse, Value dloss,
                                      std::string_view name) {
  return emit(OpKind::cross_entropy_backward, name, {logits, targets, lse, dloss},
              {{info(logits).shape, info(logits).dtype}}, {""})[0];
}

}  // namespace spillway::graph
