#include "exec/planned_executor.h"

#include "base/status.h"

namespace spillway::exec {

using graph::Value;
using graph::ValueRole;

PlannedExecutor::PlannedExecutor(const graph::Graph& graph, plan::Placement placement, MemorySpace& device,
                                 MemorySpace& host, NodeRunner& runner, CopyFn copy)
    : graph_(graph),
      placement_(std::move(placement)),
      device_(device),
      host_(host),
      runner_(runner),
      copy_(std::move(copy)),
      bound_(graph.values().size(), nullptr),
      on_device_(graph.values().size(), nullptr),
      on_host_(graph.values().size(), nullptr) {}

PlannedExecutor::~PlannedExecutor() { release_all(); }

void check_bindable(const graph::Graph& g, Value v) {
  const auto& info = g.value(v);
  SPW_CHECK(info.role != ValueRole::computed || info.accumulated, info.name,
            "only inputs, parameters and accumulated values are bound; computed values belong to the executor");
}

void check_all_bound(const graph::Graph& g, const std::vector<void*>& bound) {
  const auto& values = g.values();
  for (size_t v = 0; v < values.size(); ++v) {
    SPW_CHECK(values[v].role == ValueRole::computed || bound[v], values[v].name,
              "input or parameter was not bound before the step");
    SPW_CHECK(!values[v].accumulated || bound[v], values[v].name,
              "accumulated value was not bound to the caller's buffer before the step");
  }
}

const void* planned_data(const graph::Graph& g, Value v, const std::vector<void*>& bound,
                         const std::vector<void*>& on_host, const std::vector<void*>& on_device) {
  const auto id = static_cast<size_t>(v.id);
  if (g.value(v).accumulated) return bound[id];
  const void* p = on_host[id] ? on_host[id] : on_device[id];
  SPW_CHECK(p, g.value(v).name, "holds no data now (not an output of the last step)");
  return p;
}

void PlannedExecutor::bind(Value v, void* data) {
  check_bindable(graph_, v);
  bound_[static_cast<size_t>(v.id)] = data;
}

void PlannedExecutor::release_all() {
  for (size_t v = 0; v < on_device_.size(); ++v) {
    if (on_device_[v]) device_.free(on_device_[v]);
    if (on_host_[v]) host_.free(on_host_[v]);
    on_device_[v] = on_host_[v] = nullptr;
  }
}

void PlannedExecutor::run() {
  release_all();  // the previous step's outputs
  check_all_bound(graph_, bound_);
  const auto& values = graph_.values();
  try {
    for (size_t i = 0; i < graph_.nodes().size(); ++i) {
      const plan::NodeActions& act = placement_.nodes[i];
      for (Value v : act.load) {
        const auto id = static_cast<size_t>(v.id);
        const auto& info = values[id];
        const void* source = info.role == ValueRole::computed && !info.accumulated ? on_host_[id] : bound_[id];
        on_device_[id] = device_.allocate(info.bytes(), info.name);
        copy_(on_device_[id], source, info.bytes());
      }
      for (Value v : act.allocate) {
        const auto id = static_cast<size_t>(v.id);
        const auto& info = values[id];
        on_device_[id] = device_.allocate(info.bytes(), info.name);
        // Its producer adds to the running sum, which comes from the caller.
        if (info.accumulated) copy_(on_device_[id], bound_[id], info.bytes());
      }
      runner_.run(graph_, graph_.nodes()[i], on_device_);
      for (Value v : act.store) {
        const auto id = static_cast<size_t>(v.id);
        if (values[id].accumulated) {  // home is the caller's buffer
          copy_(bound_[id], on_device_[id], values[id].bytes());
          continue;
        }
        on_host_[id] = host_.allocate(values[id].bytes(), values[id].name);
        copy_(on_host_[id], on_device_[id], values[id].bytes());
      }
      for (Value v : act.drop) {
        device_.free(on_device_[static_cast<size_t>(v.id)]);
        on_device_[static_cast<size_t>(v.id)] = nullptr;
      }
      for (Value v : act.release_host) {
        if (values[static_cast<size_t>(v.id)].accumulated) continue;
        host_.free(on_host_[static_cast<size_t>(v.id)]);
        on_host_[static_cast<size_t>(v.id)] = nullptr;
      }
    }
  } catch (...) {
    release_all();
    throw;
  }
}

const void* PlannedExecutor::data(Value v) const { return planned_data(graph_, v, bound_, on_host_, on_device_); }

}  // namespace spillway::exec
