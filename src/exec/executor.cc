#include "exec/executor.h"

#include <chrono>
#include <unordered_set>

#include "base/status.h"
#include "exec/run_node_cpu.h"

namespace spillway::exec {

using graph::Value;
using graph::ValueRole;

void CpuNodeRunner::run(const graph::Graph& graph, const graph::Node& node, const std::vector<void*>& data) {
  run_node_cpu(graph, node, data, groups_);
}

Executor::Executor(const graph::Graph& graph, MemorySpace& space, NodeRunner& runner)
    : graph_(graph),
      space_(space),
      runner_(runner),
      liveness_(graph::analyze_liveness(graph, [](uint64_t n) { return MemorySpace::accounted_bytes(n); })),
      data_(graph.values().size(), nullptr) {}

Executor::~Executor() { release_outputs(); }

void StepProgram::check_binding(Value v, uint64_t bytes) const {
  const auto& info = graph().value(v);
  SPW_CHECK(bytes == info.bytes(), info.name, "bound buffer holds ", bytes, " bytes, the value needs ",
            info.bytes(), " (", info.shape.str(), " ", dtype_name(info.dtype), ")");
}

void StepProgram::check_bindable(Value v) const {
  const auto& info = graph().value(v);
  SPW_CHECK(info.role != ValueRole::computed || info.accumulated, info.name,
            "only inputs, parameters and accumulated values are bound; computed values belong to the executor");
}

void StepProgram::check_all_bound(const std::vector<void*>& bound) const {
  const auto& values = graph().values();
  for (size_t v = 0; v < values.size(); ++v) {
    SPW_CHECK(values[v].role == ValueRole::computed || bound[v], values[v].name,
              "input or parameter was not bound before the step");
    SPW_CHECK(!values[v].accumulated || bound[v], values[v].name,
              "accumulated value was not bound to the caller's buffer before the step");
  }
}

void Executor::bind(Value v, void* data) {
  check_bindable(v);
  data_[static_cast<size_t>(v.id)] = data;
}

void Executor::release_outputs() {
  for (Value v : graph_.outputs()) {
    auto& ptr = data_[static_cast<size_t>(v.id)];
    if (liveness_.of[static_cast<size_t>(v.id)].managed && ptr) {
      space_.free(ptr);
      ptr = nullptr;
    }
  }
}

void Executor::run() {
  release_outputs();
  check_all_bound(data_);
  const auto& nodes = graph_.nodes();
  try {
    for (size_t i = 0; i < nodes.size(); ++i) {
      for (Value v : liveness_.born_at[i]) {
        const auto& info = graph_.value(v);
        data_[static_cast<size_t>(v.id)] = space_.allocate(info.bytes(), info.name);
      }
      // The node writes these outputs over inputs that die here; the input
      // keeps its pointer while the node runs, and gives it up after.
      for (const auto& h : liveness_.handed_over_at[i]) {
        data_[static_cast<size_t>(h.to.id)] = data_[static_cast<size_t>(h.from.id)];
      }
      if (before_node_) before_node_(i);
      if (profiling_) {
        runner_.synchronize();
        auto start = std::chrono::steady_clock::now();
        runner_.run(graph_, nodes[i], data_);
        runner_.synchronize();
        node_seconds_.resize(nodes.size());
        node_seconds_[i] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      } else {
        runner_.run(graph_, nodes[i], data_);
      }
      if (after_node_) after_node_(i);
      for (const auto& h : liveness_.handed_over_at[i]) data_[static_cast<size_t>(h.from.id)] = nullptr;
      for (Value v : liveness_.dies_at[i]) {
        space_.free(data_[static_cast<size_t>(v.id)]);
        data_[static_cast<size_t>(v.id)] = nullptr;
      }
    }
  } catch (...) {
    // A failed step leaves nothing of its own allocated; a buffer being
    // handed over is held by two values and freed once.
    std::unordered_set<void*> freed;
    for (size_t v = 0; v < data_.size(); ++v) {
      if (!liveness_.of[v].managed || !data_[v]) continue;
      if (freed.insert(data_[v]).second) space_.free(data_[v]);
      data_[v] = nullptr;
    }
    throw;
  }
}

const void* Executor::data(Value v) const {
  const void* p = data_.at(static_cast<size_t>(v.id));
  SPW_CHECK(p, graph_.value(v).name, "holds no data now (not an output of the last step, or not bound)");
  return p;
}

}  // namespace spillway::exec
