// LoRA and QLoRA on the GPU engine against the CPU engine: the same random
// base and adapters, the same batches; bf16 on the GPU, f32 on the CPU. AdamW
// runs with eps = 1 here, so that an update is nearly the gradient itself
// (sqrt(v) is far below 1): the adapters then differ by what the gradients
// do, not by a sign taken of a gradient bf16 sends across zero. Also: QLoRA
// on the GPU is LoRA over its NF4 round trip bit for bit, and a run carried
// on from the host's state continues bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "device/cuda/cuda_device.h"
#include "model/qlora.h"
#include "model/qlora_stream.h"
#include "train/engine.h"
#include "train/lora_state.h"
#include "testing/llama.h"
#include "testing/packed_rows.h"

namespace spillway::train {
namespace {

model::LlamaConfig small() { return testing::llama_config(1000, 256, 512, 2, 4, 2, true); }

model::LoraConfig all_projections() {
  return {.rank = 8, .alpha = 16, .targets = model::parse_lora_targets("all", "test")};
}

AdamW test_adamw(const model::LlamaConfig& config) {
  AdamW a(config);
  a.eps = 1.0;
  a.weight_decay = 0.0;
  return a;
}

EngineOptions options(LoraState* lora, model::LoraBase base, DeviceChoice device) {
  EngineOptions o;
  o.batch = 2;
  o.seq = 64;
  o.grad_clip = 0;
  o.device = device;
  o.lora = lora;
  o.lora_base = base;
  return o;
}

struct Batch {
  std::vector<int32_t> inputs, targets;
};
Batch batch(int step, const EngineOptions& o) {
  const auto n = static_cast<size_t>(o.batch * o.seq);
  const auto tokens = testing::random_tokens(2 * n, 10 + step, 1000);
  return {{tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(n)},
          {tokens.begin() + static_cast<std::ptrdiff_t>(n), tokens.end()}};
}

// sqrt(sum (a - b)^2 / sum b^2) over the tensors whose names end in `suffix`.
double relative_difference(const model::LoraWeights& a, const model::LoraWeights& b, const std::string& suffix) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < b.tensors().size(); ++i) {
    if (!b.tensors()[i].name.ends_with(suffix)) continue;
    for (size_t j = 0; j < b.tensors()[i].data.size(); ++j) {
      const double d = static_cast<double>(a.tensors()[i].data[j]) - b.tensors()[i].data[j];
      diff += d * d;
      ref += static_cast<double>(b.tensors()[i].data[j]) * b.tensors()[i].data[j];
    }
  }
  return std::sqrt(diff / ref);
}

bool same_bits(const model::LoraWeights& a, const model::LoraWeights& b) {
  for (size_t i = 0; i < a.tensors().size(); ++i) {
    if (a.tensors()[i].data != b.tensors()[i].data) return false;
  }
  return true;
}

// Five steps on the CPU and on the GPU from the same state: losses within
// 1%, gradient norms within 3%, the evaluation loss within 1% of ln(vocab),
// the adapters within 1% (A, which moves little) and 5% (B, which starts
// at zero and is all training), the base on the host untouched.
void expect_gpu_tracks_cpu(model::LoraBase base) {
  const auto config = small();
  auto w_cpu = model::LlamaWeights::random(config, 3, 0.05);
  auto w_gpu = w_cpu;
  LoraState l_cpu = LoraState::fresh(config, all_projections(), 5), l_gpu = l_cpu;
  AdamW opt_cpu = test_adamw(config), opt_gpu = test_adamw(config);
  const EngineOptions o_cpu = options(&l_cpu, base, DeviceChoice::cpu);
  const EngineOptions o_gpu = options(&l_gpu, base, DeviceChoice::cuda);
  auto cpu = make_engine(w_cpu, opt_cpu, o_cpu);
  auto gpu = make_engine(w_gpu, opt_gpu, o_gpu);
  EXPECT_NE(gpu->description().find("LoRA rank 8 on 14 projections"), std::string::npos) << gpu->description();
  if (base != model::LoraBase::weights) {
    EXPECT_NE(gpu->description().find("NF4 base"), std::string::npos) << gpu->description();
  }
  const model::LlamaWeights before = w_gpu;
  for (int step = 0; step < 5; ++step) {
    const Batch b = batch(step, o_cpu);
    const StepStats c = cpu->train_step(b.inputs, b.targets, 1, 0.5);
    const StepStats g = gpu->train_step(b.inputs, b.targets, 1, 0.5);
    EXPECT_NEAR(g.loss, c.loss, 1e-2 * c.loss) << "step " << step;
    EXPECT_NEAR(g.grad_norm, c.grad_norm, 3e-2 * c.grad_norm) << "step " << step;
  }
  const Batch held = batch(99, o_cpu);
  EXPECT_NEAR(gpu->eval_loss(held.inputs, held.targets), cpu->eval_loss(held.inputs, held.targets),
              1e-2 * std::log(1000.0));
  gpu->sync_to_host();
  EXPECT_EQ(opt_gpu.steps_taken, 5);
  EXPECT_LT(relative_difference(l_gpu.adapters, l_cpu.adapters, "lora_A.weight"), 1e-2);
  EXPECT_LT(relative_difference(l_gpu.adapters, l_cpu.adapters, "lora_B.weight"), 5e-2);
  EXPECT_LT(relative_difference(l_gpu.m, l_cpu.m, "weight"), 5e-2);
  for (size_t i = 0; i < before.tensors().size(); ++i) {
    EXPECT_EQ(w_gpu.tensors()[i].data, before.tensors()[i].data) << before.tensors()[i].name << " moved";
  }
}

TEST(CudaLoraEngine, LoraStepsTrackTheCpuEngine) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  expect_gpu_tracks_cpu(model::LoraBase::weights);
}

TEST(CudaLoraEngine, QloraStepsTrackTheCpuEngine) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  expect_gpu_tracks_cpu(model::LoraBase::nf4);
  expect_gpu_tracks_cpu(model::LoraBase::nf4_double);
}

// Instruction data on the GPU's LoRA: packed rows (positions restarting,
// attention inside each example) with the loss over the assistant's tokens
// alone, against the CPU engine's same step, and against the examples one
// a row on the GPU.
TEST(CudaLoraEngine, PackedInstructionRowsTrackTheCpuEngine) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const auto config = small();
  const testing::PackedExamples p = testing::packed_examples(64);
  auto w_cpu = model::LlamaWeights::random(config, 8, 0.05);
  auto w_gpu = w_cpu, w_rows = w_cpu;
  LoraState l_cpu = LoraState::fresh(config, all_projections(), 5), l_gpu = l_cpu, l_rows = l_cpu;
  AdamW opt_cpu = test_adamw(config), opt_gpu = test_adamw(config), opt_rows = test_adamw(config);
  EngineOptions packed = options(&l_gpu, model::LoraBase::nf4, DeviceChoice::cuda);
  packed.weighted_loss = packed.documents = true;
  EngineOptions on_cpu = packed, rows = packed;
  on_cpu.device = DeviceChoice::cpu;
  on_cpu.lora = &l_cpu;
  rows.lora = &l_rows;
  rows.batch = testing::PackedExamples::kExamples;
  rows.documents = false;
  auto gpu = make_engine(w_gpu, opt_gpu, packed);
  auto cpu = make_engine(w_cpu, opt_cpu, on_cpu);
  auto gpu_rows = make_engine(w_rows, opt_rows, rows);
  const PackedDocuments documents{p.positions, p.doc_starts};
  for (int step = 0; step < 3; ++step) {
    const StepStats g = gpu->train_step(p.inputs, p.targets, documents, 1, 0.5);
    const StepStats c = cpu->train_step(p.inputs, p.targets, documents, 1, 0.5);
    const StepStats r = gpu_rows->train_step(p.row_inputs, p.row_targets, 1, 0.5);
    EXPECT_NEAR(g.loss, c.loss, 1e-2 * c.loss) << "step " << step;
    EXPECT_NEAR(g.grad_norm, c.grad_norm, 3e-2 * c.grad_norm) << "step " << step;
    EXPECT_NEAR(g.loss, r.loss, 2e-3 * r.loss) << "step " << step;
  }
}

// The NF4 weights dequantized on the device before each matmul are the
// bf16 of their round trip: QLoRA trains the bits LoRA trains over a base
// holding that round trip.
TEST(CudaLoraEngine, QloraIsLoraOverTheRoundTripBitForBit) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const auto config = small();
  for (model::LoraBase base : {model::LoraBase::nf4, model::LoraBase::nf4_double}) {
    SCOPED_TRACE(std::string(model::lora_base_name(base)));
    auto w_q = model::LlamaWeights::random(config, 3, 0.05);
    auto w_rt = w_q;
    model::quantize_lora_base(w_rt, all_projections(), base);  // w_rt: the round trip, plain weights
    LoraState l_q = LoraState::fresh(config, all_projections(), 5), l_rt = l_q;
    AdamW opt_q = test_adamw(config), opt_rt = test_adamw(config);
    auto q = make_engine(w_q, opt_q, options(&l_q, base, DeviceChoice::cuda));
    auto rt = make_engine(w_rt, opt_rt, options(&l_rt, model::LoraBase::weights, DeviceChoice::cuda));
    for (int step = 0; step < 3; ++step) {
      const Batch b = batch(step, options(nullptr, base, DeviceChoice::cuda));
      EXPECT_EQ(q->train_step(b.inputs, b.targets, 1, 0.5).loss, rt->train_step(b.inputs, b.targets, 1, 0.5).loss)
          << "step " << step;
    }
    q->sync_to_host();
    rt->sync_to_host();
    EXPECT_TRUE(same_bits(l_q.adapters, l_rt.adapters));
    EXPECT_TRUE(same_bits(l_q.v, l_rt.v));
  }
}

// Two steps, the state back on the host (as a checkpoint writes it), a new
// engine from it, two more: the bits of four steps straight, with micro-batch
// accumulation, for LoRA and QLoRA.
TEST(CudaLoraEngine, CarryingOnFromTheHostStateIsBitIdentical) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const auto config = small();
  for (model::LoraBase base : {model::LoraBase::weights, model::LoraBase::nf4, model::LoraBase::nf4_double}) {
    SCOPED_TRACE(std::string(model::lora_base_name(base)));
    const auto w0 = model::LlamaWeights::random(config, 3, 0.05);
    const LoraState l0 = LoraState::fresh(config, all_projections(), 5);
    auto step_batch = [&](int step) {
      Batch a = batch(2 * step, options(nullptr, base, DeviceChoice::cuda));
      const Batch b = batch(2 * step + 1, options(nullptr, base, DeviceChoice::cuda));
      a.inputs.insert(a.inputs.end(), b.inputs.begin(), b.inputs.end());
      a.targets.insert(a.targets.end(), b.targets.begin(), b.targets.end());
      return a;
    };
    auto w_straight = w0;
    LoraState l_straight = l0;
    AdamW opt_straight(config);
    std::vector<double> straight;
    {
      auto e = make_engine(w_straight, opt_straight, options(&l_straight, base, DeviceChoice::cuda));
      for (int step = 0; step < 4; ++step) {
        const Batch b = step_batch(step);
        straight.push_back(e->train_step(b.inputs, b.targets, 2, 1e-2).loss);
      }
      e->sync_to_host();
    }
    auto w_halves = w0;
    LoraState l_halves = l0;
    AdamW opt_halves(config);
    std::vector<double> halves;
    for (int half = 0; half < 2; ++half) {
      // The second engine starts from what the first left on the host, the
      // base included (with QLoRA, the values it quantizes again).
      auto e = make_engine(w_halves, opt_halves, options(&l_halves, base, DeviceChoice::cuda));
      for (int step = 2 * half; step < 2 * half + 2; ++step) {
        const Batch b = step_batch(step);
        halves.push_back(e->train_step(b.inputs, b.targets, 2, 1e-2).loss);
      }
      e->sync_to_host();
    }
    EXPECT_EQ(halves, straight);
    EXPECT_EQ(opt_halves.steps_taken, 4);
    EXPECT_TRUE(same_bits(l_halves.adapters, l_straight.adapters));
    EXPECT_TRUE(same_bits(l_halves.m, l_straight.m));
    EXPECT_TRUE(same_bits(l_halves.v, l_straight.v));
  }
}

// A base quantized as it was drawn (model/qlora_stream.h), its targeted
// float32 never held: the GPU engine takes its NF4 tensors, trains the
// bits of the engine that quantized the whole model, and reads back the
// base as it was drawn, which a checkpoint writes.
TEST(CudaLoraEngine, ABaseQuantizedAsDrawnTrainsAndReadsBackAsTheWholeModel) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const auto config = small();
  for (model::LoraBase base : {model::LoraBase::nf4, model::LoraBase::nf4_double}) {
    SCOPED_TRACE(std::string(model::lora_base_name(base)));
    auto whole = model::LlamaWeights::random(config, 3, 0.05);
    const auto drawn = whole;
    model::StreamedBase streamed = model::random_quantized_base(config, 3, all_projections(), base, 0.05);
    LoraState l_whole = LoraState::fresh(config, all_projections(), 5), l_streamed = l_whole;
    AdamW opt_whole = test_adamw(config), opt_streamed = test_adamw(config);
    EngineOptions o = options(&l_streamed, base, DeviceChoice::cuda);
    o.lora_quantized = &streamed.quantized;
    auto s = make_engine(streamed.weights, opt_streamed, o);
    auto w = make_engine(whole, opt_whole, options(&l_whole, base, DeviceChoice::cuda));
    for (int step = 0; step < 3; ++step) {
      const Batch b = batch(step, o);
      EXPECT_EQ(s->train_step(b.inputs, b.targets, 1, 0.5).loss, w->train_step(b.inputs, b.targets, 1, 0.5).loss)
          << "step " << step;
    }
    s->sync_to_host();
    w->sync_to_host();
    EXPECT_TRUE(same_bits(l_streamed.adapters, l_whole.adapters));
    EXPECT_TRUE(streamed.weights.at("model.layers.0.self_attn.q_proj.weight").data.empty());
    for (size_t i = 0; i < drawn.tensors().size(); ++i) {
      std::vector<float> read(drawn.tensors()[i].data.size());
      s->read_state(StatePart::master, i, read);
      EXPECT_EQ(read, drawn.tensors()[i].data) << drawn.tensors()[i].name;
    }
  }
}

}  // namespace
}  // namespace spillway::train
