#include "train/pipeline_walk.h"

#include "base/status.h"

namespace spillway::train {

PipelineWalk::PipelineWalk(Communicator& group, uint64_t elements, DType dtype, MemorySpace& memory, Stream& comm)
    : group_(group), elements_(elements), dtype_(dtype), memory_(memory), comm_(comm) {}

PipelineWalk::~PipelineWalk() {
  for (void* p : owned_) memory_.free(p);
}

void* PipelineWalk::claim(std::map<Key, void*>& slots, Key key) {
  void* p = nullptr;
  if (free_.empty()) {
    p = memory_.allocate(elements_ * dtype_size(dtype_), "pipeline: a hidden state or gradient received");
    owned_.push_back(p);
  } else {
    p = free_.back();
    free_.pop_back();
  }
  SPW_CHECK(slots.emplace(key, p).second, "pipeline", "stage ", key.first, " received micro-batch ", key.second,
            " twice");
  return p;
}

void PipelineWalk::release(std::map<Key, void*>& slots, Key key) {
  const auto it = slots.find(key);
  SPW_CHECK(it != slots.end(), "pipeline", "stage ", key.first, " never received micro-batch ", key.second);
  free_.push_back(it->second);
  slots.erase(it);
}

double PipelineWalk::walk(const PipelineTimeline& timeline, bool training, const RunPass& run) {
  const int rank = group_.rank();
  double loss = 0;
  for (size_t t = 0; t < timeline.ticks.size(); ++t) {
    std::vector<PeerBuffer> sends, receives;
    if (const auto& pass = timeline.ticks[t][static_cast<size_t>(rank)]) {
      const int stage = timeline.stage_of(rank, *pass);
      const Key key{stage, pass->micro_batch};
      const bool first_stage = stage == 0, last_stage = stage + 1 == timeline.stages();
      const void* input = first_stage ? nullptr : inputs_.at(key);
      Made made;
      if (pass->backward) {
        made = run(*pass, stage, input, last_stage ? nullptr : handed_back_.at(key));
        if (!first_stage) release(inputs_, key);
        if (!last_stage) release(handed_back_, key);
      } else if (!training || !last_stage) {
        made = run(*pass, stage, input, nullptr);
        if (!training && !first_stage) release(inputs_, key);
      }
      loss += made.loss;
      if (const auto to = timeline.receiver(stage, *pass)) {
        SPW_CHECK(made.hand_on != nullptr, "pipeline", "stage ", stage, "'s pass made nothing to hand on");
        sends.push_back({const_cast<void*>(made.hand_on), elements_, *to});
      }
    }
    for (const PipelineTimeline::Arrival& a : timeline.arrivals(t, rank)) {
      void* into = claim(a.gradient ? handed_back_ : inputs_, {a.stage, a.micro_batch});
      receives.push_back({into, elements_, a.from});
    }
    if (sends.empty() && receives.empty()) continue;
    group_.exchange(sends, receives, dtype_, comm_);
    group_.wait(comm_);
  }
  return loss;
}

}  // namespace spillway::train
