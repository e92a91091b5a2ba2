#include "graph/builder.h"

namespace spillway::graph {

Builder::Scope::Scope(Builder& b, std::string_view name) : b_(b), saved_(b.scope_.size()) {
  if (!b_.scope_.empty()) b_.scope_ += ".";
  b_.scope_ += name;
}
Builder::Scope::~Scope() { b_.scope_.resize(saved_); }

std::string Builder::path(std::string_view name) const {
  return scope_.empty() ? std::string(name) : scope_ + "." + std::string(name);
}

std::string Builder::label(OpKind kind, std::string_view name) const {
  return std::string(op_name(kind)) + " '" + path(name) + "'";
}

std::vector<Value> Builder::emit(OpKind kind, std::string_view name, std::vector<Value> inputs,
                                 const std::vector<OutputSpec>& outputs, NodeAttrs attrs) {
  Node node{kind, path(name), std::move(inputs), {}, std::move(attrs), backward_};
  g_.check_reads(node.name, node.inputs);  // before any output value exists
  for (const OutputSpec& out : outputs) {
    std::string value_name = node.name;
    if (!out.suffix.empty()) value_name += "." + std::string(out.suffix);
    node.outputs.push_back(
        g_.add_value(ValueInfo{std::move(value_name), out.shape, out.dtype, ValueRole::computed, -1}));
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

}  // namespace spillway::graph
