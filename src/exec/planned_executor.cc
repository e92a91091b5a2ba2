#include "exec/planned_executor.h"

#include "base/log.h"
#include "base/status.h"

namespace spillway::exec {

using graph::Value;
using graph::ValueRole;

namespace {

const void* planned_data(const graph::Graph& g, Value v, const std::vector<void*>& bound,
                         const std::vector<void*>& on_host, const std::vector<void*>& on_device) {
  const auto id = static_cast<size_t>(v.id);
  if (g.value(v).accumulated) return bound[id];
  const void* p = on_host[id] ? on_host[id] : on_device[id];
  SPW_CHECK(p, g.value(v).name, "holds no data now (not an output of the last step)");
  return p;
}

}  // namespace

PlannedExecutor::PlannedExecutor(const graph::Graph& graph, plan::Placement placement, Device& device,
                                         MemorySpace& pinned_host, NodeRunner& runner)
    : graph_(graph),
      placement_(std::move(placement)),
      device_(device),
      device_memory_(device.device_memory()),
      host_(pinned_host),
      runner_(runner),
      compute_(device.stream(StreamKind::compute)),
      h2d_(device.stream(StreamKind::h2d)),
      d2h_(device.stream(StreamKind::d2h)) {
  const size_t n = graph.values().size();
  SPW_CHECK(placement_.nodes.size() == graph.nodes().size(), "planned executor", "placement for ",
            placement_.nodes.size(), " nodes, the graph has ", graph.nodes().size());
  bound_.assign(n, nullptr);
  on_device_.assign(n, nullptr);
  planned_.assign(n, nullptr);
  on_host_.assign(n, nullptr);
  loaded_.resize(n);
  stored_.resize(n);
  load_pending_.assign(n, false);
  store_pending_.assign(n, false);
  progress_.resize(graph.nodes().size());
  made_.resize(graph.nodes().size());
  for (size_t i = 0; i < placement_.nodes.size(); ++i) {
    const auto& act = placement_.nodes[i];
    if (!act.load.empty()) progress_[i] = device.new_event();
    if (!act.store.empty()) made_[i] = device.new_event();
    for (Value v : act.load) {
      if (!loaded_[static_cast<size_t>(v.id)]) loaded_[static_cast<size_t>(v.id)] = device.new_event();
    }
    for (Value v : act.store) stored_[static_cast<size_t>(v.id)] = device.new_event();
  }
  d2h_done_ = device.new_event();
}

PlannedExecutor::~PlannedExecutor() {
  device_.synchronize_at_end("planned executor");
  release_all();
}

void PlannedExecutor::bind(Value v, void* data) {
  check_bindable(v);
  bound_[static_cast<size_t>(v.id)] = data;
  if (placement_.resident[static_cast<size_t>(v.id)]) on_device_[static_cast<size_t>(v.id)] = data;
}

void PlannedExecutor::release_all() {
  for (size_t v = 0; v < planned_.size(); ++v) {
    if (planned_[v]) device_memory_.free(planned_[v]);
    if (on_host_[v]) host_.free(on_host_[v]);
    planned_[v] = on_host_[v] = nullptr;
    if (!placement_.resident[v]) on_device_[v] = nullptr;
    load_pending_[v] = store_pending_[v] = false;
  }
  released_load_ = nullptr;
}

Event& PlannedExecutor::timing_event() {
  if (events_used_ == events_.size()) events_.push_back(device_.new_event(/*timed=*/true));
  return *events_[events_used_++];
}

void PlannedExecutor::run() {
  // The caller synchronized after the previous step: its host copies and
  // device outputs are free to go.
  release_all();
  check_all_bound(bound_);
  const auto& values = graph_.values();
  events_used_ = 0;
  marks_.clear();
  auto begin_mark = [&](Stream& s) -> size_t {
    if (!timing_) return 0;
    s.record(timing_event());
    return events_used_ - 1;
  };
  auto end_mark = [&](Stream& s, StreamKind kind, size_t begin, std::string label) {
    if (!timing_) return;
    s.record(timing_event());
    marks_.push_back({kind, begin, events_used_ - 1, std::move(label)});
  };
  if (timing_) {
    Event& start = timing_event();  // events_[0]: the start of the step
    compute_.record(start);
    h2d_.wait(start);
    d2h_.wait(start);
  }

  const auto& nodes = graph_.nodes();
  try {
    for (size_t i = 0; i < nodes.size(); ++i) {
      const plan::NodeActions& act = placement_.nodes[i];
      if (!act.load.empty()) {
        compute_.record(*progress_[i]);
        h2d_.wait(*progress_[i]);
      }
      for (Value v : act.load) {
        const auto id = static_cast<size_t>(v.id);
        const auto& info = values[id];
        const void* source = info.role == ValueRole::computed && !info.accumulated ? on_host_[id] : bound_[id];
        SPW_CHECK(source, info.name, "has no host copy to load from");
        planned_[id] = on_device_[id] = device_memory_.allocate(info.bytes(), info.name);
        const size_t m = begin_mark(h2d_);
        if (info.accumulated && accumulators_zero_) {
          device_.zero_async(planned_[id], info.bytes(), h2d_);  // a new sum: nothing to fetch
        } else {
          device_.copy_async(planned_[id], source, info.bytes(), h2d_);
        }
        end_mark(h2d_, StreamKind::h2d, m, "load " + info.name);
        h2d_.record(*loaded_[id]);
        load_pending_[id] = true;
      }
      for (Value v : act.allocate) {
        const auto id = static_cast<size_t>(v.id);
        const auto& info = values[id];
        planned_[id] = on_device_[id] = device_memory_.allocate(info.bytes(), info.name);
      }
      const graph::Node& node = nodes[i];
      for (const auto* list : {&node.inputs, &node.outputs}) {
        for (Value v : *list) {
          const auto id = static_cast<size_t>(v.id);
          if (!load_pending_[id]) continue;
          compute_.wait(*loaded_[id]);
          load_pending_[id] = false;
        }
      }
      const size_t m = begin_mark(compute_);
      runner_.run(graph_, node, on_device_);
      end_mark(compute_, StreamKind::compute, m, std::string(graph::op_name(node.kind)) + " " + node.name);
      if (!act.store.empty()) {
        if (before_store_) {
          for (Value v : act.store) {
            if (values[static_cast<size_t>(v.id)].accumulated) {
              before_store_(v, on_device_[static_cast<size_t>(v.id)], compute_);
            }
          }
        }
        compute_.record(*made_[i]);
        d2h_.wait(*made_[i]);
        if (released_load_) d2h_.wait(*released_load_);
      }
      for (Value v : act.store) {
        const auto id = static_cast<size_t>(v.id);
        const auto& info = values[id];
        // An accumulated value's home is the caller's buffer; others get a copy.
        void* home = info.accumulated ? bound_[id] : (on_host_[id] = host_.allocate(info.bytes(), info.name + " (host copy)"));
        const size_t mk = begin_mark(d2h_);
        device_.copy_async(home, on_device_[id], info.bytes(), d2h_);
        end_mark(d2h_, StreamKind::d2h, mk, "store " + info.name);
        d2h_.record(*stored_[id]);
        store_pending_[id] = true;
      }
      for (Value v : act.drop) {
        const auto id = static_cast<size_t>(v.id);
        if (store_pending_[id]) {
          compute_.wait(*stored_[id]);
          store_pending_[id] = false;
        }
        device_memory_.free(planned_[id]);
        planned_[id] = on_device_[id] = nullptr;
      }
      for (Value v : act.release_host) {
        const auto id = static_cast<size_t>(v.id);
        host_.free(on_host_[id]);
        on_host_[id] = nullptr;
        released_load_ = loaded_[id].get();
      }
    }
    // The step ends on the compute stream only when its stores are done.
    d2h_.record(*d2h_done_);
    compute_.wait(*d2h_done_);
  } catch (...) {
    try {
      device_.synchronize();
    } catch (const std::exception& e) {
      log_warn(std::string("planned executor: a stream also failed while a step was abandoned: ") + e.what());
    }
    release_all();
    throw;
  }
}

const void* PlannedExecutor::data(Value v) const {
  return planned_data(graph_, v, bound_, on_host_, on_device_);
}

std::vector<StreamInterval> PlannedExecutor::timeline() const {
  std::vector<StreamInterval> out;
  for (const Mark& m : marks_) {
    out.push_back({m.stream, events_[m.begin]->seconds_since(*events_[0]), events_[m.end]->seconds_since(*events_[0]),
                   m.label});
  }
  return out;
}

}  // namespace spillway::exec
