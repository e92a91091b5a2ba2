// The one recipe that turns a model's forward graph into the step program
// every backend runs and the planner predicts: autodiff appends the backward
// pass with each parameter's gradient accumulated into caller memory, the
// fusions of fuse_step fold adds and the loss's gradient into their
// producers, and then either recomputation drops forward values for the
// backward pass to remake (graph/recompute.h), or, when every activation is
// kept, RoPE and the SwiGLU gate fold into the products that feed them
// (fuse_matmul_rope, fuse_matmul_swiglu: remaking a dropped roped q|k|v or
// SwiGLU output cheaply needs the product those folds remove).
//
// Every value keeps its id through the recipe, so the model's handles
// (tokens, targets, parameters, loss, logits) name the same tensors in the
// step program.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/autodiff.h"
#include "graph/builder.h"
#include "graph/recompute.h"

namespace spillway::graph {

struct StepRecipe {
  bool backward = true;  // false: the forward pass alone (evaluation)
  RecomputePolicy recompute = RecomputePolicy::none;
  // Where not empty, instead of the policy: the kinds of values recomputed
  // (graph::recompute_kind), as the planner chooses them.
  std::vector<std::string> recomputed_kinds{};
  // The loss's own gradient (graph::append_backward's seed): 1, or a rank's
  // share of a loss every rank of a tensor-parallel group computes alike.
  double seed = 1.0;
  // Rows of logits made at a time by the head (graph/fuse_linear_loss.h);
  // 0: all of them at once.
  int64_t loss_chunk_rows = 0;
};

struct StepGraph {
  Graph graph;
  Gradients grads;  // by parameter, accumulated into caller memory; empty without a backward pass
};

// `b` holds the forward graph; `loss` (one element) becomes its output, and
// with a backward pass every value of `parameters` gets an accumulated
// gradient. Values the caller marked as outputs before stay outputs.
StepGraph make_step_graph(Builder& b, Value loss, const std::vector<Value>& parameters, const StepRecipe& recipe);

// The same for a pipeline stage that hands `output` on instead of ending in
// the loss: the backward pass starts from `seed` (an input of `output`'s
// shape, the gradient the next stage hands back; recipe.seed is unused).
// `output` stays an output, so that the forward pass it hands on survives.
StepGraph make_step_graph_from(Builder& b, Value output, Value seed, const std::vector<Value>& wrt,
                               const StepRecipe& recipe);

}  // namespace spillway::graph
