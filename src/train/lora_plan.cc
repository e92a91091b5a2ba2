#include "train/lora_plan.h"

#include <algorithm>
#include <set>

#include "base/bytes.h"
#include "base/status.h"
#include "device/memory_space.h"
#include "graph/liveness.h"
#include "model/llama_config_json.h"
#include "ops/nf4.h"
#include "train/device_reserve.h"

namespace spillway::train {

namespace {

// Every array a kernel or a GEMM reads starts on this many bytes.
constexpr uint64_t kAlign = 256;
uint64_t aligned(uint64_t at) { return (at + kAlign - 1) / kAlign * kAlign; }

// The checkpoint names of the projections the adapters sit on
// ("model.layers.0.self_attn.q_proj.weight").
std::set<std::string> adapted_weights(const model::LlamaConfig& config, const model::LoraConfig& lora) {
  constexpr std::string_view kA = ".lora_A.weight";
  std::set<std::string> names;
  for (const model::ParameterSpec& s : model::lora_specs(config, lora)) {
    if (s.name.ends_with(kA)) names.insert(s.name.substr(0, s.name.size() - kA.size()) + ".weight");
  }
  return names;
}

uint64_t peak_values(const graph::Graph& g) {
  return graph::analyze_liveness(g, [](uint64_t n) { return MemorySpace::accounted_bytes(n); }).peak_bytes;
}

}  // namespace

void check_gpu_lora_options(const EngineOptions& o) {
  SPW_CHECK(o.lora != nullptr, "GPU LoRA engine", "made without LoRA adapters");
  SPW_CHECK(!o.tensor_parallel && !o.pipeline_parallel && !o.context_parallel,
            o.tensor_parallel ? "--tp" : o.pipeline_parallel ? "--pp" : "--cp",
            "LoRA on the GPU runs on one GPU or data-parallel ranks so far; drop the flag or add --device cpu");
  SPW_CHECK(o.shard == StateSharding::none || o.shard == StateSharding::automatic,
            "--shard " + std::string(enum_name(o.shard)), "LoRA's state is small; it is not sharded");
  SPW_CHECK(o.memory.offload == plan::OffloadMode::automatic || o.memory.offload == plan::OffloadMode::off,
            "--offload", "LoRA on the GPU keeps its base and adapters on the device; nothing is offloaded (a base ",
            "larger than the device: try --lora-base nf4)");
  SPW_CHECK(!o.memory.bf16_moments, "--bf16-moments", "the adapters' moments are small and kept in fp32");
  SPW_CHECK(o.kernels.projections != ProjectionMode::fused, "--projections fused",
            "LoRA's adapters sit on separate q, k, v, gate and up projections");
  const RecomputeChoice r = o.memory.recompute;
  SPW_CHECK(r == RecomputeChoice::none || r == RecomputeChoice::layers || r == RecomputeChoice::automatic,
            "--recompute", "LoRA on the GPU recomputes none, layers or auto (which takes layers where none does "
            "not fit)");
}

LoraBaseLayout lora_base_layout(const model::LlamaConfig& config, const model::LoraConfig& lora,
                                model::LoraBase base) {
  const std::set<std::string> adapted =
      base == model::LoraBase::weights ? std::set<std::string>{} : adapted_weights(config, lora);
  const bool dq = base == model::LoraBase::nf4_double;
  LoraBaseLayout layout;
  int64_t largest = 0;
  for (const model::ParameterSpec& s : model::parameter_specs(config)) {
    LoraBaseLayout::Place p;
    p.numel = s.shape.numel();
    p.nf4 = adapted.contains(s.name);
    if (!p.nf4) {
      p.offset = layout.bf16_bytes;
      layout.bf16_bytes = aligned(layout.bf16_bytes + static_cast<uint64_t>(p.numel) * 2);
    } else {
      const auto blocks = static_cast<uint64_t>(ops::nf4_blocks(p.numel));
      uint64_t& at = layout.nf4_bytes;
      p.packed = at;
      at = aligned(at + static_cast<uint64_t>(ops::nf4_packed_bytes(p.numel)));
      p.scales = at;
      at = aligned(at + blocks * (dq ? 1 : sizeof(float)));
      if (dq) {
        p.scales2 = at;
        at = aligned(at + static_cast<uint64_t>(ops::nf4_blocks(static_cast<int64_t>(blocks), ops::kNf4ScaleBlock)) *
                              sizeof(float));
      }
      largest = std::max(largest, p.numel);
    }
    layout.tensors.push_back(p);
  }
  layout.scratch_bytes = largest ? aligned(static_cast<uint64_t>(largest) * 2) : 0;
  return layout;
}

std::vector<int> nf4_reads_by_node(const LlamaStep& step, const LoraBaseLayout& base) {
  const graph::Graph& g = step.step.graph;
  const model::LlamaGraph& m = step.model;
  std::vector<int> nf4_of(g.values().size(), -1);  // value id -> its checkpoint tensor, where NF4
  for (size_t j = 0; j < m.parameters.size(); ++j) {
    const int t = m.parameter_parts[j].front();
    if (base.tensors.at(static_cast<size_t>(t)).nf4) nf4_of[static_cast<size_t>(m.parameters[j].id)] = t;
  }
  std::vector<int> reads(g.nodes().size(), -1);
  for (size_t k = 0; k < g.nodes().size(); ++k) {
    for (graph::Value in : g.nodes()[k].inputs) {
      const int t = nf4_of[static_cast<size_t>(in.id)];
      if (t < 0) continue;
      SPW_CHECK(reads[k] < 0 || reads[k] == t, g.nodes()[k].name, "reads two NF4 weights; QLoRA's scratch holds ",
                "one at a time");
      reads[k] = t;
    }
  }
  return reads;
}

LoraAdapterLayout lora_adapter_layout(const model::LlamaConfig& config, const model::LoraConfig& lora) {
  LoraAdapterLayout layout;
  constexpr uint64_t kAlignElements = kAlign / 2;  // the bf16 array's alignment; the fp32 ones' follows
  for (const model::ParameterSpec& s : model::lora_specs(config, lora)) {
    layout.offsets.push_back(layout.elements);
    layout.elements += (static_cast<uint64_t>(s.shape.numel()) + kAlignElements - 1) / kAlignElements * kAlignElements;
  }
  return layout;
}

std::string LoraDeviceNeed::describe(model::LoraBase storage) const {
  return "base " + format_bytes(base) +
         (storage == model::LoraBase::weights ? " (bf16)" : " (" + std::string(model::lora_base_name(storage)) +
                                                                 " projections, the rest bf16)") +
         ", adapters' state " + format_bytes(adapters) + ", activations " + format_bytes(activations) +
         ", workspaces and inputs " + format_bytes(other);
}

LoraDeviceNeed lora_device_need(const LoraBaseLayout& base, const LoraAdapterLayout& adapters,
                                const graph::Graph& train, const graph::Graph& eval, uint64_t workspaces,
                                uint64_t budget) {
  LoraDeviceNeed need;
  need.base = base.bytes();
  need.adapters = adapters.bytes();
  need.activations = std::max(peak_values(train), peak_values(eval));
  need.other = device_reserve(workspaces, budget, /*communicates=*/false);
  return need;
}

void check_lora_fits(const LoraDeviceNeed& need, uint64_t budget, model::LoraBase storage, bool recomputed) {
  if (need.total() <= budget) return;
  std::string hint = recomputed ? "" : "--recompute layers, ";
  hint += "a smaller --batch or --seq";
  if (storage == model::LoraBase::weights) hint += ", or --lora-base nf4";
  throw Error("--device-mem", "a LoRA step needs " + format_bytes(need.total()) + " on the device (" +
                                  need.describe(storage) + ") but has " + format_bytes(budget) + "; try " + hint);
}

LoraStepPlan plan_lora_step(const LoraStepRequest& r,
                            const std::function<uint64_t(const LlamaStep& train, const LlamaStep& eval)>& workspaces) {
  const LoraBaseLayout base = lora_base_layout(r.config, r.lora, r.base);
  const LoraAdapterLayout adapters = lora_adapter_layout(r.config, r.lora);
  LoraStepPlan p;
  auto take = [&](graph::RecomputePolicy recompute) {
    auto train = build_lora_step(r.config, r.lora, r.batch, r.seq, true, r.weighted_loss, r.documents, recompute);
    auto eval = build_lora_step(r.config, r.lora, r.batch, r.seq, false, false, false, recompute);
    // Shown before the last candidate's graphs go, which its runners may read.
    const uint64_t taken = workspaces(*train, *eval);
    p.need = lora_device_need(base, adapters, train->step.graph, eval->step.graph, taken, r.budget);
    p.train = std::move(train);
    p.eval = std::move(eval);
    p.recomputed = recompute != graph::RecomputePolicy::none;
  };
  take(r.recompute == RecomputeChoice::layers ? graph::RecomputePolicy::layers : graph::RecomputePolicy::none);
  if (r.recompute == RecomputeChoice::automatic && p.need.total() > r.budget) take(graph::RecomputePolicy::layers);
  return p;
}

double lora_training_flops_per_token(const model::LlamaConfig& config, const model::LoraConfig& lora, int64_t seq) {
  double adapters = 0;
  for (const model::ParameterSpec& s : model::lora_specs(config, lora)) adapters += static_cast<double>(s.shape.numel());
  return model::training_flops_per_token(config, seq) - 2.0 * static_cast<double>(model::matmul_parameter_count(config)) +
         6.0 * adapters;
}

std::unique_ptr<LlamaStep> build_lora_step(const model::LlamaConfig& config, const model::LoraConfig& lora,
                                           int64_t batch, int64_t seq, bool backward, bool weighted_loss,
                                           bool documents, graph::RecomputePolicy recompute) {
  return build_llama_step(config, batch, seq, /*fused_projections=*/false,
                          {.backward = backward, .recompute = backward ? recompute : graph::RecomputePolicy::none},
                          DType::bf16, backward && weighted_loss, backward && documents, {}, {}, {}, &lora);
}

}  // namespace spillway::train
