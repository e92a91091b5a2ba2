// rope's definition: the rotation and its backward, both of which may write
// over their input.
#include "ops/rope_op.h"

#include "ops/op_definition.h"
#include "ops/rope.h"

namespace spillway::ops {

namespace {

// A rope's per-token positions input (ops/rope.h), or an invalid value
// where it rotates token t at pos0 + t.
graph::Value positions_of(const Node& n) { return n.inputs.size() > 1 ? n.inputs[1] : graph::Value{}; }

const int32_t* positions_data(const Operands& x) {
  return positions_of(x.node()).valid() ? x.in<int32_t>(1) : nullptr;
}

void rope_vjp(graph::Vjp& vjp, const Node& n, graph::Value dout) {
  vjp.add(n.inputs[0], rope_backward(vjp.b, dout, n.attrs, graph::backward_name(n), positions_of(n)));
}

// Every backend reads a pair of elements before writing it, in one thread,
// and leaves the carried heads untouched.
int rotated_over_input(const Node&, size_t output) { return output == 0 ? 0 : -1; }

// The two directions share a signature: Kernel is rope_forward or rope_backward.
template <typename T, void (*Kernel)(const T*, T*, int64_t, int64_t, int64_t, int64_t, const float*, int64_t, int64_t,
                                     const int32_t*)>
void cpu_rotate(const Operands& x) {
  const RopeDims r = rope_dims(x.graph(), x.node());
  Kernel(x.in<T>(0), x.out<T>(0), r.batch, r.seq, r.heads, r.head_dim, x.attrs().inv_freq->data(), x.attrs().pos0,
         r.rotated_heads, positions_data(x));
}

#ifdef SPILLWAY_HAS_CUDA
template <void (*Kernel)(const bf16*, bf16*, int64_t, int64_t, int64_t, int64_t, const float*, int64_t, cudaStream_t,
                         int64_t, const int32_t*)>
void cuda_rotate(const Graph& g, const Node& n, const std::vector<void*>& data, CudaOpContext& cuda) {
  const Operands x(g, n, data);
  const RopeDims r = rope_dims(g, n);
  Kernel(x.in<bf16>(0), x.out<bf16>(0), r.batch, r.seq, r.heads, r.head_dim, cuda.inv_freq_on_device(*n.attrs.inv_freq),
         n.attrs.pos0, cuda.stream, r.rotated_heads, positions_data(x));
}
#endif

// Heads split by columns rotate as they are, each rank its own heads.
void rope_shard(Sharder& s, const Node& n) {
  const graph::Value x = n.inputs[0];
  if (s.placement(x) != Placement::columns) return s.whole(n);
  const graph::Value positions = positions_of(n);
  rope(s.b, s.as(x, Placement::columns), s.divided(n.attrs.heads, "the heads of " + node_label(n)), n.attrs.inv_freq,
       n.attrs.pos0, n.name, s.divided(n.attrs.rotated_heads, "the rotated heads of " + node_label(n)),
       positions.valid() ? s.as(positions, Placement::whole) : positions);
  s.define(n, Placement::columns);
}

}  // namespace

graph::Value rope(graph::Builder& b, graph::Value x, int64_t heads, std::shared_ptr<const std::vector<float>> inv_freq,
                  int64_t pos0, std::string_view name, int64_t rotated_heads, graph::Value positions) {
  const graph::ValueInfo& xi = b.info(x);
  const std::string label = b.label(OpKind::rope, name);
  SPW_CHECK(xi.shape.rank() == 3, label, "x must be [batch, seq, heads * head_dim], got ", xi.shape.str());
  SPW_CHECK(heads > 0 && xi.shape.last() % heads == 0, label, "last dimension of ", xi.shape.str(),
            " is not a multiple of ", heads, " heads");
  SPW_CHECK(inv_freq && static_cast<int64_t>(inv_freq->size()) * 2 == xi.shape.last() / heads, label, "head_dim ",
            xi.shape.last() / heads, " needs ", xi.shape.last() / heads / 2, " rotary frequencies, got ",
            inv_freq ? inv_freq->size() : 0);
  SPW_CHECK(rotated_heads >= 0 && rotated_heads <= heads, label, "cannot rotate ", rotated_heads, " of ", heads,
            " heads");
  graph::NodeAttrs attrs;
  attrs.heads = heads;
  attrs.rotated_heads = rotated_heads;
  attrs.inv_freq = std::move(inv_freq);
  attrs.pos0 = pos0;
  std::vector<graph::Value> inputs{x};
  if (positions.valid()) {
    const graph::ValueInfo& pi = b.info(positions);
    const Shape want{xi.shape[0], xi.shape[1]};
    SPW_CHECK(pi.dtype == DType::i32 && pi.shape == want, label, "positions must be i32 ", want.str(), ", got ",
              dtype_name(pi.dtype), " ", pi.shape.str());
    inputs.push_back(positions);
  }
  return b.emit(OpKind::rope, name, inputs, {{xi.shape, xi.dtype, ""}}, attrs)[0];
}

graph::Value rope_backward(graph::Builder& b, graph::Value dout, const graph::NodeAttrs& forward_attrs,
                           std::string_view name, graph::Value positions) {
  const graph::ValueInfo& di = b.info(dout);
  std::vector<graph::Value> inputs{dout};
  if (positions.valid()) inputs.push_back(positions);
  return b.emit(OpKind::rope_backward, name, inputs, {{di.shape, di.dtype, ""}}, forward_attrs)[0];
}

RopeDims rope_dims(const Graph& g, const Node& n) {
  const Shape& s = g.value(n.outputs[0]).shape;  // the rotated rows: a rope's output has its input's shape
  const int64_t heads = n.attrs.heads;
  return RopeDims{s[0], s[1], heads, s.last() / heads, n.attrs.rotated_heads > 0 ? n.attrs.rotated_heads : heads};
}

constinit const graph::OpDef rope_def{
    .backward = rope_vjp,
    .cost = graph::memory_bound,
    .cheap_to_recompute = true,
    .in_place_input = rotated_over_input,
    .shard = rope_shard,
    .cpu = on_cpu<cpu_rotate<float, rope_forward<float>>, cpu_rotate<double, rope_forward<double>>>,
#ifdef SPILLWAY_HAS_CUDA
    .cuda = cuda_rotate<rope_forward_cuda>,
#endif
};

constinit const graph::OpDef rope_backward_def{
    .cost = graph::memory_bound,
    .in_place_input = rotated_over_input,
    .cpu = on_cpu<cpu_rotate<float, rope_backward<float>>, cpu_rotate<double, rope_backward<double>>>,
#ifdef SPILLWAY_HAS_CUDA
    .cuda = cuda_rotate<rope_backward_cuda>,
#endif
};

}  // namespace spillway::ops
