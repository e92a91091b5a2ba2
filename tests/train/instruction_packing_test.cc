// Packing instruction examples into rows (train/instruction_packing.h): the
// rows it lays out, its resumable walk, and the point of it all: a LLaMA
// step over packed rows has the loss and gradients of the same examples
// one a row.
#include "train/instruction_packing.h"

#include <gtest/gtest.h>

#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "device/cpu/cpu_device.h"
#include "exec/executor.h"
#include "graph/autodiff.h"
#include "graph/builder.h"
#include "model/llama_graph.h"
#include "testing/llama.h"
#include "testing/numeric.h"
#include "train/instruction_batches.h"
#include "train/loss_weights.h"

namespace spillway::train {
namespace {

// ids 1000 * tag + 0, 1, ...; every token after the first `prompt` trains.
InstructionExample example(int tag, int tokens, int prompt) {
  InstructionExample e;
  for (int i = 0; i < tokens; ++i) {
    e.ids.push_back(1000 * tag + i);
    e.trained.push_back(i >= prompt ? 1 : 0);
  }
  return e;
}

struct Packed {
  std::vector<int32_t> inputs, targets, positions, doc_starts;
  explicit Packed(size_t n) : inputs(n), targets(n), positions(n), doc_starts(n) {}
  PackedRow row(size_t r, size_t seq) {
    return {std::span(inputs).subspan(r * seq, seq), std::span(targets).subspan(r * seq, seq),
            std::span(positions).subspan(r * seq, seq), std::span(doc_starts).subspan(r * seq, seq)};
  }
};

TEST(PackedRow, LaysExamplesEndToEndThenPads) {
  Packed p(10);
  const PackedRow row = p.row(0, 10);
  int64_t at = place_example(example(1, 4, 1), 0, row);  // 3 pairs
  at = place_example(example(2, 5, 3), at, row);         // 4 pairs
  EXPECT_EQ(at, 7);
  pad_packed_row(at, 9, row);
  EXPECT_EQ(p.inputs, (std::vector<int32_t>{1000, 1001, 1002, 2000, 2001, 2002, 2003, 9, 9, 9}));
  EXPECT_EQ(p.targets, (std::vector<int32_t>{1001, 1002, 1003, -100, -100, 2003, 2004, -100, -100, -100}));
  EXPECT_EQ(p.positions, (std::vector<int32_t>{0, 1, 2, 0, 1, 2, 3, 0, 1, 2}));
  EXPECT_EQ(p.doc_starts, (std::vector<int32_t>{0, 0, 0, 3, 3, 3, 3, 7, 7, 7}));
}

TEST(PackedRow, CutsAnExampleLongerThanTheRowAsUnpackedRowsDo) {
  const InstructionExample e = example(3, 9, 0);
  Packed p(5);
  EXPECT_EQ(place_example(e, 0, p.row(0, 5)), 5);
  std::vector<int32_t> inputs(5), targets(5);
  fill_instruction_row(e, 0, inputs, targets);
  EXPECT_EQ(p.inputs, inputs);
  EXPECT_EQ(p.targets, targets);
  EXPECT_EQ(p.positions, (std::vector<int32_t>{0, 1, 2, 3, 4}));
}

// Every example lands whole in some row, in the walk's order, and the
// counted targets add up to the sampler's tokens_consumed.
TEST(PackingSampler, PlacesWholeExamplesAndCountsTheirTargets) {
  std::vector<InstructionExample> examples;
  for (int i = 0; i < 7; ++i) examples.push_back(example(i + 1, 2 + (i * 5) % 9, 1));
  PackingSampler sampler(examples, 2, 12, 0, 5);
  Packed p(24);
  sampler.next(p.inputs, p.targets, p.positions, p.doc_starts);
  int64_t counted = 0;
  for (size_t t = 0; t < p.targets.size(); ++t) {
    counted += p.targets[t] >= 0 ? 1 : 0;
    const size_t row_start = t / 12 * 12;
    // A document's first token is its example's first token (or padding).
    if (p.positions[t] == 0 && p.inputs[t] != 0) {
      EXPECT_EQ(p.inputs[t] % 1000, 0) << t;
    }
    EXPECT_EQ(static_cast<size_t>(p.doc_starts[t]) + static_cast<size_t>(p.positions[t]), t - row_start) << t;
  }
  EXPECT_EQ(static_cast<uint64_t>(counted), sampler.state().tokens_consumed);
  EXPECT_GT(sampler.state().draws, 2u);  // more than one example a row
}

TEST(PackingSampler, ResumesWhereItsStateWasTaken) {
  std::vector<InstructionExample> examples;
  for (int i = 0; i < 5; ++i) examples.push_back(example(i + 1, 3 + i, 1));
  PackingSampler a(examples, 2, 8, 0, 11);
  Packed p(16), q(16);
  for (int i = 0; i < 3; ++i) a.next(p.inputs, p.targets, p.positions, p.doc_starts);
  const SamplerState saved = a.state();
  a.next(p.inputs, p.targets, p.positions, p.doc_starts);

  PackingSampler b(examples, 2, 8, 0, 99);
  b.restore(saved);
  b.next(q.inputs, q.targets, q.positions, q.doc_starts);
  EXPECT_EQ(p.inputs, q.inputs);
  EXPECT_EQ(p.targets, q.targets);
  EXPECT_EQ(p.positions, q.positions);
  EXPECT_EQ(p.doc_starts, q.doc_starts);
  EXPECT_EQ(a.state().draws, b.state().draws);
  EXPECT_EQ(a.state().tokens_consumed, b.state().tokens_consumed);
}

TEST(PackingSampler, RejectsExamplesWithNothingToPack) {
  const std::vector<InstructionExample> examples = {example(1, 1, 0)};
  EXPECT_THROW(PackingSampler(examples, 1, 4, 0, 1), Error);
}

// One LLaMA step's loss and parameter gradients.
struct StepResult {
  double loss = 0;
  std::vector<std::vector<float>> gradients;
};

// The step over `rows` rows of `seq`, the loss weighted per counted target
// by 1 / (counted targets), as training weighs an optimizer step of one
// micro-batch (train/loss_weights.h); with documents when `packed`.
StepResult run_step(const model::LlamaConfig& config, int64_t rows, int64_t seq, bool packed, Packed& data) {
  graph::Graph g;
  graph::Builder b(g, DType::f32);
  const model::LlamaGraph m =
      model::build_llama(b, config, rows, seq, {.weighted_loss = true, .documents = packed});
  g.mark_output(m.loss);
  const graph::Gradients grads = graph::append_backward(b, m.loss, m.parameters);
  std::vector<std::vector<float>> params;
  for (size_t i = 0; i < m.parameters.size(); ++i) {
    params.push_back(testing::random_vector<float>(g.value(m.parameters[i]).shape.numel(), 70 + i, -0.5, 0.5));
  }
  std::vector<float> weights(data.targets.size());
  fill_loss_weights(data.targets, loss_token_weight(1, 1, static_cast<double>(counted_targets(data.targets))),
                    weights);

  auto space = make_host_heap_space("test:device", MemorySpace::kUnlimited);
  exec::CpuExecutor e(g, *space);
  e.bind(m.tokens, std::span<int32_t>(data.inputs));
  e.bind(m.targets, std::span<int32_t>(data.targets));
  e.bind(m.loss_weights, std::span<float>(weights));
  if (packed) {
    e.bind(m.positions, std::span<int32_t>(data.positions));
    e.bind(m.doc_starts, std::span<int32_t>(data.doc_starts));
  }
  for (size_t i = 0; i < params.size(); ++i) e.bind(m.parameters[i], std::span<float>(params[i]));
  e.run();
  StepResult r;
  r.loss = e.read<float>(m.loss)[0];
  for (graph::Value p : m.parameters) {
    const std::span<const float> grad = e.read<float>(grads[p]);
    r.gradients.emplace_back(grad.begin(), grad.end());
  }
  return r;
}

// The examples one a row (padded to `seq`), and packed into `rows` rows of
// `seq` in the same order, as PackingSampler fills them.
TEST(Packing, PackedStepEqualsUnpackedStep) {
  const model::LlamaConfig config = testing::llama_config(97, 32, 48, 2, 4, 2);
  // Lengths that cross the attention kernel's 64-token tiles once packed.
  const std::vector<InstructionExample> examples = {example(1, 30, 5), example(2, 50, 10), example(3, 9, 2),
                                                    example(4, 70, 20), example(5, 2, 1)};
  std::vector<InstructionExample> in_vocab = examples;
  for (auto& e : in_vocab) {
    for (auto& id : e.ids) id = (id / 1000 * 31 + id % 1000 * 7) % 97;
  }
  const int64_t seq = 100;

  const auto n = static_cast<int64_t>(in_vocab.size());
  Packed unpacked(static_cast<size_t>(n * seq));
  for (int64_t r = 0; r < n; ++r) {
    const auto row = unpacked.row(static_cast<size_t>(r), static_cast<size_t>(seq));
    fill_instruction_row(in_vocab[static_cast<size_t>(r)], 0, row.inputs, row.targets);
  }
  // Rows: [30-1 + 50-1 + 9-1 = 86 | pad], [70-1 + 2-1 = 70 | pad].
  Packed packed(static_cast<size_t>(2 * seq));
  int64_t at = 0;
  for (size_t i = 0; i < 3; ++i) at = place_example(in_vocab[i], at, packed.row(0, seq));
  pad_packed_row(at, 0, packed.row(0, seq));
  at = 0;
  for (size_t i = 3; i < 5; ++i) at = place_example(in_vocab[i], at, packed.row(1, seq));
  pad_packed_row(at, 0, packed.row(1, seq));
  ASSERT_EQ(counted_targets(packed.targets), counted_targets(unpacked.targets));

  const StepResult want = run_step(config, n, seq, false, unpacked);
  const StepResult got = run_step(config, 2, seq, true, packed);
  // float32 on both sides; only the order of sums differs (other tiles,
  // other batch rows), so the two agree to a few float32 roundings.
  constexpr double kTolerance = 2e-5;
  EXPECT_NEAR(got.loss, want.loss, kTolerance * std::abs(want.loss));
  ASSERT_EQ(got.gradients.size(), want.gradients.size());
  for (size_t i = 0; i < want.gradients.size(); ++i) {
    const std::vector<double> w(want.gradients[i].begin(), want.gradients[i].end());
    EXPECT_LE(testing::rel_error(got.gradients[i], w), kTolerance) << "gradient " << i;
  }
}

}  // namespace
}  // namespace spillway::train
