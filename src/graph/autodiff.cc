#include "graph/autodiff.h"

#include <optional>
#include <string>

#include "base/status.h"

namespace spillway::graph {

Value Gradients::operator[](Value v) const {
  auto it = of.find(v.id);
  SPW_CHECK(it != of.end(), "autodiff", "no gradient for value ", v.id);
  return it->second;
}

namespace {

class Backward {
 public:
  Backward(Builder& b, const std::vector<Value>& wrt)
      : b_(b), g_(b.graph()), grad_(g_.values().size()), needs_(g_.values().size(), false) {
    for (Value v : wrt) needs_[static_cast<size_t>(v.id)] = true;
    // A value needs a gradient when some value asked for flows into it.
    for (const Node& node : g_.nodes()) {
      bool any = false;
      for (Value in : node.inputs) any = any || needs_[static_cast<size_t>(in.id)];
      for (Value out : node.outputs) needs_[static_cast<size_t>(out.id)] = any;
    }
  }

  void run(Value loss) {
    SPW_CHECK(g_.value(loss).shape.numel() == 1, "autodiff",
              "loss '", g_.value(loss).name, "' must hold one element, has shape ",
              g_.value(loss).shape.str());
    b_.set_backward(true);
    const auto forward_nodes = static_cast<int32_t>(g_.nodes().size());
    grad_.resize(g_.values().size());
    grad_[static_cast<size_t>(loss.id)] =
        b_.fill(g_.value(loss).name + ".grad", g_.value(loss).shape, 1.0, g_.value(loss).dtype);
    for (int32_t i = forward_nodes - 1; i >= 0; --i) {
      // Copy: emitting backward nodes grows the node list under us.
      const Node node = g_.nodes()[static_cast<size_t>(i)];
      if (node.backward) continue;
      Value dout = grad_of(node.outputs[0]);
      if (!dout.valid()) continue;
      apply_rule(node, dout);
    }
    b_.set_backward(false);
  }

  Value grad_of(Value v) const {
    size_t i = static_cast<size_t>(v.id);
    return i < grad_.size() ? grad_[i] : Value{};
  }

 private:
  // Adds `g` into the gradient of `v`, summing when v is used more than once.
  void accumulate(Value v, Value g) {
    size_t i = static_cast<size_t>(v.id);
    if (!needs_[i]) return;
    if (grad_.size() < g_.values().size()) grad_.resize(g_.values().size());
    if (!grad_[i].valid()) {
      grad_[i] = g;
    } else {
      grad_[i] = b_.add(grad_[i], g, g_.value(v).name + ".grad_sum");
    }
  }
  bool needs(Value v) const { return needs_[static_cast<size_t>(v.id)]; }

  void apply_rule(const Node& n, Value dout) {
    const std::string name = n.name + ".backward";
    const auto& in = n.inputs;
    switch (n.kind) {
      case OpKind::embedding:
        accumulate(in[0], b_.embedding_backward(in[1], dout, g_.value(in[0]).shape[0], name));
        break;
      case OpKind::rmsnorm: {
        auto d = b_.rmsnorm_backward(dout, in[0], in[1], n.outputs[1], name);
        accumulate(in[0], d[0]);
        accumulate(in[1], d[1]);
        break;
      }
      case OpKind::matmul:
        matmul_rule(n, dout, name);
        break;
      case OpKind::rope:
        accumulate(in[0], b_.rope_backward(dout, n.attrs, name));
        break;
      case OpKind::attention: {
        if (n.attrs.packed) {
          accumulate(in[0], b_.attention_packed_backward(dout, in[0], n.outputs[0], n.outputs[1], n.attrs, name));
          break;
        }
        auto d = b_.attention_backward(dout, in[0], in[1], in[2], n.outputs[0], n.outputs[1], n.attrs, name);
        for (int j = 0; j < 3; ++j) accumulate(in[static_cast<size_t>(j)], d[static_cast<size_t>(j)]);
        break;
      }
      case OpKind::swiglu: {
        if (n.attrs.packed) {
          accumulate(in[0], b_.swiglu_packed_backward(dout, in[0], name));
          break;
        }
        auto d = b_.swiglu_backward(dout, in[0], in[1], name);
        accumulate(in[0], d[0]);
        accumulate(in[1], d[1]);
        break;
      }
      case OpKind::add:
        accumulate(in[0], dout);
        accumulate(in[1], dout);
        break;
      case OpKind::cross_entropy:
        accumulate(in[0], b_.cross_entropy_backward(in[0], in[1], n.outputs[1], dout, name));
        break;
      case OpKind::cast:
        accumulate(in[0], b_.cast(dout, g_.value(in[0]).dtype, name));
        break;
      case OpKind::fill:
        break;  // a constant
      default:
        throw Error("autodiff", "no gradient rule for op " + std::string(op_name(n.kind)) + " '" + n.name + "'");
    }
  }

  // For Y = op(A) op(B); each gradient is one more matmul (see ops/matmul.h).
  // A parameter's gradient comes out in the accumulation dtype.
  void matmul_rule(const Node& n, Value dy, const std::string& name) {
    Value a = n.inputs[0], bv = n.inputs[1];
    const bool ta = n.attrs.trans_a, tb = n.attrs.trans_b;
    const Shape a_shape = g_.value(a).shape, b_shape = g_.value(bv).shape;
    auto grad_dtype = [&](Value v) -> std::optional<DType> {
      if (g_.value(v).role != ValueRole::parameter) return std::nullopt;
      return accumulation_dtype(g_.value(v).dtype);
    };
    if (needs(a)) {
      const std::string da_name = name + ".da";
      Value da = !ta ? b_.matmul(dy, bv, false, !tb, da_name, &a_shape, grad_dtype(a))
                     : (!tb ? b_.matmul(bv, dy, false, true, da_name, &a_shape, grad_dtype(a))
                            : b_.matmul(bv, dy, true, true, da_name, &a_shape, grad_dtype(a)));
      accumulate(a, da);
    }
    if (needs(bv)) {
      const std::string db_name = name + ".db";
      Value db = !tb ? (!ta ? b_.matmul(a, dy, true, false, db_name, &b_shape, grad_dtype(bv))
                            : b_.matmul(a, dy, false, false, db_name, &b_shape, grad_dtype(bv)))
                     : (!ta ? b_.matmul(dy, a, true, false, db_name, &b_shape, grad_dtype(bv))
                            : b_.matmul(dy, a, true, true, db_name, &b_shape, grad_dtype(bv)));
      accumulate(bv, db);
    }
  }

  Builder& b_;
  Graph& g_;
  std::vector<Value> grad_;
  std::vector<bool> needs_;
};

}  // namespace

Gradients append_backward(Builder& b, Value loss, const std::vector<Value>& wrt, GradientOutput output) {
  Backward backward(b, wrt);
  backward.run(loss);
  Graph& g = b.graph();
  b.set_backward(true);
  Gradients grads;
  std::unordered_map<int32_t, int> uses;  // gradient value id -> values of `wrt` it is the gradient of
  for (Value v : wrt) {
    if (grads.of.count(v.id)) continue;
    Value grad = backward.grad_of(v);
    if (!grad.valid()) {
      const ValueInfo& info = g.value(v);
      grad = b.fill(info.name + ".grad", info.shape, 0.0, accumulation_dtype(info.dtype));
    }
    grads.of[v.id] = grad;
    ++uses[grad.id];
  }
  for (Value v : wrt) {
    Value& grad = grads.of.at(v.id);
    if (output == GradientOutput::fresh) {
      g.mark_output(grad);
      continue;
    }
    if (g.is_accumulated(grad)) continue;  // v was listed twice
    // Each value of `wrt` needs a buffer of its own, and a node to add into it.
    if (uses.at(grad.id) > 1 || !g.can_accumulate(grad)) {
      const ValueInfo& gi = g.value(grad);
      const std::string name = g.value(v).name;
      Value zero = b.fill(name + ".grad_zero", gi.shape, 0.0, gi.dtype);
      grad = b.add(grad, zero, name + ".grad_acc");
    }
    g.mark_accumulated(grad);
  }
  b.set_backward(false);
  return grads;
}

}  // namespace spillway::graph
