// The collectives' definitions: all_reduce, all_gather and reduce_scatter
// through the run's communicators (ops/collective_groups.h).
#include "ops/collective_op.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "ops/collective_groups.h"
#include "ops/op_definition.h"

namespace spillway::ops {

namespace {

// A value's [rows, columns] view.
struct Matrix {
  int64_t rows, columns;
};
Matrix matrix_of(const Shape& s) { return {s.numel() / s.last(), s.last()}; }

// The split dimension's length in the piece and in the whole.
int64_t piece_extent(const Shape& piece, bool columns) {
  const Matrix m = matrix_of(piece);
  return columns ? m.columns : m.rows;
}

void check_pieces(const Node& n, int64_t piece, int ranks) {
  SPW_CHECK(piece * ranks >= n.attrs.whole_extent, node_label(n), ranks, " pieces of ", piece,
            " do not cover the whole's ", n.attrs.whole_extent);
}

void all_reduce_vjp(graph::Vjp& vjp, const Node& n, graph::Value dout) {
  vjp.add(n.inputs[0], all_reduce(vjp.b, dout, n.attrs.group, graph::backward_name(n)));
}

void all_gather_vjp(graph::Vjp& vjp, const Node& n, graph::Value dout) {
  const Shape piece = vjp.b.info(n.inputs[0]).shape;
  vjp.add(n.inputs[0], reduce_scatter(vjp.b, dout, n.attrs.group, n.attrs.split_columns, piece,
                                      graph::backward_name(n)));
}

void reduce_scatter_vjp(graph::Vjp& vjp, const Node& n, graph::Value dout) {
  const Shape whole = vjp.b.info(n.inputs[0]).shape;
  vjp.add(n.inputs[0], all_gather(vjp.b, dout, n.attrs.group, n.attrs.split_columns, whole,
                                  graph::backward_name(n)));
}

int first_input(const Node&, size_t) { return 0; }

void cpu_all_reduce(const Graph& g, const Node& n, const std::vector<void*>& data, const CollectiveGroups& groups) {
  const Operands x(g, n, data);
  Communicator& comm = groups.of(n);
  const uint64_t count = static_cast<uint64_t>(x.out_shape(0).numel());
  if (x.out(0) != x.in(0)) std::memcpy(x.out(0), x.in(0), x.out_value(0).bytes());
  comm.all_reduce_sum(x.out(0), count, x.out_value(0).dtype, *groups.stream);
  comm.wait(*groups.stream);
}

// Rank-ordered pieces [ranks][rows][piece columns] to and from a whole
// [rows][extent] split by columns.
void pieces_to_columns(const char* pieces, char* whole, Matrix piece, int64_t extent, int ranks, size_t elem) {
  for (int q = 0; q < ranks; ++q) {
    const int64_t first = q * piece.columns;
    const int64_t width = std::clamp<int64_t>(extent - first, 0, piece.columns);
    for (int64_t r = 0; r < piece.rows && width > 0; ++r) {
      std::memcpy(whole + (r * extent + first) * elem, pieces + ((q * piece.rows + r) * piece.columns) * elem,
                  static_cast<size_t>(width) * elem);
    }
  }
}

void columns_to_pieces(const char* whole, char* pieces, Matrix piece, int64_t extent, int ranks, size_t elem) {
  std::memset(pieces, 0, static_cast<size_t>(ranks * piece.rows * piece.columns) * elem);
  for (int q = 0; q < ranks; ++q) {
    const int64_t first = q * piece.columns;
    const int64_t width = std::clamp<int64_t>(extent - first, 0, piece.columns);
    for (int64_t r = 0; r < piece.rows && width > 0; ++r) {
      std::memcpy(pieces + ((q * piece.rows + r) * piece.columns) * elem, whole + (r * extent + first) * elem,
                  static_cast<size_t>(width) * elem);
    }
  }
}

void cpu_all_gather(const Graph& g, const Node& n, const std::vector<void*>& data, const CollectiveGroups& groups) {
  const Operands x(g, n, data);
  Communicator& comm = groups.of(n);
  const int ranks = comm.size();
  const Matrix piece = matrix_of(x.in_shape(0));
  const DType dtype = x.in_value(0).dtype;
  const size_t elem = dtype_size(dtype);
  const uint64_t count = static_cast<uint64_t>(piece.rows * piece.columns);
  check_pieces(n, piece_extent(x.in_shape(0), n.attrs.split_columns), ranks);
  const bool direct = !n.attrs.split_columns && piece.rows * ranks == n.attrs.whole_extent;
  std::vector<char> gathered(direct ? 0 : count * static_cast<uint64_t>(ranks) * elem);
  char* into = direct ? x.out<char>(0) : gathered.data();
  comm.all_gather(x.in(0), into, count, dtype, *groups.stream);
  comm.wait(*groups.stream);
  if (direct) return;
  if (n.attrs.split_columns) {
    pieces_to_columns(gathered.data(), x.out<char>(0), piece, n.attrs.whole_extent, ranks, elem);
  } else {
    std::memcpy(x.out(0), gathered.data(), x.out_value(0).bytes());
  }
}

void cpu_reduce_scatter(const Graph& g, const Node& n, const std::vector<void*>& data,
                        const CollectiveGroups& groups) {
  const Operands x(g, n, data);
  Communicator& comm = groups.of(n);
  const int ranks = comm.size();
  const Matrix piece = matrix_of(x.out_shape(0));
  const DType dtype = x.in_value(0).dtype;
  const size_t elem = dtype_size(dtype);
  const uint64_t count = static_cast<uint64_t>(piece.rows * piece.columns);
  check_pieces(n, piece_extent(x.out_shape(0), n.attrs.split_columns), ranks);
  const bool direct = !n.attrs.split_columns && piece.rows * ranks == n.attrs.whole_extent;
  std::vector<char> pieces(direct ? 0 : count * static_cast<uint64_t>(ranks) * elem);
  if (n.attrs.split_columns) {
    columns_to_pieces(x.in<const char>(0), pieces.data(), piece, n.attrs.whole_extent, ranks, elem);
  } else if (!direct) {
    std::memcpy(pieces.data(), x.in(0), x.in_value(0).bytes());  // the rest stays zero
  }
  comm.reduce_scatter_sum(direct ? x.in(0) : pieces.data(), x.out(0), count, dtype, *groups.stream);
  comm.wait(*groups.stream);
}

// Priced as the bytes it moves through device memory: the planner does
// not yet cost the links of a rank graph's collectives.
graph::OpCost collective_cost(const Graph& g, const Node& n) { return graph::memory_bound(g, n); }

graph::NodeAttrs collective_attrs(int group, bool split_columns, int64_t whole_extent) {
  graph::NodeAttrs a;
  a.group = static_cast<int8_t>(group);
  a.split_columns = split_columns;
  a.whole_extent = whole_extent;
  return a;
}

}  // namespace

graph::Value all_reduce(graph::Builder& b, graph::Value x, int group, std::string_view name) {
  const graph::ValueInfo& xi = b.info(x);
  return b.emit(OpKind::all_reduce, name, {x}, {{xi.shape, xi.dtype, ""}}, collective_attrs(group, false, 0))[0];
}

graph::Value all_gather(graph::Builder& b, graph::Value piece, int group, bool split_columns, Shape whole_shape,
                        std::string_view name) {
  const graph::ValueInfo pi = b.info(piece);
  const std::string label = b.label(OpKind::all_gather, name);
  const Matrix p = matrix_of(pi.shape), w = matrix_of(whole_shape);
  SPW_CHECK(split_columns ? p.rows == w.rows : p.columns == w.columns, label, "piece ", pi.shape.str(),
            " and whole ", whole_shape.str(), " differ in the dimension not split");
  const int64_t extent = split_columns ? w.columns : w.rows;
  return b.emit(OpKind::all_gather, name, {piece}, {{std::move(whole_shape), pi.dtype, ""}},
                collective_attrs(group, split_columns, extent))[0];
}

graph::Value reduce_scatter(graph::Builder& b, graph::Value x, int group, bool split_columns, Shape piece_shape,
                            std::string_view name) {
  const graph::ValueInfo xi = b.info(x);
  const std::string label = b.label(OpKind::reduce_scatter, name);
  const Matrix p = matrix_of(piece_shape), w = matrix_of(xi.shape);
  SPW_CHECK(split_columns ? p.rows == w.rows : p.columns == w.columns, label, "piece ", piece_shape.str(),
            " and whole ", xi.shape.str(), " differ in the dimension not split");
  const int64_t extent = split_columns ? w.columns : w.rows;
  return b.emit(OpKind::reduce_scatter, name, {x}, {{std::move(piece_shape), xi.dtype, ""}},
                collective_attrs(group, split_columns, extent))[0];
}

constinit const graph::OpDef all_reduce_def{
    .backward = all_reduce_vjp,
    .cost = collective_cost,
    .in_place_input = first_input,
    .cpu_collective = cpu_all_reduce,
};

constinit const graph::OpDef all_gather_def{
    .backward = all_gather_vjp,
    .cost = collective_cost,
    .cpu_collective = cpu_all_gather,
};

constinit const graph::OpDef reduce_scatter_def{
    .backward = reduce_scatter_vjp,
    .cost = collective_cost,
    .cpu_collective = cpu_reduce_scatter,
};

}  // namespace spillway::ops
