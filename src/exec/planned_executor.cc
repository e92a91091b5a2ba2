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

void PlannedExecutor::bind(Value v, void* data) {
  const auto& info = graph_.value(v);
  SPW_CHECK(info.role != ValueRole::computed, info.name,
            "only inputs and parameters are bound; computed values belong to the executor");
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
  const auto& values = graph_.values();
  for (size_t v = 0; v < values.size(); ++v) {
    SPW_CHECK(values[v].role == ValueRole::computed || bound_[v], values[v].name,
              "input or parameter was not bound before the step");
  }
  try {
    for (size_t i = 0; i < graph_.nodes().size(); ++i) {
      const plan::NodeActions& act = placement_.nodes[i];
      for (Value v : act.load) {
        const auto id = static_cast<size_t>(v.id);
        const auto& info = values[id];
        const void* source = info.role == ValueRole::computed ? on_host_[id] : bound_[id];
        on_device_[id] = device_.allocate(info.bytes(), info.name);
        copy_(on_device_[id], source, info.bytes());
      }
      for (Value v : act.allocate) {
        const auto& info = values[static_cast<size_t>(v.id)];
        on_device_[static_cast<size_t>(v.id)] = device_.allocate(info.bytes(), info.name);
      }
      runner_.run(graph_, graph_.nodes()[i], on_device_);
      for (Value v : act.store) {
        const auto id = static_cast<size_t>(v.id);
        on_host_[id] = host_.allocate(values[id].bytes(), values[id].name);
        copy_(on_host_[id], on_device_[id], values[id].bytes());
      }
      for (Value v : act.drop) {
        device_.free(on_device_[static_cast<size_t>(v.id)]);
        on_device_[static_cast<size_t>(v.id)] = nullptr;
      }
      for (Value v : act.release_host) {
        host_.free(on_host_[static_cast<size_t>(v.id)]);
        on_host_[static_cast<size_t>(v.id)] = nullptr;
      }
    }
  } catch (...) {
    release_all();
    throw;
  }
}

const void* PlannedExecutor::data(Value v) const {
  const auto id = static_cast<size_t>(v.id);
  const void* p = on_host_[id] ? on_host_[id] : on_device_[id];
  SPW_CHECK(p, graph_.value(v).name, "holds no data now (not an output of the last step)");
  return p;
}

}  // namespace spillway::exec
