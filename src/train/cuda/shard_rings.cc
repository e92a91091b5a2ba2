#include "train/cuda/shard_rings.h"

#include <algorithm>

#include "base/status.h"
#include "device/cuda/cuda_stream.h"
#include "ops/add.h"

namespace spillway::train {

namespace {

// Elements of a region (from its first) that no stack covers: where its
// gradient slot must hold zeros, so that the shares' gaps stay zero.
std::vector<std::pair<uint64_t, uint64_t>> region_gaps(const CudaTrainingState& state,
                                                       const std::vector<std::vector<int>>& parts,
                                                       const std::vector<int>& region_of_stack, int region) {
  const ShardLayout::Region& r = state.shard_layout().regions()[static_cast<size_t>(region)];
  std::vector<std::pair<uint64_t, uint64_t>> stacks;  // [begin, end) in the layout
  for (size_t j = 0; j < parts.size(); ++j) {
    if (region_of_stack[j] != region) continue;
    uint64_t n = 0;
    for (int t : parts[j]) n += static_cast<uint64_t>(state.tensors()[static_cast<size_t>(t)].n);
    stacks.emplace_back(state.layout().stack_at[j], state.layout().stack_at[j] + n);
  }
  std::sort(stacks.begin(), stacks.end());
  std::vector<std::pair<uint64_t, uint64_t>> gaps;  // (offset, count)
  uint64_t at = r.first;
  for (const auto& [begin, end] : stacks) {
    if (begin > at) gaps.emplace_back(at - r.first, begin - at);
    at = end;
  }
  if (r.first + r.elements > at) gaps.emplace_back(at - r.first, r.first + r.elements - at);
  return gaps;
}

}  // namespace

struct CudaShardRings::StepRings {
  const LlamaStep* step = nullptr;
  bool gathers = false, reduces = false;
  RingSchedule gather, reduce;
  // By node: the gather and reduce episodes issued after it, those compute
  // waits for before it, the reduce episodes whose writes start at it.
  std::vector<std::vector<int>> gathers_after, gathered_before, reduces_after, reduces_starting;
  std::vector<int> gathers_at_start;
  std::vector<std::unique_ptr<Event>> gathered, reduced;  // by episode
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> gaps;  // by region
};

CudaShardRings::CudaShardRings(CudaTrainingState& state, const std::vector<const LlamaStep*>& steps, Device& device,
                               Communicator& ranks)
    : state_(state), device_(device), ranks_(ranks), region_of_stack_(region_of_stacks(state.layout())) {
  SPW_CHECK(state.gradients_sharded(), "sharded state", "rings serve sharded gradient sums (and weights)");
  std::vector<uint64_t> weight_slot_bytes, grad_slot_bytes;
  auto widen = [](std::vector<uint64_t>& to, const std::vector<uint64_t>& from) {
    if (to.size() < from.size()) to.resize(from.size(), 0);
    for (size_t i = 0; i < from.size(); ++i) to[i] = std::max(to[i], from[i]);
  };
  for (size_t k = 0; k < steps.size(); ++k) {
    auto s = std::make_unique<StepRings>();
    s->step = steps[k];
    const graph::Graph& g = s->step->step.graph;
    const size_t nodes = g.nodes().size();
    s->gathers_after.resize(nodes);
    s->gathered_before.resize(nodes);
    s->reduces_after.resize(nodes);
    s->reduces_starting.resize(nodes);
    const std::vector<graph::Value>& params = s->step->model.parameters;
    s->gathers = state.weights_sharded();
    s->reduces = k == 0;
    if (s->gathers) {
      s->gather = gather_schedule(g, ring_regions(state.layout(), params, 2));
      widen(weight_slot_bytes, s->gather.slot_bytes);
      const auto& eps = s->gather.episodes;
      for (size_t e = 0; e < eps.size(); ++e) {
        s->gathered.push_back(device.new_event());
        const int32_t after = eps[e].gather_after;
        if (after == RingSchedule::kStillThere) continue;
        (after == RingSchedule::kAtStart ? s->gathers_at_start : s->gathers_after[static_cast<size_t>(after)])
            .push_back(static_cast<int>(e));
        s->gathered_before[static_cast<size_t>(eps[e].first_node)].push_back(static_cast<int>(e));
      }
    }
    if (s->reduces) {
      std::vector<graph::Value> grads;
      for (graph::Value p : params) grads.push_back(s->step->step.grads[p]);
      s->reduce = reduce_schedule(g, ring_regions(state.layout(), grads, 4));
      grad_slot_bytes = s->reduce.slot_bytes;
      const auto& eps = s->reduce.episodes;
      for (size_t e = 0; e < eps.size(); ++e) {
        s->reduced.push_back(device.new_event());
        s->reduces_after[static_cast<size_t>(eps[e].last_node)].push_back(static_cast<int>(e));
        s->reduces_starting[static_cast<size_t>(eps[e].first_node)].push_back(static_cast<int>(e));
      }
      for (size_t r = 0; r < state.shard_layout().regions().size(); ++r) {
        s->gaps.push_back(region_gaps(state, s->step->model.parameter_parts, region_of_stack_, static_cast<int>(r)));
      }
    }
    steps_.push_back(std::move(s));
  }
  MemorySpace& mem = device.device_memory();
  Stream& compute = device.stream(StreamKind::compute);
  auto take = [&](std::vector<char*>& slots, const std::vector<uint64_t>& sizes, const char* what) {
    for (uint64_t bytes : sizes) {
      slots.push_back(static_cast<char*>(mem.allocate(bytes, what)));
      device.zero_async(slots.back(), bytes, compute);
      slot_bytes_ += bytes;
    }
  };
  take(weight_slots_, weight_slot_bytes, "sharded weights, gathered (bf16)");
  take(grad_slots_, grad_slot_bytes, "sharded gradients, before their reduce-scatter (fp32)");
  compute.synchronize();
  ready_ = device.new_event();
}

CudaShardRings::~CudaShardRings() {
  device_.synchronize();
  for (char* p : weight_slots_) device_.device_memory().free(p);
  for (char* p : grad_slots_) device_.device_memory().free(p);
}

void CudaShardRings::gather(const StepRings& s, int episode) {
  const int region = s.gather.episodes[static_cast<size_t>(episode)].region;
  const ShardLayout::Region& r = state_.shard_layout().regions()[static_cast<size_t>(region)];
  char* slot = weight_slots_[static_cast<size_t>(s.gather.slot_of_region[static_cast<size_t>(region)])];
  Stream& comm = device_.stream(StreamKind::comm);
  ranks_.all_gather(state_.device_arrays().working_share + r.share_at, slot, r.piece, DType::bf16, comm);
  comm.record(*s.gathered[static_cast<size_t>(episode)]);
}

// This rank's piece of the slot carries the share's running sum into the
// reduction after the step's first micro-batch, so the share ends as the
// sum over ranks and micro-batches without a second buffer.
void CudaShardRings::reduce(const StepRings& s, int episode, bool first) {
  const int region = s.reduce.episodes[static_cast<size_t>(episode)].region;
  const ShardLayout::Region& r = state_.shard_layout().regions()[static_cast<size_t>(region)];
  auto* slot = reinterpret_cast<float*>(grad_slots_[static_cast<size_t>(s.reduce.slot_of_region[static_cast<size_t>(region)])]);
  float* share = state_.device_arrays().grads_share + r.share_at;
  Stream& comm = device_.stream(StreamKind::comm);
  if (!first) {
    float* mine = slot + r.piece * static_cast<uint64_t>(ranks_.rank());
    ops::add_cuda(mine, share, mine, static_cast<int64_t>(r.piece), as_cuda_stream(comm).handle());
  }
  ranks_.reduce_scatter_sum(slot, share, r.piece, DType::f32, comm);
  comm.record(*s.reduced[static_cast<size_t>(episode)]);
}

void CudaShardRings::attach(size_t k, CudaStep& step) {
  SPW_CHECK(k < steps_.size(), "sharded state", "no rings for step ", k);
  StepRings& s = *steps_[k];
  const auto& regions = state_.shard_layout().regions();
  const auto& params = s.step->model.parameters;
  for (size_t j = 0; j < params.size(); ++j) {
    const auto region = static_cast<size_t>(region_of_stack_[j]);
    const uint64_t offset = state_.layout().stack_at[j] - regions[region].first;
    if (s.gathers) {
      step.program().bind(params[j], weight_slots_[static_cast<size_t>(s.gather.slot_of_region[region])] + offset * 2);
    } else {
      step.program().bind(params[j], state_.device_arrays().working + state_.layout().stack_at[j]);
    }
    if (s.reduces) {
      step.program().bind(s.step->step.grads[params[j]],
                          grad_slots_[static_cast<size_t>(s.reduce.slot_of_region[region])] + offset * 4);
    }
  }
  Stream& compute = device_.stream(StreamKind::compute);
  Stream& comm = device_.stream(StreamKind::comm);
  const StepRings* rings = &s;
  auto fork = [this, &compute, &comm] {
    compute.record(*ready_);
    comm.wait(*ready_);
  };
  CudaStep::MicroBatchHooks hooks;
  hooks.every_micro_batch = true;
  hooks.at_start = [this, rings, fork](bool) {
    fork();  // also what a captured step's comm work joins
    for (int e : rings->gathers_at_start) gather(*rings, e);
  };
  hooks.before_node = [this, rings, &compute](size_t node, bool) {
    for (int e : rings->gathered_before[node]) compute.wait(*rings->gathered[static_cast<size_t>(e)]);
    for (int e : rings->reduces_starting[node]) {
      const auto& ep = rings->reduce.episodes[static_cast<size_t>(e)];
      if (ep.previous >= 0) compute.wait(*rings->reduced[static_cast<size_t>(ep.previous)]);
      char* slot = grad_slots_[static_cast<size_t>(rings->reduce.slot_of_region[static_cast<size_t>(ep.region)])];
      for (const auto& [offset, count] : rings->gaps[static_cast<size_t>(ep.region)]) {
        device_.zero_async(slot + offset * 4, count * 4, compute);
      }
    }
  };
  hooks.after_node = [this, rings, fork](size_t node, bool first) {
    const auto& gathers = rings->gathers_after[node];
    const auto& reduces = rings->reduces_after[node];
    if (gathers.empty() && reduces.empty()) return;
    fork();
    for (int e : gathers) gather(*rings, e);
    for (int e : reduces) reduce(*rings, e, first);
  };
  hooks.at_end = [this, &compute, &comm](bool) {
    comm.record(*ready_);
    compute.wait(*ready_);
  };
  step.set_micro_batch_hooks(std::move(hooks));
  if (s.reduces) {
    step.set_sums_written_each_micro_batch(true);
    // lm_head's product would go straight into a tied embedding's gradient
    // at the start of the backward pass, outside the episode the schedule
    // sees (the embedding's backward, at its end), in a slot then held by
    // others.
    step.runner().set_tied_gradient_in_place(false);
  }
}

}  // namespace spillway::train
