// A full training step on the GPU against the CPU backend: same weights,
// same batches; bf16 on the GPU, f32 on the CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "base/status.h"
#include "device/cuda/cuda_device.h"
#include "ops/gemm_hopper.h"
#include "train/engine.h"
#include "train/instruction_batches.h"
#include "train/instruction_packing.h"
#include "testing/llama.h"
#include "testing/packed_rows.h"

namespace spillway::train {
namespace {

model::LlamaConfig small() {
  return testing::llama_config(1000, 256, 512, 2, 4, 2, true);
}

TEST(CudaEngine, StepsMatchTheCpuEngine) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const auto config = small();
  EngineOptions o;
  o.batch = 2;
  o.seq = 64;
  o.grad_clip = 1.0;
  auto w_cpu = model::LlamaWeights::random(config, 3, 0.05);
  auto w_gpu = w_cpu;
  AdamW opt_cpu(config), opt_gpu(config);
  auto cpu = make_cpu_engine(w_cpu, opt_cpu, o);
  auto gpu = make_cuda_engine(w_gpu, opt_gpu, o);
  EXPECT_EQ(gpu->description().rfind("cuda:0", 0), 0u);

  const size_t n = static_cast<size_t>(o.batch * o.seq);
  for (int step = 0; step < 5; ++step) {
    auto tokens = testing::random_tokens(2 * n, 10 + step, 1000);
    std::vector<int32_t> inputs(tokens.begin(), tokens.begin() + n), targets(tokens.begin() + n, tokens.end());
    StepStats a = cpu->train_step(inputs, targets, 1, 1e-3);
    StepStats b = gpu->train_step(inputs, targets, 1, 1e-3);
    EXPECT_NEAR(b.loss, a.loss, 1e-2 * a.loss) << "step " << step;
    EXPECT_NEAR(b.grad_norm, a.grad_norm, 3e-2 * a.grad_norm) << "step " << step;
  }
  auto tokens = testing::random_tokens(2 * n, 99, 1000);
  std::vector<int32_t> inputs(tokens.begin(), tokens.begin() + n), targets(tokens.begin() + n, tokens.end());
  EXPECT_NEAR(gpu->eval_loss(inputs, targets), cpu->eval_loss(inputs, targets), 1e-2 * std::log(1000.0));

  // The GPU's fp32 master weights come back to the host and track the CPU's.
  gpu->sync_to_host();
  EXPECT_EQ(opt_gpu.steps_taken, 5);
  double diff = 0, ref = 0;
  for (size_t i = 0; i < w_cpu.tensors().size(); ++i) {
    for (size_t j = 0; j < w_cpu.tensors()[i].data.size(); ++j) {
      double d = w_gpu.tensors()[i].data[j] - w_cpu.tensors()[i].data[j];
      diff += d * d;
      ref += static_cast<double>(w_cpu.tensors()[i].data[j]) * w_cpu.tensors()[i].data[j];
    }
  }
  EXPECT_LT(std::sqrt(diff / ref), 2e-2);
}

// Gradients accumulate in the step graph (beta = 1 matmuls, accumulating
// embedding and RMSNorm kernels, the tied embedding's add) into buffers the
// engine zeroes once per step; AdamW takes the mean, clipped, through one
// scale. 2 micro-batches of batch 2 must update as 1 of batch 4.
TEST(CudaEngine, AccumulatedMicroBatchesEqualOneBigBatch) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const auto config = small();  // tied embeddings
  for (double clip : {0.0, 0.05}) {
    SCOPED_TRACE("clip " + std::to_string(clip));
    EngineOptions whole_opts, half_opts;
    whole_opts.batch = 4;
    half_opts.batch = 2;
    whole_opts.seq = half_opts.seq = 32;
    whole_opts.grad_clip = half_opts.grad_clip = clip;
    auto w1 = model::LlamaWeights::random(config, 4, 0.05);
    auto w2 = w1;
    const auto w0 = w1;
    AdamW o1(config), o2(config);
    auto whole = make_cuda_engine(w1, o1, whole_opts);
    auto halves = make_cuda_engine(w2, o2, half_opts);
    for (int step = 0; step < 2; ++step) {
      auto tokens = testing::random_tokens(256, 5 + step, 1000);
      std::vector<int32_t> inputs(tokens.begin(), tokens.begin() + 128), targets(tokens.begin() + 128, tokens.end());
      StepStats a = whole->train_step(inputs, targets, 1, 1e-3);
      StepStats b = halves->train_step(inputs, targets, 2, 1e-3);
      EXPECT_NEAR(a.loss, b.loss, 1e-3 * a.loss) << "step " << step;
      EXPECT_NEAR(a.grad_norm, b.grad_norm, 1e-2 * a.grad_norm) << "step " << step;
      if (clip > 0) {
        EXPECT_GT(a.grad_norm, clip) << "the case must clip";
      }
    }
    whole->sync_to_host();
    halves->sync_to_host();
    // AdamW's first moment is a sum of scaled gradients: the mean over
    // micro-batches and the clipping factor show in it directly (AdamW's
    // update itself hardly depends on the gradients' scale).
    auto rel = [](const model::LlamaWeights& a, const model::LlamaWeights& b, const model::LlamaWeights* base) {
      double diff = 0, ref = 0;
      for (size_t i = 0; i < a.tensors().size(); ++i) {
        for (size_t j = 0; j < a.tensors()[i].data.size(); ++j) {
          const double x = a.tensors()[i].data[j], y = b.tensors()[i].data[j];
          const double x0 = base ? base->tensors()[i].data[j] : 0.0;
          diff += (x - y) * (x - y);
          ref += (x - x0) * (x - x0);
        }
      }
      return std::sqrt(diff / ref);
    };
    EXPECT_LT(rel(o1.m, o2.m, nullptr), 5e-2);
    EXPECT_LT(rel(o1.v, o2.v, nullptr), 1e-1);
    // The weights moved the same way, up to the bf16 noise that flips the
    // sign of the smallest gradients.
    EXPECT_LT(rel(w1, w2, &w0), 0.5);
  }
}

TEST(CudaEngine, RunsAreBitwiseRepeatable) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const auto config = small();
  EngineOptions o;
  o.batch = 2;
  o.seq = 64;
  std::vector<double> losses[2];
  for (int run = 0; run < 2; ++run) {
    auto w = model::LlamaWeights::random(config, 6, 0.05);
    AdamW opt(config);
    auto e = make_cuda_engine(w, opt, o);
    for (int step = 0; step < 3; ++step) {
      auto tokens = testing::random_tokens(256, 20 + step, 1000);
      std::vector<int32_t> inputs(tokens.begin(), tokens.begin() + 128), targets(tokens.begin() + 128, tokens.end());
      losses[run].push_back(e->train_step(inputs, targets, 1, 1e-3).loss);
    }
  }
  EXPECT_EQ(losses[0], losses[1]);
}

// The q|k|v product with its RoPE, the MLP's gate|up product with its
// SwiGLU gate, and down's dX product with SwiGLU's backward, in the own
// Hopper GEMM (the small model's shapes are whole tiles at seq 128) against
// cuBLASLt and the separate kernels: the same bits, step after step.
// Elsewhere both runs take cuBLASLt.
TEST(CudaEngine, OwnGemmGivesCublasLtsBits) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const auto config = small();
  auto run = [&](bool own_gemm) {
    EngineOptions o;
    o.batch = 2;
    o.seq = 128;
    o.kernels.own_gemm = own_gemm;
    auto w = model::LlamaWeights::random(config, 8, 0.05);
    AdamW opt(config);
    auto e = make_cuda_engine(w, opt, o);
    // The description says which kernel runs the 2 layers' q|k|v, gate|up and down dX.
    const bool own = own_gemm && ops::hopper_gemm_available(0);
    const std::string count = std::string(" in the own Hopper GEMM in ") + (own ? "2" : "0") + " of 2 nodes";
    for (const char* what : {"q|k|v with its RoPE", "gate|up with its SwiGLU gate", "down's dX with SwiGLU's backward"}) {
      EXPECT_NE(e->description().find(std::string(what) + count), std::string::npos) << e->description();
    }
    std::vector<double> losses;
    for (int step = 0; step < 3; ++step) {
      auto tokens = testing::random_tokens(512, 40 + step, 1000);
      std::vector<int32_t> inputs(tokens.begin(), tokens.begin() + 256), targets(tokens.begin() + 256, tokens.end());
      losses.push_back(e->train_step(inputs, targets, 1, 1e-3).loss);
    }
    e->sync_to_host();
    return std::make_pair(losses, w);
  };
  const auto [own_losses, own] = run(true);
  const auto [lib_losses, lib] = run(false);
  EXPECT_EQ(own_losses, lib_losses);
  for (size_t i = 0; i < own.tensors().size(); ++i) {
    EXPECT_EQ(own.tensors()[i].data, lib.tensors()[i].data) << own.tensors()[i].name;
  }
}

TEST(CudaEngine, ReplayedStepsEqualEagerOnesBitForBit) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const auto config = small();
  auto run = [&](bool cuda_graph, std::vector<double>& losses) {
    EngineOptions o;
    o.batch = 2;
    o.seq = 64;
    o.kernels.cuda_graph = cuda_graph;
    auto w = model::LlamaWeights::random(config, 3, 0.05);
    AdamW opt(config);
    o.micro_batches = 2;
    auto gpu = make_cuda_engine(w, opt, o);
    // Two micro-batches a step: the first writes the gradients and the
    // second adds into them, each replayed from its own capture.
    const size_t n = static_cast<size_t>(o.batch * o.seq * o.micro_batches);
    for (int step = 0; step < 4; ++step) {
      auto tokens = testing::random_tokens(2 * n, 30 + step, 1000);
      std::vector<int32_t> inputs(tokens.begin(), tokens.begin() + n), targets(tokens.begin() + n, tokens.end());
      losses.push_back(gpu->train_step(inputs, targets, o.micro_batches, 1e-3).loss);
    }
    EXPECT_EQ(gpu->replays_cuda_graph(), cuda_graph);
    gpu->sync_to_host();
    return w;
  };
  EXPECT_TRUE(EngineOptions{}.kernels.cuda_graph);  // the default
  std::vector<double> eager_losses, replay_losses;
  const auto eager = run(false, eager_losses);
  // Step 1's first micro-batch eager, each mode captured on its next run, then replayed.
  const auto replayed = run(true, replay_losses);
  EXPECT_EQ(eager_losses, replay_losses);
  for (size_t i = 0; i < eager.tensors().size(); ++i) {
    EXPECT_EQ(eager.tensors()[i].data, replayed.tensors()[i].data) << eager.tensors()[i].name;
  }
}

// The weighted loss of instruction data on the GPU: micro-batches counting
// 60 and 2 targets update as the one batch holding them all (the plain mean
// over its counted targets), and as the CPU engine's weighted step does.
TEST(CudaEngine, WeightedLossOfUnevenMicroBatchesEqualsOneBatch) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const auto config = small();
  EngineOptions weighted;
  weighted.batch = 2;
  weighted.seq = 32;
  weighted.grad_clip = 0;
  weighted.weighted_loss = true;
  EngineOptions plain = weighted;
  plain.batch = 4;
  plain.weighted_loss = false;
  auto w_halves = model::LlamaWeights::random(config, 6, 0.05);
  auto w_plain = w_halves, w_cpu = w_halves;
  AdamW o_halves(config), o_plain(config), o_cpu(config);
  auto halves = make_cuda_engine(w_halves, o_halves, weighted);
  auto whole = make_cuda_engine(w_plain, o_plain, plain);
  auto cpu = make_cpu_engine(w_cpu, o_cpu, weighted);
  for (int step = 0; step < 3; ++step) {
    auto tokens = testing::random_tokens(256, 30 + step, 1000);
    std::vector<int32_t> inputs(tokens.begin(), tokens.begin() + 128), targets(tokens.begin() + 128, tokens.end());
    for (size_t i = 64; i < 128; ++i) {
      if (i != 70 && i != 127) targets[i] = -100;  // the second micro-batch counts two targets
    }
    const StepStats a = halves->train_step(inputs, targets, 2, 1e-3);
    const StepStats b = whole->train_step(inputs, targets, 1, 1e-3);
    const StepStats c = cpu->train_step(inputs, targets, 2, 1e-3);
    EXPECT_NEAR(a.loss, b.loss, 2e-3 * b.loss) << "step " << step;
    EXPECT_NEAR(a.grad_norm, b.grad_norm, 2e-2 * b.grad_norm) << "step " << step;
    EXPECT_NEAR(a.loss, c.loss, 1e-2 * c.loss) << "step " << step;
    EXPECT_NEAR(a.grad_norm, c.grad_norm, 3e-2 * c.grad_norm) << "step " << step;
  }
}

// Packed rows on the GPU (positions per token for RoPE, attention kept
// inside each example by the own kernel's document mask): two rows holding
// six examples step as the six examples one a row do, and as the CPU
// engine's packed step.
TEST(CudaEngine, PackedRowsStepAsTheirExamplesOneARow) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const auto config = small();
  constexpr int64_t kSeq = 64;
  const testing::PackedExamples p = testing::packed_examples(kSeq);
  const std::vector<int32_t>&inputs = p.inputs, &targets = p.targets, &positions = p.positions,
                             &doc_starts = p.doc_starts, &row_inputs = p.row_inputs, &row_targets = p.row_targets;

  EngineOptions packed;
  packed.batch = 2;
  packed.seq = kSeq;
  packed.grad_clip = 0;
  packed.weighted_loss = true;
  packed.documents = true;
  EngineOptions rows = packed;
  rows.batch = testing::PackedExamples::kExamples;
  rows.documents = false;
  auto w_packed = model::LlamaWeights::random(config, 8, 0.05);
  auto w_rows = w_packed, w_cpu = w_packed;
  AdamW o_packed(config), o_rows(config), o_cpu(config);
  auto gpu_packed = make_cuda_engine(w_packed, o_packed, packed);
  auto gpu_rows = make_cuda_engine(w_rows, o_rows, rows);
  auto cpu_packed = make_cpu_engine(w_cpu, o_cpu, packed);
  const PackedDocuments documents{positions, doc_starts};
  // A small rate: AdamW's first updates are about lr times the gradient's
  // sign, so bf16's rounding in the two layouts moves the weights apart by
  // up to 2 lr where a gradient is near zero.
  for (int step = 0; step < 3; ++step) {
    const StepStats a = gpu_packed->train_step(inputs, targets, documents, 1, 1e-4);
    const StepStats b = gpu_rows->train_step(row_inputs, row_targets, 1, 1e-4);
    const StepStats c = cpu_packed->train_step(inputs, targets, documents, 1, 1e-4);
    EXPECT_NEAR(a.loss, b.loss, 2e-3 * b.loss) << "step " << step;
    EXPECT_NEAR(a.grad_norm, b.grad_norm, 2e-2 * b.grad_norm) << "step " << step;
    EXPECT_NEAR(a.loss, c.loss, 1e-2 * c.loss) << "step " << step;
    EXPECT_NEAR(a.grad_norm, c.grad_norm, 3e-2 * c.grad_norm) << "step " << step;
  }
  // Rows that are not one run of documents are refused before a kernel sees them.
  std::vector<int32_t> broken = doc_starts;
  broken[10] = 3;
  EXPECT_THROW(gpu_packed->train_step(inputs, targets, PackedDocuments{positions, broken}, 1, 1e-4), Error);
}

}  // namespace
}  // namespace spillway::train
