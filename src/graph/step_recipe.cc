#include "graph/step_recipe.h"

#include "graph/fuse_matmul_rope.h"
#include "graph/fuse_matmul_swiglu.h"
#include "graph/fuse_step.h"

namespace spillway::graph {

StepGraph make_step_graph(Builder& b, Value loss, const std::vector<Value>& parameters, const StepRecipe& recipe) {
  Graph& g = b.graph();
  g.mark_output(loss);
  StepGraph step;
  if (recipe.backward) step.grads = append_backward(b, loss, parameters, GradientOutput::accumulated, recipe.seed);
  // Fusion comes before recomputation: see graph/fuse_step.h.
  step.graph = fuse_step(g);
  if (!recipe.recomputed_kinds.empty()) {
    step.graph = recompute(step.graph, keep_rule(recipe.recomputed_kinds)).graph;
  } else if (recipe.recompute != RecomputePolicy::none) {
    step.graph = recompute(step.graph, recipe.recompute).graph;
  } else {
    step.graph = fuse_matmul_rope(fuse_matmul_swiglu(step.graph).graph).graph;
  }
  return step;
}

}  // namespace spillway::graph
