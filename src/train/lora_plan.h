// LoRA and QLoRA on one GPU, before any device work: which runs the GPU's
// LoRA engine takes, where its frozen base and its adapters' state lie on
// the device, and the device memory a step needs (the base, in bf16 or
// NF4, the adapters' state, the activations and the kernels' workspaces),
// checked up front against the budget with one line saying what does not
// fit. Kept apart from the engine so that it is tested without a GPU.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/recompute.h"
#include "model/llama_config.h"
#include "model/lora.h"
#include "train/engine.h"
#include "train/step_plan.h"

namespace spillway::train {

// Refuses, in one line naming the flag, what the GPU's LoRA engine does not
// support: tensor, pipeline and context parallelism, offloading, sharding
// the state, bf16 moments, recomputation other than none, layers or auto,
// and stacked projections.
void check_gpu_lora_options(const EngineOptions& options);

// The frozen base on the device. The weights LoRA's base keeps as loaded
// lie in one bf16 array; with QLoRA, the targeted projections' NF4 codes
// and scales lie in another, and one bf16 scratch array as large as the
// largest of them receives each just before a matmul reads it.
struct LoraBaseLayout {
  // Byte offsets of a checkpoint tensor (model::parameter_specs order): in
  // the bf16 array, or with `nf4` in the NF4 array: its packed codes, its
  // scales (float32 absmax, or the double-quantized 8-bit ones) and the
  // double-quantized scales' float32 absmax.
  struct Place {
    int64_t numel = 0;
    bool nf4 = false;
    uint64_t offset = 0;
    uint64_t packed = 0, scales = 0, scales2 = 0;
  };
  std::vector<Place> tensors;
  uint64_t bf16_bytes = 0;
  uint64_t nf4_bytes = 0;
  uint64_t scratch_bytes = 0;  // 0 without NF4
  uint64_t bytes() const { return bf16_bytes + nf4_bytes + scratch_bytes; }
};
LoraBaseLayout lora_base_layout(const model::LlamaConfig& config, const model::LoraConfig& lora,
                                model::LoraBase base);

// The adapters' state on the device: one array each of the bf16 working
// copy the step reads, the master's low half (ops/master_split.h: the two
// halves are the fp32 master, bit for bit), the fp32 gradient sums and the
// fp32 moments, each adapter at `offsets[i]` elements (aligned for the
// GEMMs) of `elements`.
struct LoraAdapterLayout {
  std::vector<uint64_t> offsets;
  uint64_t elements = 0;
  static constexpr uint64_t kBytesPerElement = 2 + 2 + 4 + 4 + 4;
  uint64_t bytes() const { return elements * kBytesPerElement; }
};
LoraAdapterLayout lora_adapter_layout(const model::LlamaConfig& config, const model::LoraConfig& lora);

// What a LoRA step needs on the device.
struct LoraDeviceNeed {
  uint64_t base = 0;         // LoraBaseLayout::bytes
  uint64_t adapters = 0;     // LoraAdapterLayout::bytes
  uint64_t activations = 0;  // the larger peak of the training and evaluation steps' values
  uint64_t other = 0;        // the kernels' workspaces, the step's inputs, the arena's slack
  uint64_t total() const { return base + adapters + activations + other; }
  // "base 14.96 GiB (bf16), adapters' state 640.0 MiB, activations 20.1 GiB, workspaces 2.6 GiB"
  std::string describe(model::LoraBase storage) const;
};

// The need of steps whose graphs are `train` and `eval`, with `workspaces`
// taken by their runners (measured by the engine, or
// estimated_kernel_workspaces where there is no GPU) in a pool of `budget`.
LoraDeviceNeed lora_device_need(const LoraBaseLayout& base, const LoraAdapterLayout& adapters,
                                const graph::Graph& train, const graph::Graph& eval, uint64_t workspaces,
                                uint64_t budget);

// Error naming --device-mem when `need` does not fit `budget`, saying what
// takes what and what would make it fit.
void check_lora_fits(const LoraDeviceNeed& need, uint64_t budget, model::LoraBase storage, bool recomputed);

// QLoRA's scratch: every NF4 weight of a step is bound to one array, and
// before each node that reads one, that weight is dequantized into it. By
// node of `step`, the checkpoint tensor (model::parameter_specs order) of
// the NF4 weight it reads, or -1. Error naming the node where one reads two.
std::vector<int> nf4_reads_by_node(const LlamaStep& step, const LoraBaseLayout& base);

// What a LoRA step on one GPU is planned from.
struct LoraStepRequest {
  model::LlamaConfig config;
  model::LoraConfig lora;
  model::LoraBase base = model::LoraBase::weights;
  int64_t batch = 1, seq = 1;
  bool weighted_loss = false, documents = false;
  RecomputeChoice recompute = RecomputeChoice::automatic;  // none, layers or auto
  uint64_t budget = 0;  // the device pool's bytes
};

// The training and evaluation steps' graphs of a plan, and their need.
struct LoraStepPlan {
  std::unique_ptr<LlamaStep> train, eval;
  LoraDeviceNeed need;
  bool recomputed = false;  // whole layers
};

// The steps as `r.recompute` says; auto keeps every activation where that
// fits r.budget, else recomputes whole layers. `workspaces` is shown each
// candidate's graphs (alive until it is shown the next or the plan ends)
// and says what their runners take beside the graphs' values: the engine
// makes its runners and measures them, `spillway plan` estimates them.
// The caller checks the chosen one fits (check_lora_fits) once it holds its
// graphs: what the runners of a step read must go before the step's graph.
LoraStepPlan plan_lora_step(const LoraStepRequest& r,
                            const std::function<uint64_t(const LlamaStep& train, const LlamaStep& eval)>& workspaces);

// Training FLOPs per token of a LoRA step (DESIGN.md's count, as
// model::training_flops_per_token's): the frozen matrices' forward and
// input-gradient products (4 per weight; no weight gradient), every
// adapter's three (6 per weight), and attention's 6·L·s·d.
double lora_training_flops_per_token(const model::LlamaConfig& config, const model::LoraConfig& lora, int64_t seq);

// The GPU's LoRA step graph (bf16, separate projections): with `backward`,
// the training step under `recompute`, else the evaluation step (plain
// mean, rows of one example each).
std::unique_ptr<LlamaStep> build_lora_step(const model::LlamaConfig& config, const model::LoraConfig& lora,
                                           int64_t batch, int64_t seq, bool backward, bool weighted_loss,
                                           bool documents, graph::RecomputePolicy recompute);

}  // namespace spillway::train
