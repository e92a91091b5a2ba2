// Pipeline parallelism in the plan: a rank's step is its stage's graph
// (model::LlamaStage, cut where model/llama_stages.h balances the cost
// model's times), run in the 1F1B schedule the CPU engine runs
// (train/cpu_pipeline.h): each micro-batch's forward pass, handed on, and
// later its backward pass, which remakes the forward from the hidden state
// the stage kept. So a stage holds the inputs of the micro-batches in
// flight and the activations of one.
//
// The step of S stages over m micro-batches is (m + S - 1) slots of the
// slowest stage's forward, backward and hand-overs: S - 1 of them are the
// bubble, where a stage waits for the pipeline to fill or drain. It holds
// for m < S too (most of the step is then bubble). With V stages a rank
// (--virtual-stages: interleaved 1F1B, the layers cut into S x V stages)
// a slot is the rank's V stages' passes, and the bubble shrinks to
// (S - 1) / V of them; each stage is planned in 1/V of the device.
#pragma once

#include <cstdint>
#include <vector>

#include "model/llama_graph.h"
#include "train/step_plan.h"

namespace spillway::train {

// How the pipeline's step was priced, beside the slowest stage's plan.
struct PipelinePricing {
  std::vector<model::LlamaStage> stages;
  int slowest = 0;              // the rank whose stages the step is priced from
  int largest = 0;              // the rank that needs the most device memory
  uint64_t largest_bytes = 0;   // what it needs: state, kept inputs, planned peak, workspaces
  int chunks = 1;               // stages a rank holds (--virtual-stages): interleaved 1F1B when more
  int64_t micro_batches = 1;
  int64_t kept_inputs = 0;      // hidden states a stage keeps at most (stage 1's S - 1, or m; interleaved, a share of rank 0's)
  uint64_t hidden_bytes = 0;    // one hidden state handed on (the rank's part)
  double forward_seconds = 0;   // the slowest rank's forward passes run ahead, per micro-batch
  double slot_seconds = 0;      // its forwards, forwards again and backwards, and the hand-overs, per micro-batch
  double transfer_seconds = 0;  // of slot_seconds: hidden states handed on and gradients handed back
  double bubble = 0;            // (S - 1) / (V m + S - 1)
};

struct PlannedPipeline {
  PlannedStep step;  // the slowest stage's, its step, tokens/s and MFU the pipeline's
  PipelinePricing pricing;
};

// `request` describes the whole model's rank (its seq, context and
// tensor-parallel split, data_parallel the ranks that sum each stage's
// gradients); each distinct stage is planned with plan_data_parallel_step.
// Error naming --pp where the model has fewer layers than stages, or the
// planner's error where a stage does not fit.
PlannedPipeline plan_pipeline_step(StepPlanRequest request, StateSharding shard, int stages, int chunks = 1);

}  // namespace spillway::train
