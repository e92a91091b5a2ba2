// The chunked head's gradients are its own outputs (no backward rule), so
// the op sweep's autodiff check cannot reach them: here dh and dW, divided
// by dloss, are checked against central finite differences of the node's
// own loss in f64, unweighted (one row not counted) and weighted, over
// chunks that do not divide the rows; and the mean's weights are 1/counted.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/linear_cross_entropy.h"
#include "testing/op_sweep.h"
#include "testing/op_sweep_cases.h"

namespace spillway::testing {
namespace {

void check_gradients(bool weighted) {
  SweepCase c{.label = "head", .kind = graph::OpKind::linear_cross_entropy,
              .build = [weighted](SweepInputs& in) { return sweep::linear_loss_head(in, weighted, true); },
              .fuse = sweep::chunk_linear_loss};
  const SweepGraph s = build_sweep_graph(c, DType::f64, 7, true);
  ASSERT_TRUE(has_node(s.graph, c.kind, c.fused));
  const double dloss = 0.75;  // the case's seed
  CpuSweepRun run(s.graph, s.inputs, DType::f64);
  run.run();
  // Inputs 0 and 1 are h and W, outputs 2 and 3 their gradients.
  for (size_t k : {0u, 1u}) {
    const std::vector<double> gradient = run.read(s.outputs[2 + k]);
    const std::vector<double> x = run.input(k);
    ASSERT_EQ(gradient.size(), x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const double e = 1e-6;
      std::vector<double> moved = x;
      moved[i] = x[i] + e;
      run.set_input(k, moved);
      run.run();
      const double up = run.read(s.outputs[0])[0];
      moved[i] = x[i] - e;
      run.set_input(k, moved);
      run.run();
      const double down = run.read(s.outputs[0])[0];
      EXPECT_NEAR(gradient[i] / dloss, (up - down) / (2 * e), 1e-8) << (k == 0 ? "dh[" : "dW[") << i << "]";
    }
    run.set_input(k, x);
  }
}

TEST(LinearCrossEntropy, GradientsMatchFiniteDifferencesOfItsLoss) { check_gradients(false); }
TEST(LinearCrossEntropy, WeightedGradientsMatchFiniteDifferencesOfItsLoss) { check_gradients(true); }

TEST(LinearCrossEntropy, TheMeansWeightsAreOneOverTheCountedRows) {
  const std::vector<int32_t> targets{3, -100, 0, 5};
  std::vector<double> w(4);
  ops::mean_loss_weights(targets.data(), 4, w.data());
  EXPECT_EQ(w, (std::vector<double>{1.0 / 3, 0, 1.0 / 3, 1.0 / 3}));
  const std::vector<int32_t> none{-100, -1};
  std::vector<float> z(2, 9.0f);
  ops::mean_loss_weights(none.data(), 2, z.data());
  EXPECT_EQ(z, (std::vector<float>{0, 0}));
}

}  // namespace
}  // namespace spillway::testing
