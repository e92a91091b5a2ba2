// LLaMA split over a tensor-parallel group by its declaration
// (model/llama_sharding.h) and the pass (graph/tensor_parallel.h): every
// rank's loss and gradients, ranks as threads talking through Gloo as the
// CPU backend's ranks do, against the single-device step in float64. Each
// rank's gradient of a split parameter must equal its piece of the whole
// gradient, and the sum over the ranks of a whole parameter's gradients the
// whole gradient: to 1e-12 relative, the reductions' order being all that
// differs.
#include "model/llama_sharding.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "device/cpu/cpu_device.h"
#include "dist/world.h"
#include "exec/executor.h"
#include "graph/autodiff.h"
#include "graph/builder.h"
#include "graph/tensor_parallel.h"
#include "model/llama_graph.h"
#include "testing/llama.h"
#include "testing/numeric.h"
#include "testing/thread_ranks.h"

namespace spillway::model {
namespace {

using graph::Placement;

struct Case {
  LlamaConfig config;
  int64_t batch, seq;
  bool fused_projections = false;
};

struct Step {
  double loss = 0;
  std::vector<std::vector<double>> grads;  // by parameter, build_llama's order
};

struct Model {
  graph::Graph g;
  graph::Builder b{g, DType::f64};
  LlamaGraph m;
  explicit Model(const Case& c) {
    m = build_llama(b, c.config, c.batch, c.seq, {.fused_projections = c.fused_projections});
    g.mark_output(m.loss);
  }
};

std::vector<double> weights(const graph::Graph& g, const LlamaGraph& m, size_t i) {
  return testing::random_vector<double>(g.value(m.parameters[i]).shape.numel(), 100 + i, -0.5, 0.5);
}

std::vector<int32_t> tokens(const Case& c, uint64_t seed) {
  return testing::random_tokens(static_cast<size_t>(c.batch * c.seq), seed, static_cast<int32_t>(c.config.vocab_size));
}

// Binds the inputs and runs; the loss and each of `grads` read back.
Step run(const graph::Graph& g, graph::Value tokens_value, graph::Value targets_value, graph::Value loss,
         const std::vector<graph::Value>& params, std::vector<std::vector<double>>& values,
         const graph::Gradients& grads, const Case& c, const ops::CollectiveGroups* groups) {
  auto space = make_host_heap_space("test:device", MemorySpace::kUnlimited);
  exec::CpuExecutor e(g, *space, groups);
  std::vector<int32_t> in = tokens(c, 1), out = tokens(c, 2);
  e.bind(tokens_value, std::span<int32_t>(in));
  e.bind(targets_value, std::span<int32_t>(out));
  for (size_t i = 0; i < params.size(); ++i) e.bind(params[i], std::span<double>(values[i]));
  e.run();
  Step s;
  s.loss = e.read<double>(loss)[0];
  for (graph::Value p : params) {
    auto d = e.read<double>(grads[p]);
    s.grads.emplace_back(d.begin(), d.end());
  }
  return s;
}

Step single_device(const Case& c) {
  Model model(c);
  const auto grads = graph::append_backward(model.b, model.m.loss, model.m.parameters);
  std::vector<std::vector<double>> values;
  for (size_t i = 0; i < model.m.parameters.size(); ++i) values.push_back(weights(model.g, model.m, i));
  return run(model.g, model.m.tokens, model.m.targets, model.m.loss, model.m.parameters, values, grads, c, nullptr);
}

graph::ParameterSplit split_of(const Case& c, const graph::ValueInfo& v) { return llama_parameter_split(c.config, v); }

// One rank's step: its graph from the pass, its pieces of the same weights;
// whole parameters' gradients summed over the group.
Step on_rank(const Case& c, const graph::TensorParallelism& tp, Communicator& comm, Stream& stream) {
  Model model(c);
  graph::RankGraph r = graph::shard_graph(
      model.g, DType::f64, [&](const graph::ValueInfo& v) { return split_of(c, v); }, tp);
  graph::Builder rb(r.graph, DType::f64);
  std::vector<graph::Value> params;
  std::vector<std::vector<double>> values;
  for (size_t i = 0; i < model.m.parameters.size(); ++i) {
    const graph::ValueInfo& whole = model.g.value(model.m.parameters[i]);
    params.push_back(r.of(model.m.parameters[i]));
    const std::vector<double> all = weights(model.g, model.m, i);
    values.push_back(graph::piece_of<double>(all, whole.shape, split_of(c, whole), tp.rank, tp.ranks));
  }
  const graph::Value loss = r.of(model.m.loss);
  const auto grads = graph::append_backward(rb, loss, params, graph::GradientOutput::fresh, graph::seed_gradient(tp));
  ops::CollectiveGroups groups;
  groups.by_group[static_cast<size_t>(tp.group)] = &comm;
  groups.stream = &stream;
  Step s = run(r.graph, r.of(model.m.tokens), r.of(model.m.targets), loss, params, values, grads, c, &groups);
  for (size_t i = 0; i < params.size(); ++i) {
    if (split_of(c, model.g.value(model.m.parameters[i])).placement != Placement::whole) continue;
    comm.all_reduce_sum(s.grads[i].data(), s.grads[i].size(), DType::f64, stream);
    comm.wait(stream);
  }
  return s;
}

double relative_error(std::span<const double> got, std::span<const double> want) {
  double err = 0, scale = 1e-30;
  for (size_t i = 0; i < got.size(); ++i) {
    err = std::max(err, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return err / scale;
}

#ifdef SPILLWAY_HAS_GLOO

// Every rank's step against the single device's; "" or the first mismatch.
void expect_matches_single_device(const Case& c, int ranks, bool sequence_parallel) {
  const Step want = single_device(c);
  Model names(c);
  std::vector<Step> got(static_cast<size_t>(ranks));
  const std::vector<std::string> errors =
      testing::run_thread_ranks(dist::RankGrid(1, 1, 1, ranks, ranks), [&](dist::World& world, int rank) {
        auto device = make_cpu_device();
        const graph::TensorParallelism tp{.rank = rank, .ranks = ranks, .group = static_cast<int>(dist::Dim::tp),
                                          .sequence_parallel = sequence_parallel};
        got[static_cast<size_t>(rank)] = on_rank(c, tp, *world.group(dist::Dim::tp), device->stream(StreamKind::comm));
      });
  for (int rank = 0; rank < ranks; ++rank) {
    ASSERT_EQ(errors[static_cast<size_t>(rank)], "") << "rank " << rank;
    const Step& s = got[static_cast<size_t>(rank)];
    EXPECT_NEAR(s.loss, want.loss, 1e-12 * std::abs(want.loss)) << "rank " << rank;
    for (size_t i = 0; i < want.grads.size(); ++i) {
      const graph::ValueInfo& p = names.g.value(names.m.parameters[i]);
      const std::vector<double> piece = graph::piece_of<double>(want.grads[i], p.shape, split_of(c, p), rank, ranks);
      ASSERT_EQ(s.grads[i].size(), piece.size()) << p.name;
      EXPECT_LT(relative_error(s.grads[i], piece), 1e-12) << "rank " << rank << " " << p.name;
    }
  }
}

// A vocabulary of 37 over 2 ranks: pieces of 19 rows, the last padded.
TEST(LlamaSharding, TensorParallelStepMatchesOneDevice) {
  expect_matches_single_device({testing::llama_config(37, 16, 24, 2, 4, 2), 2, 6}, 2, false);
}

TEST(LlamaSharding, SequenceParallelStepMatchesOneDevice) {
  expect_matches_single_device({testing::llama_config(37, 16, 24, 2, 4, 2), 2, 6}, 2, true);
}

TEST(LlamaSharding, StackedProjectionsAndATiedTableMatchOneDevice) {
  expect_matches_single_device({testing::llama_config(37, 16, 24, 2, 4, 2, true), 2, 6, true}, 2, true);
}

// Four ranks: pieces of 10 of the 37 rows (the last holds 7), one
// key/value head each.
TEST(LlamaSharding, FourRanksMatchOneDevice) {
  expect_matches_single_device({testing::llama_config(37, 32, 48, 2, 8, 4), 1, 8}, 4, true);
}

#endif  // SPILLWAY_HAS_GLOO

TEST(LlamaSharding, HeadsThatDoNotSplitEvenlyAreRefusedNamingThem) {
  const Case c{testing::llama_config(37, 16, 24, 1, 4, 2), 1, 6};
  Model model(c);
  try {
    graph::shard_graph(model.g, DType::f64, [&](const graph::ValueInfo& v) { return split_of(c, v); },
                       {.rank = 0, .ranks = 3});
    FAIL() << "4 heads split over 3 ranks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("heads"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("3 ranks"), std::string::npos) << e.what();
  }
}

TEST(LlamaSharding, DeclaresEachParameterAsMegatronSplitsIt) {
  const Case c{testing::llama_config(37, 16, 24, 1, 4, 2), 1, 6, true};
  Model model(c);
  for (graph::Value p : model.m.parameters) {
    const graph::ValueInfo& v = model.g.value(p);
    const graph::ParameterSplit s = split_of(c, v);
    const bool output_split = v.name.find("qkv_proj") != std::string::npos ||
                              v.name.find("gate_up") != std::string::npos ||
                              v.name.find("embed") != std::string::npos || v.name.find("lm_head") != std::string::npos;
    const bool input_split = v.name.find("o_proj") != std::string::npos || v.name.find("down") != std::string::npos;
    EXPECT_EQ(s.placement, output_split ? Placement::rows : input_split ? Placement::columns : Placement::whole)
        << v.name;
  }
}

}  // namespace
}  // namespace spillway::model
