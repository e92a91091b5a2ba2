// embedding's definition: the lookup, and the scatter-add backward that can
// start from a base (a tied lm_head's gradient, graph/fuse_embedding_add.h).
#include "ops/embedding_op.h"

#include "ops/embedding.h"
#include "ops/op_definition.h"

namespace spillway::ops {

namespace {

void embedding_vjp(graph::Vjp& vjp, const Node& n, graph::Value dout) {
  const graph::Value table = n.inputs[0];
  vjp.add(table, embedding_backward(vjp.b, n.inputs[1], dout, vjp.b.info(table).shape[0], graph::backward_name(n),
                                    n.attrs.first_row, n.attrs.table_rows));
}

// Vocabulary parallelism: a table split by rows gives each rank the rows it
// holds of every token, zeros for the others': a part of the sum.
void embedding_shard(Sharder& s, const Node& n) {
  const graph::Value table = n.inputs[0];
  if (s.placement(table) != Placement::rows) return s.whole(n);
  const graph::Value piece = s.as(table, Placement::rows);
  embedding(s.b, piece, s.as(n.inputs[1], Placement::whole), n.name, s.first_of(s.g.value(table).shape[0]),
            s.g.value(table).shape[0]);
  s.define(n, Placement::partial);
}

int dtable_accumulates(const Node&) { return 0; }

template <typename T>
void cpu_embedding(const Operands& x) {
  const Shape& table = x.in_shape(0);
  embedding_forward(x.in<const int32_t>(1), x.in<T>(0), x.out<T>(0), x.in_shape(1).numel(), table[0], table[1],
                    x.attrs().first_row, x.attrs().table_rows);
}

template <typename T>
void cpu_embedding_backward(const Operands& x) {
  const Shape& dtable = x.out_shape(0);
  const T* base = x.attrs().fused == Fused::addend ? x.in<T>(2) : nullptr;
  embedding_backward(x.in<const int32_t>(0), x.in<T>(1), x.out<T>(0), x.in_shape(0).numel(), dtable[0], dtable[1],
                     x.attrs().accumulate, base, x.attrs().first_row, x.attrs().table_rows);
}

#ifdef SPILLWAY_HAS_CUDA
void cuda_embedding(const Graph& g, const Node& n, const std::vector<void*>& data, CudaOpContext& cuda) {
  const Operands x(g, n, data);
  const Shape& table = x.in_shape(0);
  embedding_forward_cuda(x.in<const int32_t>(1), x.in<bf16>(0), x.out<bf16>(0), x.in_shape(1).numel(), table[0],
                         table[1], cuda.stream, n.attrs.first_row);
}

// Also finds a tied embedding's gradient (CudaOpContext::tied_scatter): an
// accumulated dtable whose base is a plain product read by nothing else.
uint64_t prepare_embedding_backward(const Graph& g, const Node& n, CudaOpContext& cuda) {
  if (n.attrs.fused == Fused::addend && g.is_accumulated(n.outputs[0])) {
    const graph::Value base = n.inputs[2];
    const int32_t p = g.value(base).producer;
    if (p >= 0 && graph::reader_counts(g)[static_cast<size_t>(base.id)] == 1 && !g.is_output(base)) {
      const Node& product = g.nodes()[static_cast<size_t>(p)];
      if (graph::is_plain_product(g, product)) {
        cuda.tied_scatter[&product] = &n;
        cuda.tied_scatter[&n] = &n;
      }
    }
  }
  return embedding_backward_workspace_bytes(g.value(n.inputs[0]).shape.numel(), g.value(n.outputs[0]).shape[0]);
}

// When the base's product was written into dtable already, the rows are
// added there.
void cuda_embedding_backward(const Graph& g, const Node& n, const std::vector<void*>& data, CudaOpContext& cuda) {
  const Operands x(g, n, data);
  const Shape& dtable = x.out_shape(0);
  const bool base_in_place = cuda.tied_in_place(n) != nullptr;
  const float* base = n.attrs.fused == Fused::addend && !base_in_place ? x.in<float>(2) : nullptr;
  embedding_backward_cuda(x.in<const int32_t>(0), x.in<bf16>(1), x.out<float>(0), x.in_shape(0).numel(), dtable[0],
                          dtable[1], cuda.workspace, cuda.stream, cuda.accumulate(n) || base_in_place, base,
                          n.attrs.first_row);
}
#endif

}  // namespace

namespace {

graph::NodeAttrs table_piece(int64_t first_row, int64_t table_rows) {
  graph::NodeAttrs attrs;
  attrs.first_row = first_row;
  attrs.table_rows = table_rows;
  return attrs;
}

}  // namespace

graph::Value embedding(graph::Builder& b, graph::Value table, graph::Value ids, std::string_view name,
                       int64_t first_row, int64_t table_rows) {
  const graph::ValueInfo& t = b.info(table);
  const graph::ValueInfo& i = b.info(ids);
  const std::string label = b.label(OpKind::embedding, name);
  SPW_CHECK(t.shape.rank() == 2, label, "table must be [vocab, dim], got ", t.shape.str());
  SPW_CHECK(i.dtype == DType::i32, label, "ids must be i32, got ", dtype_name(i.dtype));
  SPW_CHECK(table_rows == 0 || (first_row >= 0 && first_row < table_rows + t.shape[0]), label, "rows from ",
            first_row, " of a table of ", table_rows);
  std::vector<int64_t> dims = i.shape.dims();
  dims.push_back(t.shape[1]);
  return b.emit(OpKind::embedding, name, {table, ids}, {{Shape(dims), t.dtype, ""}},
                table_piece(first_row, table_rows))[0];
}

graph::Value embedding_backward(graph::Builder& b, graph::Value ids, graph::Value dout, int64_t vocab,
                                std::string_view name, int64_t first_row, int64_t table_rows) {
  const graph::ValueInfo& di = b.info(dout);
  return b.emit(OpKind::embedding_backward, name, {ids, dout},
                {{Shape{vocab, di.shape.last()}, graph::accumulation_dtype(di.dtype), ""}},
                table_piece(first_row, table_rows))[0];
}

constinit const graph::OpDef embedding_def{
    .backward = embedding_vjp,
    .cost = graph::memory_bound,
    .shard = embedding_shard,
    .cpu = on_cpu<cpu_embedding<float>, cpu_embedding<double>>,
#ifdef SPILLWAY_HAS_CUDA
    .cuda = cuda_embedding,
#endif
};

constinit const graph::OpDef embedding_backward_def{
    .cost = graph::memory_bound,
    .accumulating_output = dtable_accumulates,
    .fused_forms = graph::fused_bit(Fused::addend),
    .cpu = on_cpu<cpu_embedding_backward<float>, cpu_embedding_backward<double>>,
#ifdef SPILLWAY_HAS_CUDA
    .cuda_prepare = prepare_embedding_backward,
    .cuda = cuda_embedding_backward,
#endif
};

}  // namespace spillway::ops
