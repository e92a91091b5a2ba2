// Chunking the head on a real LLaMA step (fuse_step, then fuse_linear_loss):
// one head fused, the loss and every gradient those of the unchunked step up
// to rounding, for chunks that divide the rows and one that does not, over
// accumulating micro-batches with an uncounted row; the logits never made
// (run_llama_step checks the peak against liveness); a tied table's head
// left whole; the
// forward pass alone (evaluation) chunked too.
#include "graph/fuse_linear_loss.h"

#include <gtest/gtest.h>

#include "graph/fuse_step.h"
#include "testing/llama.h"
#include "testing/llama_step.h"

namespace spillway::graph {
namespace {

testing::LlamaStep<double> build_step(bool tied) {
  return testing::build_llama_step<double>(testing::llama_config(13, 16, 24, 2, 4, 2, tied), 2, 7,
                                           GradientOutput::accumulated);
}

const testing::LlamaStepInputs kInputs = {
    .token_seed = 1, .target_seed = 2, .parameter_seed = 40, .ignored_target = 3, .micro_batches = 2,
    .accumulated_seed = 9};

int count(const Graph& g, OpKind kind) {
  int n = 0;
  for (const Node& node : g.nodes()) n += node.kind == kind;
  return n;
}

TEST(FuseLinearLoss, ChunkedStepTrainsWhatTheWholeHeadTrains) {
  const testing::LlamaStep<double> s = build_step(false);
  const Graph whole = fuse_step(s.graph);
  const auto want = testing::run_llama_step(whole, s, kInputs);
  for (int64_t rows : {1, 5, 7, 14, 100}) {
    SCOPED_TRACE(rows);
    const LinearLossFused chunked = fuse_linear_loss(whole, rows);
    EXPECT_EQ(chunked.fused, 1);
    EXPECT_EQ(count(chunked.graph, OpKind::linear_cross_entropy), 1);
    EXPECT_EQ(count(chunked.graph, OpKind::cross_entropy), 0);
    EXPECT_EQ(count(chunked.graph, OpKind::matmul), count(whole, OpKind::matmul) - 3);
    testing::expect_close(testing::run_llama_step(chunked.graph, s, kInputs), want, s, 1e-13);
    // The logits are never made.
    for (const Node& n : chunked.graph.nodes()) {
      for (const auto* values : {&n.inputs, &n.outputs}) {
        for (Value v : *values) EXPECT_NE(v, s.model.logits) << node_label(n);
      }
    }
  }
}

TEST(FuseLinearLoss, ATiedTableKeepsItsHeadWhole) {
  const testing::LlamaStep<double> s = build_step(true);
  const Graph whole = fuse_step(s.graph);
  const LinearLossFused chunked = fuse_linear_loss(whole, 5);
  EXPECT_EQ(chunked.fused, 0);
  EXPECT_EQ(chunked.graph.nodes().size(), whole.nodes().size());
}

TEST(FuseLinearLoss, TheForwardPassAloneIsChunkedToo) {
  Graph g;
  Builder b(g, DType::f64);
  const model::LlamaGraph m = model::build_llama(b, testing::llama_config(13, 16, 24, 2, 4, 2, false), 2, 7);
  g.mark_output(m.loss);
  const LinearLossFused chunked = fuse_linear_loss(g, 4);
  ASSERT_EQ(chunked.fused, 1);
  const Node& head = chunked.graph.nodes().back();
  EXPECT_EQ(head.kind, OpKind::linear_cross_entropy);
  EXPECT_EQ(head.outputs.size(), 2u);
  EXPECT_EQ(head.outputs[0], m.loss);
  EXPECT_EQ(head.attrs.chunk_rows, 4);
}

}  // namespace
}  // namespace spillway::graph
