// Gradients accumulated into caller memory: which values can be marked, and
// what append_backward(..., GradientOutput::accumulated) builds for used,
// tied, unused and shared parameters.
#include "graph/autodiff.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "base/status.h"
#include "graph/liveness.h"
#include "ops/add_op.h"
#include "ops/cross_entropy_op.h"
#include "ops/embedding_op.h"
#include "ops/fill_op.h"
#include "ops/matmul_op.h"
#include "ops/rmsnorm_op.h"
#include "ops/swiglu_op.h"

namespace spillway::graph {
namespace {

uint64_t exact(uint64_t n) { return n; }

const Node& producer(const Graph& g, Value v) { return g.nodes()[static_cast<size_t>(g.value(v).producer)]; }

void expect_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error, expected one mentioning '" << part << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(MarkAccumulated, TakesOnlyOutputsThatCanAddIntoTheirBuffer) {
  Graph g;
  Builder b(g, DType::f32);
  Value x = b.input("x", Shape{4, 8}, DType::f32);
  Value w = b.parameter("w", Shape{8});
  Value w2 = b.parameter("w2", Shape{8, 8});
  Value y = ops::rmsnorm(b, x, w, 1e-5, "norm");
  Value rstd = g.find("norm.rstd");
  Value dy = b.input("dy", Shape{4, 8}, DType::f32);
  std::vector<Value> d = ops::rmsnorm_backward(b, dy, x, w, rstd, "norm.backward");
  Value mm = ops::matmul(b, y, w2, false, true, "mm");
  Value sum = ops::add(b, mm, y, "sum");
  Value read = ops::add(b, sum, sum, "read");
  Value ones = ops::fill(b, "ones", Shape{8}, 1.0, DType::f32);
  Value zeros = ops::fill(b, "zeros", Shape{8}, 0.0, DType::f32);
  Value act = ops::swiglu(b, mm, y, "act");

  EXPECT_FALSE(g.can_accumulate(w));                 // a parameter
  EXPECT_FALSE(g.can_accumulate(d[0]));              // rmsnorm_backward's dx
  EXPECT_FALSE(g.can_accumulate(sum));               // read by `read`
  EXPECT_FALSE(g.can_accumulate(ones));              // += 1 is not a fill's to do
  EXPECT_FALSE(g.can_accumulate(act));               // swiglu cannot accumulate
  EXPECT_TRUE(g.can_accumulate(d[1]));               // dweight
  EXPECT_TRUE(g.can_accumulate(read));
  EXPECT_TRUE(g.can_accumulate(zeros));
  expect_error([&] { g.mark_accumulated(sum); }, "cannot be accumulated");
  expect_error([&] { g.mark_accumulated(w); }, "cannot be accumulated");

  g.mark_accumulated(d[1]);
  g.mark_accumulated(read);
  g.mark_accumulated(zeros);
  g.mark_accumulated(read);  // twice is once
  EXPECT_TRUE(g.is_accumulated(d[1]));
  EXPECT_TRUE(g.is_output(d[1]));
  EXPECT_TRUE(producer(g, d[1]).attrs.accumulate);
  EXPECT_TRUE(producer(g, read).attrs.accumulate);
  EXPECT_TRUE(producer(g, zeros).attrs.accumulate);
  EXPECT_FALSE(producer(g, mm).attrs.accumulate);
  // A running sum is for the caller, not for later nodes.
  expect_error([&] { ops::add(b, read, read, "after"); }, "accumulated into caller memory");
  // The caller's memory, like a parameter's: never allocated by the executor.
  Liveness live = analyze_liveness(g, exact);
  EXPECT_FALSE(live.of[static_cast<size_t>(read.id)].managed);
  EXPECT_FALSE(live.of[static_cast<size_t>(d[1].id)].managed);
  EXPECT_TRUE(live.of[static_cast<size_t>(d[0].id)].managed);
}

// y = rmsnorm(emb[ids], g) (emb [V, D]); logits = y emb^T (tied); a second
// use of g through an add with an activation; `unused` reaches nothing.
struct TiedModel {
  Graph g;
  Value ids, targets, emb, gain, unused, loss;
  TiedModel() {
    Builder b(g, DType::f32);
    ids = b.input("ids", Shape{6}, DType::i32);
    targets = b.input("targets", Shape{6}, DType::i32);
    emb = b.parameter("emb", Shape{10, 4});
    gain = b.parameter("gain", Shape{4});
    unused = b.parameter("unused", Shape{3});
    Value x = ops::embedding(b, emb, ids);
    Value y = ops::rmsnorm(b, x, gain, 1e-5);
    Value logits = ops::matmul(b, y, emb, false, true, "lm_head");
    loss = ops::cross_entropy(b, logits, targets);
  }
};

TEST(AppendBackward, AccumulatedGradientsAddIntoCallerBuffers) {
  TiedModel m;
  Builder b(m.g, DType::f32);
  Gradients grads = append_backward(b, m.loss, {m.emb, m.gain, m.unused}, GradientOutput::accumulated);
  for (Value p : {m.emb, m.gain, m.unused}) {
    Value grad = grads[p];
    SCOPED_TRACE(m.g.value(grad).name);
    EXPECT_TRUE(m.g.is_accumulated(grad));
    EXPECT_TRUE(m.g.is_output(grad));
    EXPECT_EQ(m.g.value(grad).shape, m.g.value(p).shape);
    EXPECT_TRUE(producer(m.g, grad).attrs.accumulate);
    EXPECT_TRUE(producer(m.g, grad).backward);
  }
  // Tied: the sum of the lm_head and embedding contributions is the add that accumulates.
  EXPECT_EQ(producer(m.g, grads[m.emb]).kind, OpKind::add);
  EXPECT_EQ(producer(m.g, grads[m.gain]).kind, OpKind::rmsnorm_backward);
  EXPECT_EQ(producer(m.g, grads[m.unused]).kind, OpKind::fill);
  EXPECT_EQ(producer(m.g, grads[m.unused]).attrs.fill_value, 0.0);
  // Only those three nodes accumulate, and nothing reads what they make.
  int accumulating = 0;
  for (const Node& n : m.g.nodes()) accumulating += n.attrs.accumulate ? 1 : 0;
  EXPECT_EQ(accumulating, 3);
}

TEST(AppendBackward, FreshGradientsAreUnchanged) {
  TiedModel m;
  Builder b(m.g, DType::f32);
  Gradients grads = append_backward(b, m.loss, {m.emb, m.gain, m.unused});
  for (Value p : {m.emb, m.gain, m.unused}) {
    EXPECT_FALSE(m.g.is_accumulated(grads[p]));
    EXPECT_TRUE(m.g.is_output(grads[p]));
  }
  for (const Node& n : m.g.nodes()) EXPECT_FALSE(n.attrs.accumulate) << n.name;
}

// A gradient that cannot accumulate where it is made (it flows on to other
// nodes, or belongs to two values) gets an add of zeros that does.
TEST(AppendBackward, SharedOrReadGradientsGetAnAccumulatingAdd) {
  Graph g;
  Builder b(g, DType::f32);
  Value ids = b.input("ids", Shape{4}, DType::i32);
  Value targets = b.input("targets", Shape{4}, DType::i32);
  Value emb = b.parameter("emb", Shape{8, 8});
  Value bias = b.parameter("bias", Shape{4, 8});
  Value x = ops::embedding(b, emb, ids);
  Value h = ops::add(b, x, bias, "with_bias");  // d bias = d h, which flows on into emb's gradient
  Value logits = ops::matmul(b, h, emb, false, true, "lm_head");
  Value loss = ops::cross_entropy(b, logits, targets);
  Gradients grads = append_backward(b, loss, {emb, bias, x}, GradientOutput::accumulated);
  for (Value v : {emb, bias, x}) EXPECT_TRUE(g.is_accumulated(grads[v])) << g.value(v).name;
  EXPECT_NE(grads[bias], grads[x]);
  for (Value v : {bias, x}) {
    const Node& acc = producer(g, grads[v]);
    EXPECT_EQ(acc.kind, OpKind::add);
    EXPECT_TRUE(acc.attrs.accumulate);
    EXPECT_EQ(producer(g, acc.inputs[1]).kind, OpKind::fill);
  }
  // Both adds read the same, fresh, gradient of h.
  EXPECT_EQ(producer(g, grads[bias]).inputs[0], producer(g, grads[x]).inputs[0]);
  EXPECT_FALSE(g.is_accumulated(producer(g, grads[bias]).inputs[0]));
}

}  // namespace
}  // namespace spillway::graph
