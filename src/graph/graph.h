// The dataflow IR of one training step: values (tensors with a shape, a dtype
// and one producer) and nodes (op calls). Nodes are stored in the order they
// were built, which is always a valid execution order: a node can only name
// values that already exist.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/dtype.h"
#include "base/shape.h"

namespace spillway::graph {

enum class OpKind : uint8_t {
#define SPW_OP(kind) kind,
#include "graph/op_list.h"
#undef SPW_OP
};
inline constexpr int kOpKinds = 0
#define SPW_OP(kind) +1
#include "graph/op_list.h"
#undef SPW_OP
    ;
std::string_view op_name(OpKind kind);

// The fused form of a node: what a fusion pass (graph/fuse_*.h) folded into
// it, named so that runners, the cost model and liveness read it instead of
// inferring it from how many inputs and outputs the node has. An op lists
// the forms it runs (graph::OpDef::fused_forms); a node has one at most.
enum class Fused : uint8_t {
  none,
  // One more, last, input added to the result (graph/fold_add.h): matmul's
  // out = a·b + addend, rmsnorm_backward's dx + addend, embedding_backward's
  // dtable = base + scatter.
  addend,
  // matmul: a second output, swiglu_packed of the product (graph/fuse_matmul_swiglu.h).
  swiglu_gate,
  // matmul: the product is the gradient of a packed swiglu's output, folded
  // into that swiglu's backward (graph/fuse_matmul_swiglu.h): a third input
  // is the forward's gate|up, and the one output is d(gate|up).
  swiglu_backward,
  // matmul: the product rotated by the rope that was its only reader
  // (graph/fuse_matmul_rope.h): heads, rotated_heads, pos0 and inv_freq are
  // that rope's, and the one output is the rotated product.
  rope,
  // cross_entropy: a third output, dlogits, scaled by NodeAttrs::dloss
  // (graph/fuse_loss_gradient.h).
  loss_gradient,
};
inline constexpr int kFusedForms = static_cast<int>(Fused::loss_gradient) + 1;
std::string_view fused_name(Fused fused);

// Handle to a value of a graph. Cheap to copy; meaningful only with its graph.
struct Value {
  int32_t id = -1;
  bool valid() const { return id >= 0; }
  bool operator==(const Value&) const = default;
};

enum class ValueRole : uint8_t {
  input,      // fed by the caller each step (token ids, targets)
  parameter,  // a trainable weight, owned by the caller
  computed,   // produced by a node
};

struct ValueInfo {
  std::string name;
  Shape shape;
  DType dtype = DType::f32;
  ValueRole role = ValueRole::computed;
  int32_t producer = -1;  // node index, -1 for inputs and parameters
  // Accumulated into caller memory (Graph::mark_accumulated): the caller
  // binds its buffer, and the producer adds its result to what is there.
  bool accumulated = false;
  uint64_t bytes() const { return static_cast<uint64_t>(shape.numel()) * dtype_size(dtype); }
};

// Everything any op needs besides its tensors. Each op reads the fields its
// contract names and ignores the rest.
struct NodeAttrs {
  bool trans_a = false, trans_b = false;  // matmul
  double eps = 0;                         // rmsnorm
  double scale = 0;                       // attention
  double fill_value = 0;                  // fill
  // cross_entropy with Fused::loss_gradient: the loss's gradient, the
  // constant its seed fill held.
  double dloss = 0;
  // linear_cross_entropy: the rows the logits are made of at a time.
  int64_t chunk_rows = 0;
  int64_t heads = 0, kv_heads = 0;        // rope (heads), attention (both)
  int64_t pos0 = 0;                       // rope: position of the first token
  // dropout (ops/dropout.h): the probability of dropping an element, and
  // the node's salt, which tells its draws from other nodes'.
  double dropout = 0;
  uint32_t salt = 0;
  // rope: only the first rotated_heads of `heads` are rotated, the rest
  // copied (0: all). A fused q|k|v projection's output ropes q and k, carries v.
  int64_t rotated_heads = 0;
  // One packed input instead of several, and one packed gradient of its
  // shape in the backward: attention's q, k and v as one [batch, seq,
  // (heads + 2 kv_heads) * head_dim] (the fused q|k|v projection's output,
  // roped); swiglu's gate and up as one [..., 2 * ffn], each row's gate first.
  bool packed = false;
  // The node adds its result into the existing contents of its accumulating
  // output (out += result) instead of overwriting it: which output that is,
  // if any, the op's definition says (graph::OpDef::accumulating_output).
  // Set by mark_accumulated.
  bool accumulate = false;
  Fused fused = Fused::none;
  std::shared_ptr<const std::vector<float>> inv_freq;  // rope, and a matmul with Fused::rope
  // Collectives (ops/collective_op.h): the dimension of the rank grid whose
  // group they span (dist::Dim's value). all_gather and reduce_scatter split
  // the value, viewed as [rows, columns] (every dimension but the last
  // flattened into rows), by its columns or by its rows; whole_extent is
  // the split dimension's whole length, of which each rank holds
  // ceil(whole_extent / ranks), the last ones padded with zeros.
  int8_t group = -1;
  int32_t ranks = 0;  // the group's size: what the planner prices (the communicator's at run time)
  bool split_columns = false;
  int64_t whole_extent = 0;
  // embedding, embedding_backward over a table split by rows (vocabulary
  // parallelism): the node's table holds rows [first_row, first_row + its
  // rows) of a table of table_rows rows; ids must lie in [0, table_rows),
  // and ids outside the node's rows give zeros (nothing, backward).
  // table_rows 0: the table is whole. take_rows: the first row taken.
  int64_t first_row = 0, table_rows = 0;
};

struct Node {
  OpKind kind;
  std::string name;  // scope path, e.g. "layers.0.attn.q_proj"
  std::vector<Value> inputs;
  std::vector<Value> outputs;
  NodeAttrs attrs;
  bool backward = false;  // emitted by autodiff
  bool recompute = false;  // a clone of a forward node, re-run in the backward pass (graph/recompute.h)
};

// "matmul 'layers.0.self_attn.q_proj'": how errors and logs name a node.
std::string node_label(const Node& n);

class Graph;
// How many node inputs read each value, by value id.
std::vector<int> reader_counts(const Graph& g);
// A matmul that overwrites its one output with the product and nothing else
// (no fused form, no accumulation): what a fusion into the product's
// epilogue can start from.
bool is_plain_product(const Graph& g, const Node& n);

// The input whose buffer output `output` of `node` may take over when that
// input dies at the node, or -1 (graph::OpDef::in_place_input).
int in_place_input(const Node& node, size_t output);

// A graph with g's values (the same ids, producers cleared) and outputs but
// no nodes: a transform re-adds the nodes it keeps, which sets each value's
// producer again.
Graph values_of(const Graph& g);

class Graph {
 public:
  Value add_value(ValueInfo info);
  int32_t add_node(Node node);  // sets each output's producer

  const ValueInfo& value(Value v) const { return values_.at(static_cast<size_t>(v.id)); }
  const std::vector<ValueInfo>& values() const { return values_; }
  const std::vector<Node>& nodes() const { return nodes_; }

  // Values the caller reads after a step (loss, gradients): they stay alive
  // to the end of the step.
  void mark_output(Value v);
  const std::vector<Value>& outputs() const { return outputs_; }
  bool is_output(Value v) const;

  // Makes `v` a value accumulated into caller memory: the caller binds a
  // buffer to it (StepProgram::bind) and zeroes it when a new sum starts;
  // executors never allocate or free it, and its producer adds its result to
  // the buffer's contents (out += result) every step. `v` becomes a graph
  // output. Only an output that can accumulate (see NodeAttrs::accumulate)
  // and that no node reads can be marked; afterwards no node may read it
  // either (it holds a running sum, not this step's result).
  void mark_accumulated(Value v);
  bool is_accumulated(Value v) const { return value(v).accumulated; }
  // Whether mark_accumulated(v) would accept v.
  bool can_accumulate(Value v) const;
  // Throws, naming the node, when one of `inputs` is an accumulated value.
  void check_reads(std::string_view node_name, const std::vector<Value>& inputs) const;

  std::vector<Value> parameters() const;
  Value find(std::string_view name) const;  // invalid when absent

  std::string str() const;  // one line per node, for debugging and `plan`

 private:
  std::vector<ValueInfo> values_;
  std::vector<Node> nodes_;
  std::vector<Value> outputs_;
};

}  // namespace spillway::graph
