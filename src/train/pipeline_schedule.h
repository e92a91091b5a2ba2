// The order in which a pipeline's ranks run their micro-batches' forward
// and backward passes, and the ticks that order takes when every rank runs
// one pass a tick and hands what it made on at the tick's end.
//
// Each rank holds `chunks` stages of the model: with S ranks the layers are
// cut into S x chunks stages, rank r holding stages r, r + S, r + 2S, ...
// One chunk a rank is 1F1B (PipeDream-Flush); more is interleaved 1F1B
// (Megatron-LM's virtual stages): the same work in smaller passes, so the
// ramp up and down that leaves ranks idle (the bubble) shrinks by the
// number of chunks, for chunks times as many hidden states handed on.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace spillway::train {

struct PipelinePass {
  bool backward = false;
  int chunk = 0;             // of the rank's chunks; its stage is chunk * ranks + rank
  int64_t micro_batch = 0;
  bool operator==(const PipelinePass&) const = default;
};

// Rank `rank`'s passes in the order it runs them: each micro-batch's
// forward pass through each of its chunks, then (with `backward`) its
// backward pass through them in reverse. Without `backward`, chunk after
// chunk. 1F1B runs ranks - rank - 1
// forwards ahead and then one forward and one backward in turn, so a rank
// keeps the inputs of at most ranks - rank micro-batches; interleaved,
// Megatron-LM's order: micro-batches in groups of `ranks`, each group
// through chunk 0, then chunk 1, ..., with (ranks - rank - 1) * 2 +
// (chunks - 1) * ranks forwards ahead, so it takes micro-batches in
// multiples of `ranks` (check_pipeline_micro_batches).
// Error naming --virtual-stages where `chunks` stages a rank need a
// pipeline (`ranks` > 1) or more layers than the model's `layers`.
void check_virtual_stages(int64_t ranks, int64_t chunks, int64_t layers);
// Error naming --grad-accum where interleaving `chunks` stages a rank
// cannot take a training step's `micro_batches`.
void check_pipeline_micro_batches(int ranks, int chunks, int64_t micro_batches);

std::vector<PipelinePass> pipeline_order(int rank, int ranks, int chunks, int64_t micro_batches, bool backward);

// Every rank's passes placed on ticks: a pass runs at the first tick after
// the one that made its input (the previous stage's hidden state, or the
// next stage's gradient of it) and after the rank's previous pass.
struct PipelineTimeline {
  int ranks = 1, chunks = 1;
  // [tick][rank]: the pass that rank runs at that tick, if any.
  std::vector<std::vector<std::optional<PipelinePass>>> ticks;

  int stages() const { return ranks * chunks; }
  int stage_of(int rank, const PipelinePass& p) const { return p.chunk * ranks + rank; }
  // The rank a pass at `stage` hands its output to: the next stage's for a
  // forward pass, the previous stage's for a backward one; none at the ends
  // (the last stage's forward feeds its own loss).
  std::optional<int> receiver(int stage, const PipelinePass& p) const;
  // The fraction of rank-ticks idle: the bubble, were every pass one tick.
  double idle_fraction() const;

  // What `rank` takes at the end of a tick: the value a pass of another
  // rank made for it, a hidden state for the stage after that pass's (a
  // forward pass) or its gradient for the stage before (a backward one).
  struct Arrival {
    int from = 0;           // the rank that sends it
    bool gradient = false;  // handed back by a backward pass
    int stage = 0;          // the stage of this rank's that takes it
    int64_t micro_batch = 0;
  };
  std::vector<Arrival> arrivals(size_t tick, int rank) const;
};

PipelineTimeline pipeline_timeline(int ranks, int chunks, int64_t micro_batches, bool backward);

}  // namespace spillway::train
