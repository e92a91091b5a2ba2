// The collectives' definitions: all_reduce, all_gather and reduce_scatter
// through the run's communicators (ops/collective_groups.h).
#include "ops/collective_op.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "device/communicator.h"
#include "ops/collective_groups.h"
#include "ops/op_definition.h"
#ifdef SPILLWAY_HAS_CUDA
#include "device/cuda/cuda_check.h"
#endif

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
  vjp.add(n.inputs[0], all_reduce(vjp.b, dout, n.attrs.group, n.attrs.ranks, graph::backward_name(n)));
}

void all_gather_vjp(graph::Vjp& vjp, const Node& n, graph::Value dout) {
  const Shape piece = vjp.b.info(n.inputs[0]).shape;
  vjp.add(n.inputs[0], reduce_scatter(vjp.b, dout, n.attrs.group, n.attrs.ranks, n.attrs.split_columns, piece,
                                      graph::backward_name(n)));
}

void reduce_scatter_vjp(graph::Vjp& vjp, const Node& n, graph::Value dout) {
  const Shape whole = vjp.b.info(n.inputs[0]).shape;
  vjp.add(n.inputs[0], all_gather(vjp.b, dout, n.attrs.group, n.attrs.ranks, n.attrs.split_columns, whole,
                                  graph::backward_name(n)));
}

int first_input(const Node&, size_t) { return 0; }

// A collective of another group (context parallelism's gathers of keys and
// values) over a value tensor parallelism splits by columns: each piece
// goes through it alone, its rows gathered or summed as the whole's are.
void collective_shard(Sharder& s, const Node& n) {
  const graph::Value x = n.inputs[0];
  if (s.placement(x) != Placement::columns || n.attrs.split_columns) return s.whole(n);
  const graph::Value piece = s.as(x, Placement::columns);
  const graph::ValueInfo& out = s.g.value(n.outputs[0]);
  s.b.emit(n.kind, n.name, {piece}, {{out.shape.with_last(s.b.info(piece).shape.last()), out.dtype, ""}}, n.attrs);
  s.define(n, Placement::columns);
}

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

#ifdef SPILLWAY_HAS_CUDA
// On the GPU the collectives run through NCCL on the graph's stream; a
// piece padded or split by columns passes through the shared workspace
// ([ranks][piece], rank-ordered, as NCCL lays it out), strided copies
// moving it to or from its place in the whole.
const CollectiveGroups& groups_of(const Node& n, const CudaOpContext& cuda) {
  SPW_CHECK(cuda.collectives != nullptr, node_label(n), "runs on a GPU without communicators");
  return *cuda.collectives;
}

// The workspace a gather or scatter needs: none where the pieces are the
// whole, rank after rank.
uint64_t prepare_pieces(const Graph& g, const Node& n, CudaOpContext& cuda) {
  const int ranks = groups_of(n, cuda).of(n).size();
  const graph::ValueInfo& piece = g.value(n.kind == OpKind::all_gather ? n.inputs[0] : n.outputs[0]);
  const Matrix p = matrix_of(piece.shape);
  if (!n.attrs.split_columns && p.rows * ranks == n.attrs.whole_extent) return 0;
  return piece.bytes() * static_cast<uint64_t>(ranks);
}

// Piece q of `ranks` [rows][piece columns] blocks at `pieces`, to or from
// its columns of the whole [rows][extent].
void copy_columns(void* whole, void* pieces, Matrix piece, int64_t extent, int ranks, size_t elem, bool to_whole,
                  cudaStream_t stream) {
  for (int q = 0; q < ranks; ++q) {
    const int64_t first = q * piece.columns;
    const int64_t width = std::clamp<int64_t>(extent - first, 0, piece.columns);
    if (width == 0) continue;
    char* w = static_cast<char*>(whole) + first * static_cast<int64_t>(elem);
    char* b = static_cast<char*>(pieces) + q * piece.rows * piece.columns * static_cast<int64_t>(elem);
    const size_t wp = static_cast<size_t>(extent) * elem, bp = static_cast<size_t>(piece.columns) * elem;
    const size_t bytes = static_cast<size_t>(width) * elem, rows = static_cast<size_t>(piece.rows);
    SPW_CUDA(to_whole ? cudaMemcpy2DAsync(w, wp, b, bp, bytes, rows, cudaMemcpyDeviceToDevice, stream)
                      : cudaMemcpy2DAsync(b, bp, w, wp, bytes, rows, cudaMemcpyDeviceToDevice, stream));
  }
}

void cuda_all_reduce(const Graph& g, const Node& n, const std::vector<void*>& data, CudaOpContext& cuda) {
  const Operands x(g, n, data);
  const CollectiveGroups& groups = groups_of(n, cuda);
  if (x.out(0) != x.in(0)) {
    SPW_CUDA(cudaMemcpyAsync(x.out(0), x.in(0), x.out_value(0).bytes(), cudaMemcpyDeviceToDevice, cuda.stream));
  }
  groups.of(n).all_reduce_sum(x.out(0), static_cast<uint64_t>(x.out_shape(0).numel()), x.out_value(0).dtype,
                              *groups.stream);
}

void cuda_all_gather(const Graph& g, const Node& n, const std::vector<void*>& data, CudaOpContext& cuda) {
  const Operands x(g, n, data);
  const CollectiveGroups& groups = groups_of(n, cuda);
  Communicator& comm = groups.of(n);
  const Matrix piece = matrix_of(x.in_shape(0));
  const size_t elem = dtype_size(x.in_value(0).dtype);
  const uint64_t count = static_cast<uint64_t>(piece.rows * piece.columns);
  const bool direct = !n.attrs.split_columns && piece.rows * comm.size() == n.attrs.whole_extent;
  comm.all_gather(x.in(0), direct ? x.out(0) : cuda.workspace, count, x.in_value(0).dtype, *groups.stream);
  if (direct) return;
  if (n.attrs.split_columns) {
    copy_columns(x.out(0), cuda.workspace, piece, n.attrs.whole_extent, comm.size(), elem, true, cuda.stream);
  } else {
    SPW_CUDA(cudaMemcpyAsync(x.out(0), cuda.workspace, x.out_value(0).bytes(), cudaMemcpyDeviceToDevice,
                             cuda.stream));
  }
}

void cuda_reduce_scatter(const Graph& g, const Node& n, const std::vector<void*>& data, CudaOpContext& cuda) {
  const Operands x(g, n, data);
  const CollectiveGroups& groups = groups_of(n, cuda);
  Communicator& comm = groups.of(n);
  const Matrix piece = matrix_of(x.out_shape(0));
  const size_t elem = dtype_size(x.in_value(0).dtype);
  const uint64_t count = static_cast<uint64_t>(piece.rows * piece.columns);
  const bool direct = !n.attrs.split_columns && piece.rows * comm.size() == n.attrs.whole_extent;
  if (!direct) {
    SPW_CUDA(cudaMemsetAsync(cuda.workspace, 0, count * comm.size() * elem, cuda.stream));
    if (n.attrs.split_columns) {
      copy_columns(x.in(0), cuda.workspace, piece, n.attrs.whole_extent, comm.size(), elem, false, cuda.stream);
    } else {
      SPW_CUDA(cudaMemcpyAsync(cuda.workspace, x.in(0), x.in_value(0).bytes(), cudaMemcpyDeviceToDevice,
                               cuda.stream));
    }
  }
  comm.reduce_scatter_sum(direct ? x.in(0) : cuda.workspace, x.out(0), count, x.in_value(0).dtype, *groups.stream);
}
#endif

// Its operands through device memory, and a ring's bytes over the links.
graph::OpCost collective_cost(const Graph& g, const Node& n) {
  graph::OpCost c = graph::memory_bound(g, n);
  c.rate = graph::RateClass::link;
  const Collective op = n.kind == OpKind::all_reduce   ? Collective::all_reduce
                        : n.kind == OpKind::all_gather ? Collective::all_gather
                                                       : Collective::reduce_scatter;
  const graph::Value whole = n.kind == OpKind::reduce_scatter ? n.inputs[0] : n.outputs[0];
  c.link_bytes = ring_bytes_sent(op, static_cast<double>(g.value(whole).bytes()), std::max(1, n.attrs.ranks));
  return c;
}

graph::NodeAttrs collective_attrs(int group, int ranks, bool split_columns, int64_t whole_extent) {
  graph::NodeAttrs a;
  a.group = static_cast<int8_t>(group);
  a.ranks = ranks;
  a.split_columns = split_columns;
  a.whole_extent = whole_extent;
  return a;
}

}  // namespace

graph::Value all_reduce(graph::Builder& b, graph::Value x, int group, int ranks, std::string_view name) {
  const graph::ValueInfo& xi = b.info(x);
  return b.emit(OpKind::all_reduce, name, {x}, {{xi.shape, xi.dtype, ""}},
                collective_attrs(group, ranks, false, 0))[0];
}

graph::Value all_gather(graph::Builder& b, graph::Value piece, int group, int ranks, bool split_columns,
                        Shape whole_shape, std::string_view name) {
  const graph::ValueInfo pi = b.info(piece);
  const std::string label = b.label(OpKind::all_gather, name);
  const Matrix p = matrix_of(pi.shape), w = matrix_of(whole_shape);
  SPW_CHECK(split_columns ? p.rows == w.rows : p.columns == w.columns, label, "piece ", pi.shape.str(),
            " and whole ", whole_shape.str(), " differ in the dimension not split");
  const int64_t extent = split_columns ? w.columns : w.rows;
  return b.emit(OpKind::all_gather, name, {piece}, {{std::move(whole_shape), pi.dtype, ""}},
                collective_attrs(group, ranks, split_columns, extent))[0];
}

graph::Value reduce_scatter(graph::Builder& b, graph::Value x, int group, int ranks, bool split_columns,
                            Shape piece_shape, std::string_view name) {
  const graph::ValueInfo xi = b.info(x);
  const std::string label = b.label(OpKind::reduce_scatter, name);
  const Matrix p = matrix_of(piece_shape), w = matrix_of(xi.shape);
  SPW_CHECK(split_columns ? p.rows == w.rows : p.columns == w.columns, label, "piece ", piece_shape.str(),
            " and whole ", xi.shape.str(), " differ in the dimension not split");
  const int64_t extent = split_columns ? w.columns : w.rows;
  return b.emit(OpKind::reduce_scatter, name, {x}, {{std::move(piece_shape), xi.dtype, ""}},
                collective_attrs(group, ranks, split_columns, extent))[0];
}

constinit const graph::OpDef all_reduce_def{
    .backward = all_reduce_vjp,
    .cost = collective_cost,
    .in_place_input = first_input,
    .shard = collective_shard,
    .cpu_collective = cpu_all_reduce,
#ifdef SPILLWAY_HAS_CUDA
    .cuda = cuda_all_reduce,
#endif
};

constinit const graph::OpDef all_gather_def{
    .backward = all_gather_vjp,
    .cost = collective_cost,
    .shard = collective_shard,
    .cpu_collective = cpu_all_gather,
#ifdef SPILLWAY_HAS_CUDA
    .cuda_prepare = prepare_pieces,
    .cuda = cuda_all_gather,
#endif
};

constinit const graph::OpDef reduce_scatter_def{
    .backward = reduce_scatter_vjp,
    .cost = collective_cost,
    .shard = collective_shard,
    .cpu_collective = cpu_reduce_scatter,
#ifdef SPILLWAY_HAS_CUDA
    .cuda_prepare = prepare_pieces,
    .cuda = cuda_reduce_scatter,
#endif
};

}  // namespace spillway::ops
