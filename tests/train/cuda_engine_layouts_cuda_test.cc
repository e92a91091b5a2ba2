// The GPU engine's layouts against the whole state on the device: the same
// kernels on the same inputs, so with the masters' rest and the moments at
// home the runs agree bit for bit; with weights streamed, activations
// offloaded and gradients sent home, the step must still compute the same
// numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/status.h"
#include "device/cuda/cuda_device.h"
#include "train/engine.h"
#include "testing/llama.h"

namespace spillway::train {
namespace {

model::LlamaConfig small(bool tied = false) {
  return testing::llama_config(1000, 256, 512, 3, 4, 2, tied);
}

struct TrainedRun {
  std::vector<double> losses, norms;
  double eval = 0;
  model::LlamaWeights weights;
  AdamW optimizer;
  std::string description;
  uint64_t peak = 0;
  // Whether the engine let go of the caller's masters once it held them.
  bool masters_let_go = false;
  // The state as read_state gives it, tensor by tensor, after the steps.
  model::LlamaWeights read_master, read_m, read_v;
};

// Three steps of o.micro_batches micro-batches each, then an evaluation.
TrainedRun train(EngineOptions o, bool tied = false) {
  const int64_t micro_batches = o.micro_batches;
  const auto config = small(tied);
  TrainedRun r;
  r.weights = model::LlamaWeights::random(config, 5, 0.05);
  if (!o.memory.bf16_moments) r.optimizer = AdamW(config);
  auto engine = make_engine(r.weights, r.optimizer, o);
  r.description = engine->description();
  r.masters_let_go = std::all_of(r.weights.tensors().begin(), r.weights.tensors().end(),
                                 [](const model::NamedTensor& t) { return t.data.empty(); });
  const size_t n = static_cast<size_t>(o.batch * o.seq * micro_batches);
  for (int step = 0; step < 3; ++step) {
    auto tokens = testing::random_tokens(2 * n, 40 + step, 1000);
    std::vector<int32_t> inputs(tokens.begin(), tokens.begin() + n), targets(tokens.begin() + n, tokens.end());
    StepStats s = engine->train_step(inputs, targets, micro_batches, 1e-3);
    r.losses.push_back(s.loss);
    r.norms.push_back(s.grad_norm);
  }
  const size_t m = static_cast<size_t>(o.batch * o.seq);
  auto tokens = testing::random_tokens(2 * m, 77, 1000);
  r.eval = engine->eval_loss(std::vector<int32_t>(tokens.begin(), tokens.begin() + m),
                             std::vector<int32_t>(tokens.begin() + m, tokens.end()));
  r.read_master = model::LlamaWeights::zeros(config);
  r.read_m = model::LlamaWeights::zeros(config);
  r.read_v = model::LlamaWeights::zeros(config);
  for (size_t i = 0; i < r.read_master.tensors().size(); ++i) {
    engine->read_state(StatePart::master, i, r.read_master.tensors()[i].data);
    engine->read_state(StatePart::m, i, r.read_m.tensors()[i].data);
    engine->read_state(StatePart::v, i, r.read_v.tensors()[i].data);
  }
  engine->sync_to_host();
  r.peak = engine->peak_device_bytes();
  return r;
}

bool same_bits(const model::LlamaWeights& a, const model::LlamaWeights& b) {
  for (size_t i = 0; i < a.tensors().size(); ++i) {
    const auto& x = a.tensors()[i].data;
    const auto& y = b.tensors()[i].data;
    if (std::memcmp(x.data(), y.data(), x.size() * 4) != 0) return false;
  }
  return true;
}

double relative_difference(const model::LlamaWeights& a, const model::LlamaWeights& b) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.tensors().size(); ++i) {
    for (size_t j = 0; j < a.tensors()[i].data.size(); ++j) {
      const double d = static_cast<double>(a.tensors()[i].data[j]) - b.tensors()[i].data[j];
      diff += d * d;
      ref += static_cast<double>(b.tensors()[i].data[j]) * b.tensors()[i].data[j];
    }
  }
  return std::sqrt(diff / ref);
}

// The same kernels on the same data, the state in other places: losses,
// gradient norms (summed per tensor where each sum lies) and weights agree
// to rounding.
void expect_same_training(const TrainedRun& a, const TrainedRun& b) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) {
    EXPECT_NEAR(b.losses[i], a.losses[i], 1e-6 * a.losses[i]) << i;
    EXPECT_NEAR(b.norms[i], a.norms[i], 1e-5 * a.norms[i]) << i;
  }
  EXPECT_LT(relative_difference(b.weights, a.weights), 1e-5);
}

EngineOptions options(OffloadMode offload, int64_t micro_batches = 1) {
  EngineOptions o;
  o.micro_batches = micro_batches;
  o.device = DeviceChoice::cuda;
  o.batch = 2;
  o.seq = 128;
  o.grad_clip = 1.0;
  o.memory.offload = offload;
  o.memory.host_mem = 1ull << 30;
  // The layouts are what these tests vary: nothing remade unless one asks.
  o.memory.recompute = RecomputeChoice::none;
  // The checkpoint's separate q, k, v (and gate, up) matmuls; the tests of
  // stacked projections say so.
  o.kernels.projections = ProjectionMode::separate;
  return o;
}

TEST(CudaOffloadEngine, WithTheStateOnTheDeviceItMatchesTheResidentEngineBitForBit) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  EngineOptions resident = options(OffloadMode::off, 2), planned = options(OffloadMode::on, 2);
  TrainedRun a = train(resident);
  TrainedRun b = train(planned);
  EXPECT_NE(b.description.find("planned: weights and gradients on the device"), std::string::npos) << b.description;
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.norms, b.norms);
  EXPECT_EQ(a.eval, b.eval);
  EXPECT_EQ(b.optimizer.steps_taken, 3);
  EXPECT_TRUE(same_bits(a.weights, b.weights));
  EXPECT_TRUE(same_bits(a.optimizer.m, b.optimizer.m));
  EXPECT_TRUE(same_bits(a.optimizer.v, b.optimizer.v));
}

// A tied embedding: the resident engine writes lm_head's weight gradient
// straight into the table's gradient and adds the batch's rows there when a
// step's first micro-batch overwrites the sums
// (CudaNodeRunner::set_tied_gradient_in_place); the planned engine keeps the
// product apart and adds it whole. One micro-batch and two (the second adds).
TEST(CudaOffloadEngine, TiedEmbeddingsTrainAsInTheResidentEngineBitForBit) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  for (int64_t micro_batches : {1, 2}) {
    TrainedRun a = train(options(OffloadMode::off, micro_batches), /*tied=*/true);
    TrainedRun b = train(options(OffloadMode::on, micro_batches), /*tied=*/true);
    EXPECT_NE(b.description.find("planned: weights and gradients on the device"), std::string::npos) << b.description;
    EXPECT_NE(a.description.find("lm_head's dW written into the tied embedding's gradient"), std::string::npos)
        << a.description;
    EXPECT_EQ(b.description.find("tied embedding"), std::string::npos) << b.description;
    EXPECT_EQ(a.losses, b.losses) << micro_batches;
    EXPECT_EQ(a.norms, b.norms) << micro_batches;
    EXPECT_TRUE(same_bits(a.weights, b.weights)) << micro_batches;
    EXPECT_TRUE(same_bits(a.optimizer.m, b.optimizer.m)) << micro_batches;
    EXPECT_TRUE(same_bits(a.optimizer.v, b.optimizer.v)) << micro_batches;
  }
}

// Stacked q|k|v and gate|up: the planned engine lays each stack's tensors
// back to back on the device and at home, and takes the norm one part per
// tensor, so it still trains as the resident engine does.
TEST(CudaOffloadEngine, StackedProjectionsTrainAsInTheResidentEngine) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  EngineOptions resident = options(OffloadMode::off, 2), planned = options(OffloadMode::on, 2);
  resident.kernels.projections = planned.kernels.projections = ProjectionMode::fused;
  TrainedRun a = train(resident);
  TrainedRun b = train(planned);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.norms, b.norms);
  EXPECT_TRUE(same_bits(a.weights, b.weights));
  EXPECT_TRUE(same_bits(a.optimizer.m, b.optimizer.m));
  // Weights streamed and the sums at home: the stacks move as one block.
  EngineOptions tight = options(OffloadMode::stream, 2);
  tight.kernels.projections = ProjectionMode::fused;
  tight.memory.device_mem = 150ull << 20;
  TrainedRun c = train(tight);
  EXPECT_NE(c.description.find("weights streamed from the host, gradient sums at home"), std::string::npos)
      << c.description;
  expect_same_training(a, c);
}

TEST(CudaOffloadEngine, UnderATightBudgetWeightsStreamAndActivationsGoHome) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  EngineOptions resident = options(OffloadMode::off);
  TrainedRun a = train(resident);
  // Weights and gradients at home; room for the kernel workspaces (two
  // 64 MiB cuBLASLt workspaces, the optimizer's staging) and a few
  // activations at a time.
  EngineOptions tight = options(OffloadMode::stream);
  tight.memory.device_mem = 150ull << 20;
  TrainedRun b = train(tight);
  EXPECT_NE(b.description.find("weights streamed from the host, gradient sums at home"), std::string::npos)
      << b.description;
  EXPECT_EQ(b.description.find("; 0 activations offloaded"), std::string::npos) << b.description;
  EXPECT_LE(b.peak, tight.memory.device_mem);
  expect_same_training(a, b);
  EXPECT_NEAR(b.eval, a.eval, 1e-6 * a.eval);
}

// The engine keeps the state once: it lets go of the caller's masters at
// start-up, and what it reads back tensor by tensor (a checkpoint's reads)
// is what sync_to_host makes whole, in every layout.
TEST(CudaOffloadEngine, TheStateIsKeptOnceAndReadsBackAsSyncGivesIt) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  EngineOptions bf16 = options(OffloadMode::on), tight = options(OffloadMode::stream);
  bf16.memory.bf16_moments = true;
  tight.memory.device_mem = 150ull << 20;
  for (const EngineOptions& o : {options(OffloadMode::off), options(OffloadMode::on), bf16, tight}) {
    TrainedRun r = train(o);
    SCOPED_TRACE(r.description);
    EXPECT_TRUE(r.masters_let_go);
    EXPECT_TRUE(same_bits(r.read_master, r.weights));
    EXPECT_TRUE(same_bits(r.read_m, r.optimizer.m));
    EXPECT_TRUE(same_bits(r.read_v, r.optimizer.v));
  }
}

TEST(CudaOffloadEngine, Bf16MomentsTrackFp32Moments) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  EngineOptions fp32 = options(OffloadMode::on), bf16 = options(OffloadMode::on);
  bf16.memory.bf16_moments = true;
  TrainedRun a = train(fp32);
  TrainedRun b = train(bf16);
  EXPECT_NE(b.description.find("bf16 AdamW moments"), std::string::npos) << b.description;
  EXPECT_EQ(a.losses[0], b.losses[0]);  // the first step's loss comes before any update
  for (size_t i = 1; i < a.losses.size(); ++i) EXPECT_NEAR(b.losses[i], a.losses[i], 1e-3 * a.losses[i]) << i;
  EXPECT_GT(relative_difference(b.weights, a.weights), 0.0);
  EXPECT_LT(relative_difference(b.weights, a.weights), 1e-3);
  // sync_to_host widened the bf16 moments into the caller's fp32 ones.
  ASSERT_EQ(b.optimizer.m.tensors().size(), a.optimizer.m.tensors().size());
  EXPECT_LT(relative_difference(b.optimizer.m, a.optimizer.m), 1e-2);
  EXPECT_LT(relative_difference(b.optimizer.v, a.optimizer.v), 1e-2);
}

// Both engines keep bf16 moments with the same kernel: with the state on the
// device, the same bits, and the caller's fp32 moments filled by sync_to_host.
TEST(CudaOffloadEngine, Bf16MomentsInTheResidentEngineMatchThePlannedEngineBitForBit) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  EngineOptions resident = options(OffloadMode::off, 2), planned = options(OffloadMode::on, 2);
  resident.memory.bf16_moments = planned.memory.bf16_moments = true;
  TrainedRun a = train(resident);
  TrainedRun b = train(planned);
  EXPECT_EQ(a.description.find("planned"), std::string::npos) << a.description;
  EXPECT_NE(a.description.find("bf16 AdamW moments"), std::string::npos) << a.description;
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.norms, b.norms);
  EXPECT_TRUE(same_bits(a.weights, b.weights));
  ASSERT_EQ(a.optimizer.m.tensors().size(), b.optimizer.m.tensors().size());
  EXPECT_TRUE(same_bits(a.optimizer.m, b.optimizer.m));
  EXPECT_TRUE(same_bits(a.optimizer.v, b.optimizer.v));
}

TEST(CudaOffloadEngine, RecomputationChangesNoBit) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  EngineOptions kept = options(OffloadMode::on, 2);
  TrainedRun a = train(kept);
  for (RecomputeChoice choice : {RecomputeChoice::selective, RecomputeChoice::layers}) {
    const std::string policy(enum_name(choice));
    EngineOptions remade = kept;
    remade.memory.recompute = choice;
    TrainedRun b = train(remade);
    EXPECT_NE(b.description.find(std::string("recomputation: ") + policy), std::string::npos) << b.description;
    EXPECT_EQ(a.losses, b.losses) << policy;
    EXPECT_EQ(a.norms, b.norms) << policy;
    EXPECT_TRUE(same_bits(a.weights, b.weights)) << policy;
  }
}

TEST(CudaOffloadEngine, GradientSumsAtHomeAccumulateMicroBatches) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  EngineOptions resident = options(OffloadMode::off, 2);
  TrainedRun a = train(resident);
  EngineOptions tight = options(OffloadMode::stream, 2);
  tight.memory.device_mem = 150ull << 20;
  TrainedRun b = train(tight);
  EXPECT_NE(b.description.find("gradient sums at home"), std::string::npos) << b.description;
  expect_same_training(a, b);
}

// The vocabulary-sized gradient sums on the device, the rest at home: the
// norm takes each tensor's part where its sum lies, in parameter order.
TEST(CudaOffloadEngine, VocabularySizedGradientSumsStayWhileTheRestGoHome) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  EngineOptions resident = options(OffloadMode::off, 2);
  TrainedRun a = train(resident);
  EngineOptions split = options(OffloadMode::on, 2);
  bool found = false;
  for (uint64_t mib = 400; mib >= 60 && !found; mib -= 5) {
    split.memory.device_mem = mib << 20;
    model::LlamaWeights w = model::LlamaWeights::random(small(), 5, 0.05);
    AdamW opt(small());
    try {
      found = make_engine(w, opt, split)->description().find("but the vocabulary-sized") != std::string::npos;
    } catch (const Error&) {
      break;  // below what any layout fits
    }
  }
  ASSERT_TRUE(found) << "no budget kept only the vocabulary-sized gradient sums on the device";
  TrainedRun b = train(split);
  expect_same_training(a, b);
}

// The head in chunks of 96 of a micro-batch's 256 rows (two whole, one
// part) trains and evaluates what the whole head does, to rounding: its
// dW sums the chunks in fp32 and the mean is weights of 1/counted. With the
// state at home too, where the gradient sum the head makes goes home.
TEST(CudaOffloadEngine, TheHeadInChunksTrainsWhatTheWholeHeadTrains) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  for (OffloadMode offload : {OffloadMode::off, OffloadMode::on}) {
    EngineOptions whole = options(offload, 2), chunked = whole;
    whole.kernels.loss_chunk_rows = 0;
    chunked.kernels.loss_chunk_rows = 96;
    const TrainedRun a = train(whole), b = train(chunked);
    EXPECT_NE(b.description.find("the logits 96 rows at a time"), std::string::npos) << b.description;
    EXPECT_EQ(a.description.find("rows at a time"), std::string::npos) << a.description;
    for (size_t i = 0; i < a.losses.size(); ++i) {
      EXPECT_NEAR(b.losses[i], a.losses[i], 1e-4 * a.losses[i]) << i;
      EXPECT_NEAR(b.norms[i], a.norms[i], 1e-3 * a.norms[i]) << i;
    }
    EXPECT_LT(relative_difference(b.weights, a.weights), 1e-3);
    EXPECT_NEAR(b.eval, a.eval, 1e-4 * a.eval);
  }
}

}  // namespace
}  // namespace spillway::train
