// take_rows' and concat_rows' definitions: copies, whose gradients are the
// other op (and zeros).
#include "ops/rows_op.h"

#include "ops/fill_op.h"
#include "ops/op_definition.h"
#include "ops/rows.h"

namespace spillway::ops {

namespace {

int64_t rows_of(const Shape& s) { return s[1]; }
Shape with_rows(const Shape& s, int64_t rows) {
  std::vector<int64_t> dims = s.dims();
  dims[1] = rows;
  return Shape(std::move(dims));
}
int64_t row_bytes(const graph::ValueInfo& v) {
  return v.shape.numel() / (v.shape[0] * v.shape[1]) * static_cast<int64_t>(dtype_size(v.dtype));
}

void take_rows_vjp(graph::Vjp& vjp, const Node& n, graph::Value dout) {
  const graph::ValueInfo& x = vjp.b.info(n.inputs[0]);
  const Shape x_shape = x.shape;
  const DType dtype = x.dtype;
  const int64_t count = rows_of(vjp.b.info(dout).shape), first = n.attrs.first_row;
  const std::string name = graph::backward_name(n);
  auto zeros = [&](int64_t rows, const char* where) {
    return fill(vjp.b, name + where, with_rows(x_shape, rows), 0.0, dtype);
  };
  std::vector<graph::Value> parts;
  if (first > 0) parts.push_back(zeros(first, ".before"));
  parts.push_back(dout);
  if (first + count < rows_of(x_shape)) parts.push_back(zeros(rows_of(x_shape) - first - count, ".after"));
  vjp.add(n.inputs[0], parts.size() == 1 ? dout : concat_rows(vjp.b, parts, name));
}

void concat_rows_vjp(graph::Vjp& vjp, const Node& n, graph::Value dout) {
  const std::string name = graph::backward_name(n);
  int64_t first = 0;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const int64_t rows = rows_of(vjp.b.info(n.inputs[i]).shape);
    vjp.add(n.inputs[i], take_rows(vjp.b, dout, first, rows, name + "." + std::to_string(i)));
    first += rows;
  }
}

// Each copy of the node: from input `i` (or the one input) to the output.
template <typename Copy>
void for_each_copy(const Graph& g, const Node& n, Copy&& copy) {
  const graph::ValueInfo& out = g.value(n.outputs[0]);
  RowCopy c{.batch = out.shape[0], .row_bytes = row_bytes(out), .dst_rows = rows_of(out.shape)};
  if (n.kind == OpKind::take_rows) {
    c.src_rows = rows_of(g.value(n.inputs[0]).shape);
    c.src_first = n.attrs.first_row;
    c.count = c.dst_rows;
    copy(0, c);
    return;
  }
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    c.src_rows = c.count = rows_of(g.value(n.inputs[i]).shape);
    copy(i, c);
    c.dst_first += c.count;
  }
}

void cpu_rows(const Graph& g, const Node& n, const std::vector<void*>& data) {
  const Operands x(g, n, data);
  for_each_copy(g, n, [&](size_t i, const RowCopy& c) { copy_rows(x.in(i), x.out(0), c); });
}

#ifdef SPILLWAY_HAS_CUDA
void cuda_rows(const Graph& g, const Node& n, const std::vector<void*>& data, CudaOpContext& cuda) {
  const Operands x(g, n, data);
  for_each_copy(g, n, [&](size_t i, const RowCopy& c) { copy_rows_cuda(x.in(i), x.out(0), c, cuda.stream); });
}
#endif

// Rows of a value split by its features (heads) are the rows of each
// piece: the op runs on the pieces.
void rows_shard(Sharder& s, const Node& n) {
  std::vector<graph::Value> pieces;
  for (graph::Value in : n.inputs) {
    if (s.placement(in) != Placement::columns) return s.whole(n);
    pieces.push_back(s.as(in, Placement::columns));
  }
  if (n.kind == OpKind::take_rows) {
    take_rows(s.b, pieces[0], n.attrs.first_row, rows_of(s.g.value(n.outputs[0]).shape), n.name);
  } else {
    concat_rows(s.b, pieces, n.name);
  }
  s.define(n, Placement::columns);
}

}  // namespace

graph::Value take_rows(graph::Builder& b, graph::Value x, int64_t first, int64_t count, std::string_view name) {
  const graph::ValueInfo& xi = b.info(x);
  const std::string label = b.label(OpKind::take_rows, name);
  SPW_CHECK(xi.shape.rank() >= 2, label, "x ", xi.shape.str(), " has no rows (dimension 1)");
  SPW_CHECK(first >= 0 && count > 0 && first + count <= rows_of(xi.shape), label, "rows [", first, ", ",
            first + count, ") of ", xi.shape.str());
  const Shape out = with_rows(xi.shape, count);
  graph::NodeAttrs attrs;
  attrs.first_row = first;
  return b.emit(OpKind::take_rows, name, {x}, {{out, xi.dtype, ""}}, attrs)[0];
}

graph::Value concat_rows(graph::Builder& b, const std::vector<graph::Value>& parts, std::string_view name) {
  const std::string label = b.label(OpKind::concat_rows, name);
  SPW_CHECK(!parts.empty(), label, "nothing to join");
  const graph::ValueInfo& first = b.info(parts[0]);
  SPW_CHECK(first.shape.rank() >= 2, label, "part ", first.shape.str(), " has no rows (dimension 1)");
  const Shape first_shape = first.shape;  // copies: emitting grows the graph's values
  const DType dtype = first.dtype;
  int64_t rows = 0;
  for (graph::Value p : parts) {
    const graph::ValueInfo& pi = b.info(p);
    SPW_CHECK(pi.shape.rank() == first_shape.rank() && with_rows(pi.shape, 0) == with_rows(first_shape, 0) &&
                  pi.dtype == dtype,
              label, "part ", pi.shape.str(), " ", dtype_name(pi.dtype), " does not line up with ",
              first_shape.str(), " ", dtype_name(dtype));
    rows += rows_of(pi.shape);
  }
  return b.emit(OpKind::concat_rows, name, parts, {{with_rows(first_shape, rows), dtype, ""}})[0];
}

constinit const graph::OpDef take_rows_def{
    .backward = take_rows_vjp,
    .cost = graph::memory_bound,
    .cheap_to_recompute = true,
    .shard = rows_shard,
    .cpu = cpu_rows,
#ifdef SPILLWAY_HAS_CUDA
    .cuda = cuda_rows,
#endif
};

constinit const graph::OpDef concat_rows_def{
    .backward = concat_rows_vjp,
    .cost = graph::memory_bound,
    .cheap_to_recompute = true,
    .shard = rows_shard,
    .cpu = cpu_rows,
#ifdef SPILLWAY_HAS_CUDA
    .cuda = cuda_rows,
#endif
};

}  // namespace spillway::ops
