#include "graph/step_recipe.h"

#include "graph/fuse_linear_loss.h"
#include "graph/fuse_matmul_rope.h"
#include "graph/fuse_matmul_swiglu.h"
#include "graph/fuse_step.h"

namespace spillway::graph {

namespace {

// Fusion comes before recomputation: see graph/fuse_step.h.
StepGraph fused_step(const Graph& g, Gradients grads, const StepRecipe& recipe) {
  StepGraph step;
  step.grads = std::move(grads);
  step.graph = fuse_step(g);
  if (recipe.loss_chunk_rows > 0) step.graph = fuse_linear_loss(step.graph, recipe.loss_chunk_rows).graph;
  if (!recipe.recomputed_kinds.empty()) {
    step.graph = recompute(step.graph, keep_rule(recipe.recomputed_kinds)).graph;
  } else if (recipe.recompute != RecomputePolicy::none) {
    step.graph = recompute(step.graph, recipe.recompute).graph;
  } else {
    step.graph = fuse_matmul_rope(fuse_matmul_swiglu(step.graph).graph).graph;
  }
  return step;
}

}  // namespace

StepGraph make_step_graph(Builder& b, Value loss, const std::vector<Value>& parameters, const StepRecipe& recipe) {
  b.graph().mark_output(loss);
  Gradients grads;
  if (recipe.backward) grads = append_backward(b, loss, parameters, GradientOutput::accumulated, recipe.seed);
  return fused_step(b.graph(), std::move(grads), recipe);
}

StepGraph make_step_graph_from(Builder& b, Value output, Value seed, const std::vector<Value>& wrt,
                               const StepRecipe& recipe) {
  b.graph().mark_output(output);
  Gradients grads;
  if (recipe.backward) grads = append_backward_from(b, output, seed, wrt, GradientOutput::accumulated);
  return fused_step(b.graph(), std::move(grads), recipe);
}

}  // namespace spillway::graph
