#include "graph/autodiff.h"

#include <string>
#include <string_view>

#include "base/status.h"
#include "graph/op_def.h"

namespace spillway::graph {

Value Gradients::operator[](Value v) const {
  auto it = of.find(v.id);
  SPW_CHECK(it != of.end(), "autodiff", "no gradient for value ", v.id);
  return it->second;
}

namespace {

// The driver's own nodes, whose shapes need no checking: a constant (the
// loss's seed, the zero gradient of a value the loss does not reach) and a
// sum of two gradients of one value.
Value constant(Builder& b, std::string_view name, const Shape& shape, double value, DType dtype) {
  NodeAttrs attrs;
  attrs.fill_value = value;
  return b.emit(OpKind::fill, name, {}, {{shape, dtype, ""}}, attrs)[0];
}

Value sum(Builder& b, Value x, Value y, std::string_view name) {
  const ValueInfo& xi = b.info(x);
  const ValueInfo& yi = b.info(y);
  SPW_CHECK(xi.shape == yi.shape && xi.dtype == yi.dtype, b.label(OpKind::add, name), "gradients differ: ",
            xi.shape.str(), " ", dtype_name(xi.dtype), " and ", yi.shape.str(), " ", dtype_name(yi.dtype));
  return b.emit(OpKind::add, name, {x, y}, {{xi.shape, xi.dtype, ""}})[0];
}

class Backward final : public Vjp {
 public:
  Backward(Builder& b, const std::vector<Value>& wrt)
      : Vjp(b), g_(b.graph()), grad_(g_.values().size()), needs_(g_.values().size(), false) {
    for (Value v : wrt) needs_[static_cast<size_t>(v.id)] = true;
    // A value needs a gradient when some value asked for flows into it.
    for (const Node& node : g_.nodes()) {
      bool any = false;
      for (Value in : node.inputs) any = any || needs_[static_cast<size_t>(in.id)];
      for (Value out : node.outputs) needs_[static_cast<size_t>(out.id)] = any;
    }
  }

  // From `seed_value` (d objective / d output) where valid, else from the
  // constant `seed` for a one-element loss.
  void run(Value loss, double seed, Value seed_value = {}) {
    const ValueInfo& li = g_.value(loss);
    if (seed_value.valid()) {
      const ValueInfo& si = g_.value(seed_value);
      SPW_CHECK(si.shape == li.shape && si.dtype == li.dtype, "autodiff", "the gradient given for '", li.name,
                "' is ", si.shape.str(), " ", dtype_name(si.dtype), ", the value ", li.shape.str(), " ",
                dtype_name(li.dtype));
    } else {
      SPW_CHECK(li.shape.numel() == 1, "autodiff", "loss '", li.name, "' must hold one element, has shape ",
                li.shape.str());
    }
    b.set_backward(true);
    const auto forward_nodes = static_cast<int32_t>(g_.nodes().size());
    grad_.resize(g_.values().size());
    grad_[static_cast<size_t>(loss.id)] =
        seed_value.valid() ? seed_value : constant(b, li.name + ".grad", li.shape, seed, li.dtype);
    for (int32_t i = forward_nodes - 1; i >= 0; --i) {
      // Copy: emitting backward nodes grows the node list under us.
      const Node node = g_.nodes()[static_cast<size_t>(i)];
      if (node.backward) continue;
      Value dout = grad_of(node.outputs[0]);
      if (!dout.valid()) continue;
      const auto rule = op_def(node.kind).backward;
      if (!rule) throw Error("autodiff", "no gradient rule for op " + node_label(node));
      rule(*this, node, dout);
    }
    b.set_backward(false);
  }

  Value grad_of(Value v) const {
    size_t i = static_cast<size_t>(v.id);
    return i < grad_.size() ? grad_[i] : Value{};
  }

  bool needs(Value v) const override { return needs_[static_cast<size_t>(v.id)]; }

  void add(Value v, Value g) override {
    size_t i = static_cast<size_t>(v.id);
    if (!needs_[i]) return;
    if (grad_.size() < g_.values().size()) grad_.resize(g_.values().size());
    if (!grad_[i].valid()) {
      grad_[i] = g;
    } else {
      grad_[i] = sum(b, grad_[i], g, g_.value(v).name + ".grad_sum");
    }
  }

 private:
  Graph& g_;
  std::vector<Value> grad_;
  std::vector<bool> needs_;
};

// Every value of `wrt` given its gradient (zeros where the objective does
// not reach it), as output says.
Gradients finish_backward(Builder& b, Backward& backward, const std::vector<Value>& wrt, GradientOutput output) {
  Graph& g = b.graph();
  b.set_backward(true);
  Gradients grads;
  std::unordered_map<int32_t, int> uses;  // gradient value id -> values of `wrt` it is the gradient of
  for (Value v : wrt) {
    if (grads.of.count(v.id)) continue;
    Value grad = backward.grad_of(v);
    if (!grad.valid()) {
      const ValueInfo& info = g.value(v);
      grad = constant(b, info.name + ".grad", info.shape, 0.0, accumulation_dtype(info.dtype));
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
      Value zero = constant(b, name + ".grad_zero", gi.shape, 0.0, gi.dtype);
      grad = sum(b, grad, zero, name + ".grad_acc");
    }
    g.mark_accumulated(grad);
  }
  b.set_backward(false);
  return grads;
}

}  // namespace

Gradients append_backward(Builder& b, Value loss, const std::vector<Value>& wrt, GradientOutput output,
                          double seed) {
  Backward backward(b, wrt);
  backward.run(loss, seed);
  return finish_backward(b, backward, wrt, output);
}

Gradients append_backward_from(Builder& b, Value output, Value seed, const std::vector<Value>& wrt,
                               GradientOutput kind) {
  Backward backward(b, wrt);
  backward.run(output, 1.0, seed);
  return finish_backward(b, backward, wrt, kind);
}

}  // namespace spillway::graph
