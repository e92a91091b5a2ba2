// What the generic parts of spillway know about an op: one OpDef per OpKind
// (graph/op_list.h), defined beside the op's kernels in
// src/ops/<family>_op.cc together with the functions that build its nodes
// and check their shapes. Autodiff, recomputation, liveness, the cost model
// and both runners look an op up here instead of switching on its kind, so
// an op is declared in one place.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace spillway::ops {
// What the CUDA hooks share while a graph runs on one stream
// (ops/cuda_op_context.h); graph/ only passes it along.
struct CudaOpContext;
// The communicators a run's collectives use (ops/collective_groups.h).
struct CollectiveGroups;
}  // namespace spillway::ops

namespace spillway::graph {

class Builder;
class Sharder;

// Which of the machine's rates bounds an op's compute (plan::MachineRates).
enum class RateClass : uint8_t {
  memory,  // no compute worth a rate: its bytes over memory bandwidth
  gemm,
  attention,
  attention_head_dim_64,  // fused attention at head dim 64 or less: less work per load
  link,                   // a collective: `link_bytes` sent to the group's other ranks
};

struct OpCost {
  double flops = 0;  // model FLOPs
  double bytes = 0;  // device bytes read and written
  RateClass rate = RateClass::memory;
  double link_bytes = 0;  // a collective's bytes each rank sends (device/communicator.h's ring_bytes_sent)
};
// Every input and output read or written once.
double operand_bytes(const Graph& g, const Node& n);
// The cost of an op bound by memory: its operands' bytes, no FLOPs.
OpCost memory_bound(const Graph& g, const Node& n);

// The gradient being built, as a backward rule sees it. `b` emits the
// backward nodes (already marked as such).
class Vjp {
 public:
  explicit Vjp(Builder& builder) : b(builder) {}
  Builder& b;
  // Whether some value the gradient was asked for depends on v: a rule
  // skips the work for inputs that need no gradient.
  virtual bool needs(Value v) const = 0;
  // Adds `gradient` into v's gradient, summing when v feeds several nodes.
  virtual void add(Value v, Value gradient) = 0;

 protected:
  ~Vjp() = default;
};

// What backward rules name the nodes they emit: "<forward's name>.backward".
std::string backward_name(const Node& forward);

constexpr uint32_t fused_bit(Fused f) { return 1u << static_cast<int>(f); }

struct OpDef {
  // --- the graph -----------------------------------------------------------
  // The vector-Jacobian product: from dout, the gradient of the node's first
  // output, the gradient of each input that needs one, through vjp.add.
  // nullptr: autodiff refuses the op (the backward ops have none).
  void (*backward)(Vjp& vjp, const Node& forward, Value dout) = nullptr;
  OpCost (*cost)(const Graph& g, const Node& n) = nullptr;
  // The op's output costs about as much to remake as to read back
  // (elementwise, or one reduction per row): the selective recompute policy
  // drops it inside a layer (graph/recompute.h).
  bool cheap_to_recompute = false;
  // The input whose buffer output `output` may take over when that input
  // dies at the node (graph/liveness.h), or -1. Only where every backend
  // reads each element of the input before writing the same element of the
  // output, in the same thread. nullptr: never.
  int (*in_place_input)(const Node& n, size_t output) = nullptr;
  // The output that can add into caller memory (Graph::mark_accumulated,
  // NodeAttrs::accumulate) instead of overwriting it, or -1. nullptr: none.
  int (*accumulating_output)(const Node& n) = nullptr;
  // The fused forms the op's kernels run besides Fused::none, as fused_bit()s.
  uint32_t fused_forms = 0;
  // Tensor parallelism (graph/tensor_parallel.h): emits the node into a
  // rank's graph from how its inputs are placed there. nullptr: the node
  // runs on whole inputs, as on one device.
  void (*shard)(Sharder& s, const Node& n) = nullptr;

  // --- the kernels ---------------------------------------------------------
  // Runs the node on the CPU; data[v] is the memory of value id v.
  void (*cpu)(const Graph& g, const Node& n, const std::vector<void*>& data) = nullptr;
  // A collective's instead of `cpu`: runs it with the run's communicators.
  void (*cpu_collective)(const Graph& g, const Node& n, const std::vector<void*>& data,
                         const ops::CollectiveGroups& groups) = nullptr;
  // Once, before any node runs: chooses the node's algorithm (recorded in
  // the context) and makes what it needs besides workspace; returns the
  // bytes of the shared workspace the node will use. nullptr: none.
  uint64_t (*cuda_prepare)(const Graph& g, const Node& n, ops::CudaOpContext& cuda) = nullptr;
  // Enqueues the node on the context's stream.
  void (*cuda)(const Graph& g, const Node& n, const std::vector<void*>& data, ops::CudaOpContext& cuda) = nullptr;

  bool runs(Fused f) const { return f == Fused::none || (fused_forms & fused_bit(f)) != 0; }
};

// The registry (ops/op_registry.cc).
const OpDef& op_def(OpKind kind);

}  // namespace spillway::graph
