// One rank's walk through a pipeline's ticks (train/pipeline_schedule.h),
// the same on every engine: at each tick the rank runs its pass, if it has
// one there, then sends what the pass made to the rank that reads it and
// receives what the tick's other passes made for it, all in one exchange
// over the pipeline group. Hidden states and gradients received wait in
// buffers of the engine's memory until their pass, which reads them where
// they lie. A rank waiting at a tick waits only on ranks at that tick or
// behind it, so no circle of waits can form.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "base/dtype.h"
#include "device/communicator.h"
#include "device/memory_space.h"
#include "device/stream.h"
#include "train/pipeline_schedule.h"

namespace spillway::train {

class PipelineWalk {
 public:
  // A hand-over is `elements` values of `dtype` (one micro-batch's hidden
  // state, or its gradient), its buffers taken from `memory`.
  PipelineWalk(Communicator& group, uint64_t elements, DType dtype, MemorySpace& memory, Stream& comm);
  ~PipelineWalk();
  PipelineWalk(const PipelineWalk&) = delete;
  PipelineWalk& operator=(const PipelineWalk&) = delete;

  // What a pass returns once its work has finished: its loss (the last
  // stage's, else 0) and what it hands on (null: nothing), which must stay
  // put until the pass's tick has exchanged it.
  struct Made {
    double loss = 0;
    const void* hand_on = nullptr;
  };
  // Runs `pass` at `stage`: `input` is the hidden state the previous stage
  // handed on (stage > 0), `handed_back` the gradient the next stage
  // handed back (a backward pass short of the last stage); else null.
  using RunPass = std::function<Made(const PipelinePass& pass, int stage, const void* input, const void* handed_back)>;

  // Every tick of `timeline`; returns the sum of this rank's passes'
  // losses. Training, the last stage's forward passes run nothing: its
  // backward pass makes the loss from the kept input.
  double walk(const PipelineTimeline& timeline, bool training, const RunPass& run);

 private:
  using Key = std::pair<int, int64_t>;  // the stage that reads it, the micro-batch
  void* claim(std::map<Key, void*>& slots, Key key);
  void release(std::map<Key, void*>& slots, Key key);

  Communicator& group_;
  uint64_t elements_;
  DType dtype_;
  MemorySpace& memory_;
  Stream& comm_;
  std::map<Key, void*> inputs_, handed_back_;
  std::vector<void*> free_, owned_;
};

}  // namespace spillway::train
