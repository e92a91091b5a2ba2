// LLaMA with its sequence split over a context-parallel group
// (LlamaGraphOptions::context): each rank runs its two chunks of the
// sequence (an early and a late one), RoPE at their positions, attention
// from each chunk's offset over every rank's keys and values (all-gathered
// and put in position order; their gradients reduce-scattered back). Ranks as threads over Gloo, in float64: the mean of the ranks'
// losses is one device's loss, and the sum of their gradients one device's
// gradients, to 1e-12.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "device/cpu/cpu_device.h"
#include "dist/world.h"
#include "exec/executor.h"
#include "graph/autodiff.h"
#include "model/llama_graph.h"
#include "testing/llama.h"
#include "testing/numeric.h"
#include "testing/thread_ranks.h"

namespace spillway::model {
namespace {

constexpr int64_t kSeq = 16;  // 8 chunks of 2 over four ranks

struct Step {
  double loss = 0;
  std::vector<std::vector<double>> grads;
};

// The step of rank cp.rank's chunks of the sequence.
Step run(const LlamaConfig& c, const LlamaContext& cp, Communicator* comm, Stream* stream, double seed) {
  graph::Graph g;
  graph::Builder b(g, DType::f64);
  const LlamaGraph m = build_llama(b, c, 1, kSeq / cp.ranks, {.context = cp});
  g.mark_output(m.loss);
  const auto grads = graph::append_backward(b, m.loss, m.parameters, graph::GradientOutput::fresh, seed);
  ops::CollectiveGroups groups;
  groups.by_group[static_cast<size_t>(cp.group)] = comm;
  groups.stream = stream;
  auto space = make_host_heap_space("test", MemorySpace::kUnlimited);
  exec::CpuExecutor e(g, *space, comm ? &groups : nullptr);
  std::vector<int32_t> tokens = testing::random_tokens(kSeq, 1, 37), targets = testing::random_tokens(kSeq, 2, 37);
  std::vector<int32_t> x_chunks, y_chunks;
  const std::span<const int32_t> x = take_context_chunks(cp, tokens, x_chunks);
  const std::span<const int32_t> y = take_context_chunks(cp, targets, y_chunks);
  e.bind(m.tokens, x);
  e.bind(m.targets, y);
  std::vector<std::vector<double>> w;
  for (size_t i = 0; i < m.parameters.size(); ++i) {
    w.push_back(testing::random_vector<double>(g.value(m.parameters[i]).shape.numel(), 100 + i, -0.5, 0.5));
  }
  for (size_t i = 0; i < m.parameters.size(); ++i) e.bind(m.parameters[i], std::span<double>(w[i]));
  e.run();
  Step s{e.read<double>(m.loss)[0], {}};
  for (graph::Value p : m.parameters) {
    auto d = e.read<double>(grads[p]);
    s.grads.emplace_back(d.begin(), d.end());
  }
  return s;
}

#ifdef SPILLWAY_HAS_GLOO

void expect_matches_one_device(const LlamaConfig& c, int ranks) {
  const Step want = run(c, {}, nullptr, nullptr, 1.0);
  std::vector<Step> got(static_cast<size_t>(ranks));
  const std::vector<std::string> errors =
      testing::run_thread_ranks(dist::RankGrid(1, 1, ranks, 1, ranks), [&](dist::World& world, int rank) {
        auto device = make_cpu_device();
        got[static_cast<size_t>(rank)] =
            run(c, {.rank = rank, .ranks = ranks, .group = static_cast<int>(dist::Dim::cp)},
                world.group(dist::Dim::cp), &device->stream(StreamKind::comm), 1.0 / ranks);
      });
  double loss = 0;
  for (int rank = 0; rank < ranks; ++rank) {
    ASSERT_EQ(errors[static_cast<size_t>(rank)], "") << "rank " << rank;
    loss += got[static_cast<size_t>(rank)].loss / ranks;
  }
  EXPECT_NEAR(loss, want.loss, 1e-12 * want.loss);
  for (size_t i = 0; i < want.grads.size(); ++i) {
    double err = 0, scale = 1e-30;
    for (size_t j = 0; j < want.grads[i].size(); ++j) {
      double sum = 0;
      for (const Step& s : got) sum += s.grads[i][j];
      err = std::max(err, std::abs(sum - want.grads[i][j]));
      scale = std::max(scale, std::abs(want.grads[i][j]));
    }
    EXPECT_LT(err / scale, 1e-12) << "parameter " << i;
  }
}

TEST(LlamaContext, TwoRanksSplittingTheSequenceMatchOneDevice) {
  expect_matches_one_device(testing::llama_config(37, 16, 24, 2, 4, 2), 2);
}

TEST(LlamaContext, FourRanksAndATiedTableMatchOneDevice) {
  expect_matches_one_device(testing::llama_config(37, 16, 24, 2, 4, 2, /*tied=*/true), 4);
}

#endif  // SPILLWAY_HAS_GLOO

// Rank r takes chunks r and 2 ranks - 1 - r: every rank's queries see as
// many keys in all (the causal work balanced).
TEST(LlamaContext, EachRankTakesAnEarlyAndALateChunk) {
  std::vector<int32_t> sequence(16), out;
  for (size_t i = 0; i < sequence.size(); ++i) sequence[i] = static_cast<int32_t>(i);
  const std::vector<std::vector<int32_t>> want = {{0, 1, 14, 15}, {2, 3, 12, 13}, {4, 5, 10, 11}, {6, 7, 8, 9}};
  for (int rank = 0; rank < 4; ++rank) {
    const std::span<const int32_t> mine = take_context_chunks({.rank = rank, .ranks = 4}, sequence, out);
    EXPECT_EQ(std::vector<int32_t>(mine.begin(), mine.end()), want[static_cast<size_t>(rank)]) << rank;
    int64_t keys_seen = 0;
    for (int32_t position : mine) keys_seen += position + 1;
    EXPECT_EQ(keys_seen, 2 * 17) << "rank " << rank << ": each rank's queries see 34 keys";
  }
  EXPECT_EQ(take_context_chunks({}, sequence, out).data(), sequence.data()) << "one rank: the sequence itself";
  try {
    take_context_chunks({.rank = 0, .ranks = 4}, std::span<const int32_t>(sequence).first(12), out);
    FAIL() << "12 tokens cut into 8 chunks";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--cp: a sequence of 12 tokens does not cut into 8 chunks (two for each of 4 ranks)");
  }
}

TEST(LlamaContext, MoreThanOneSequenceAMicroBatchIsRefused) {
  graph::Graph g;
  graph::Builder b(g, DType::f64);
  EXPECT_THROW(build_llama(b, testing::llama_config(37, 16, 24, 2, 4, 2), 2, 6, {.context = {.rank = 0, .ranks = 2}}),
               Error);
}

}  // namespace
}  // namespace spillway::model
