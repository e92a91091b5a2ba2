#include "exec/cuda/cuda_planned_executor.h"

#include "base/status.h"
#include "exec/planned_executor.h"
#include "device/cuda/cuda_check.h"

namespace spillway::exec {

using graph::Value;
using graph::ValueRole;

namespace {

cudaEvent_t new_sync_event() {
  cudaEvent_t e = nullptr;
  SPW_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

}  // namespace

CudaPlannedExecutor::CudaPlannedExecutor(const graph::Graph& graph, plan::Placement placement, MemorySpace& device,
                                         MemorySpace& pinned_host, NodeRunner& runner, cudaStream_t compute,
                                         cudaStream_t h2d, cudaStream_t d2h)
    : graph_(graph),
      placement_(std::move(placement)),
      device_(device),
      host_(pinned_host),
      runner_(runner),
      compute_(compute),
      h2d_(h2d),
      d2h_(d2h) {
  const size_t n = graph.values().size();
  SPW_CHECK(placement_.nodes.size() == graph.nodes().size(), "planned executor", "placement for ",
            placement_.nodes.size(), " nodes, the graph has ", graph.nodes().size());
  bound_.assign(n, nullptr);
  on_device_.assign(n, nullptr);
  planned_.assign(n, nullptr);
  on_host_.assign(n, nullptr);
  loaded_.assign(n, nullptr);
  stored_.assign(n, nullptr);
  load_pending_.assign(n, false);
  store_pending_.assign(n, false);
  progress_.assign(graph.nodes().size(), nullptr);
  made_.assign(graph.nodes().size(), nullptr);
  for (size_t i = 0; i < placement_.nodes.size(); ++i) {
    const auto& act = placement_.nodes[i];
    if (!act.load.empty()) progress_[i] = new_sync_event();
    if (!act.store.empty()) made_[i] = new_sync_event();
    for (Value v : act.load) {
      if (!loaded_[static_cast<size_t>(v.id)]) loaded_[static_cast<size_t>(v.id)] = new_sync_event();
    }
    for (Value v : act.store) stored_[static_cast<size_t>(v.id)] = new_sync_event();
  }
  d2h_done_ = new_sync_event();
}

CudaPlannedExecutor::~CudaPlannedExecutor() {
  SPW_CUDA_WARN(cudaStreamSynchronize(compute_));
  SPW_CUDA_WARN(cudaStreamSynchronize(h2d_));
  SPW_CUDA_WARN(cudaStreamSynchronize(d2h_));
  release_all();
  for (auto* list : {&loaded_, &stored_, &progress_, &made_, &events_}) {
    for (cudaEvent_t e : *list) {
      if (e) SPW_CUDA_WARN(cudaEventDestroy(e));
    }
  }
  SPW_CUDA_WARN(cudaEventDestroy(d2h_done_));
}

void CudaPlannedExecutor::bind(Value v, void* data) {
  check_bindable(graph_, v);
  bound_[static_cast<size_t>(v.id)] = data;
  if (placement_.resident[static_cast<size_t>(v.id)]) on_device_[static_cast<size_t>(v.id)] = data;
}

void CudaPlannedExecutor::release_all() {
  for (size_t v = 0; v < planned_.size(); ++v) {
    if (planned_[v]) device_.free(planned_[v]);
    if (on_host_[v]) host_.free(on_host_[v]);
    planned_[v] = on_host_[v] = nullptr;
    if (!placement_.resident[v]) on_device_[v] = nullptr;
    load_pending_[v] = store_pending_[v] = false;
  }
  released_load_ = nullptr;
}

cudaEvent_t CudaPlannedExecutor::timing_event() {
  if (events_used_ == events_.size()) {
    cudaEvent_t e = nullptr;
    SPW_CUDA(cudaEventCreate(&e));
    events_.push_back(e);
  }
  return events_[events_used_++];
}

void CudaPlannedExecutor::run() {
  // The caller synchronized after the previous step: its host copies and
  // device outputs are free to go.
  release_all();
  check_all_bound(graph_, bound_);
  const auto& values = graph_.values();
  events_used_ = 0;
  marks_.clear();
  auto begin_mark = [&](cudaStream_t s) -> size_t {
    if (!timing_) return 0;
    SPW_CUDA(cudaEventRecord(timing_event(), s));
    return events_used_ - 1;
  };
  auto end_mark = [&](cudaStream_t s, int stream, size_t begin, std::string label) {
    if (!timing_) return;
    SPW_CUDA(cudaEventRecord(timing_event(), s));
    marks_.push_back({stream, begin, events_used_ - 1, std::move(label)});
  };
  if (timing_) {
    SPW_CUDA(cudaEventRecord(timing_event(), compute_));  // events_[0]: the start of the step
    SPW_CUDA(cudaStreamWaitEvent(h2d_, events_[0]));
    SPW_CUDA(cudaStreamWaitEvent(d2h_, events_[0]));
  }

  const auto& nodes = graph_.nodes();
  try {
    for (size_t i = 0; i < nodes.size(); ++i) {
      const plan::NodeActions& act = placement_.nodes[i];
      if (!act.load.empty()) {
        SPW_CUDA(cudaEventRecord(progress_[i], compute_));
        SPW_CUDA(cudaStreamWaitEvent(h2d_, progress_[i]));
      }
      for (Value v : act.load) {
        const auto id = static_cast<size_t>(v.id);
        const auto& info = values[id];
        const void* source = info.role == ValueRole::computed && !info.accumulated ? on_host_[id] : bound_[id];
        SPW_CHECK(source, info.name, "has no host copy to load from");
        planned_[id] = on_device_[id] = device_.allocate(info.bytes(), info.name);
        const size_t m = begin_mark(h2d_);
        if (info.accumulated && accumulators_zero_) {
          SPW_CUDA(cudaMemsetAsync(planned_[id], 0, info.bytes(), h2d_));  // a new sum: nothing to fetch
        } else {
          SPW_CUDA(cudaMemcpyAsync(planned_[id], source, info.bytes(), cudaMemcpyHostToDevice, h2d_));
        }
        end_mark(h2d_, 1, m, "load " + info.name);
        SPW_CUDA(cudaEventRecord(loaded_[id], h2d_));
        load_pending_[id] = true;
      }
      for (Value v : act.allocate) {
        const auto id = static_cast<size_t>(v.id);
        const auto& info = values[id];
        planned_[id] = on_device_[id] = device_.allocate(info.bytes(), info.name);
      }
      const graph::Node& node = nodes[i];
      for (const auto* list : {&node.inputs, &node.outputs}) {
        for (Value v : *list) {
          const auto id = static_cast<size_t>(v.id);
          if (!load_pending_[id]) continue;
          SPW_CUDA(cudaStreamWaitEvent(compute_, loaded_[id]));
          load_pending_[id] = false;
        }
      }
      const size_t m = begin_mark(compute_);
      runner_.run(graph_, node, on_device_);
      end_mark(compute_, 0, m, std::string(graph::op_name(node.kind)) + " " + node.name);
      if (!act.store.empty()) {
        if (before_store_) {
          for (Value v : act.store) {
            if (values[static_cast<size_t>(v.id)].accumulated) before_store_(v, on_device_[static_cast<size_t>(v.id)], compute_);
          }
        }
        SPW_CUDA(cudaEventRecord(made_[i], compute_));
        SPW_CUDA(cudaStreamWaitEvent(d2h_, made_[i]));
        if (released_load_) SPW_CUDA(cudaStreamWaitEvent(d2h_, released_load_));
      }
      for (Value v : act.store) {
        const auto id = static_cast<size_t>(v.id);
        const auto& info = values[id];
        // An accumulated value's home is the caller's buffer; others get a copy.
        void* home = info.accumulated ? bound_[id] : (on_host_[id] = host_.allocate(info.bytes(), info.name + " (host copy)"));
        const size_t mk = begin_mark(d2h_);
        SPW_CUDA(cudaMemcpyAsync(home, on_device_[id], info.bytes(), cudaMemcpyDeviceToHost, d2h_));
        end_mark(d2h_, 2, mk, "store " + info.name);
        SPW_CUDA(cudaEventRecord(stored_[id], d2h_));
        store_pending_[id] = true;
      }
      for (Value v : act.drop) {
        const auto id = static_cast<size_t>(v.id);
        if (store_pending_[id]) {
          SPW_CUDA(cudaStreamWaitEvent(compute_, stored_[id]));
          store_pending_[id] = false;
        }
        device_.free(planned_[id]);
        planned_[id] = on_device_[id] = nullptr;
      }
      for (Value v : act.release_host) {
        const auto id = static_cast<size_t>(v.id);
        host_.free(on_host_[id]);
        on_host_[id] = nullptr;
        released_load_ = loaded_[id];
      }
    }
    // The step ends on the compute stream only when its stores are done.
    SPW_CUDA(cudaEventRecord(d2h_done_, d2h_));
    SPW_CUDA(cudaStreamWaitEvent(compute_, d2h_done_));
  } catch (...) {
    SPW_CUDA_WARN(cudaStreamSynchronize(compute_));
    SPW_CUDA_WARN(cudaStreamSynchronize(h2d_));
    SPW_CUDA_WARN(cudaStreamSynchronize(d2h_));
    release_all();
    throw;
  }
}

const void* CudaPlannedExecutor::data(Value v) const {
  return planned_data(graph_, v, bound_, on_host_, on_device_);
}

std::vector<StreamInterval> CudaPlannedExecutor::timeline() const {
  std::vector<StreamInterval> out;
  if (marks_.empty()) return out;
  for (const Mark& m : marks_) {
    float begin_ms = 0, end_ms = 0;
    SPW_CUDA(cudaEventElapsedTime(&begin_ms, events_[0], events_[m.begin]));
    SPW_CUDA(cudaEventElapsedTime(&end_ms, events_[0], events_[m.end]));
    out.push_back({m.stream, begin_ms * 1e-3, end_ms * 1e-3, m.label});
  }
  return out;
}

}  // namespace spillway::exec
