#include "train/engine.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "base/status.h"
#include "device/cpu/cpu_device.h"
#include "ops/dropout.h"
#include "ops/matmul_op.h"
#include "train/loss_weights.h"
#include "train/pipeline_schedule.h"

#ifdef SPILLWAY_HAS_CUDA
#include "device/cuda/cuda_device.h"
#endif

namespace spillway::train {

std::string op_time_report(const graph::Graph& graph, const std::vector<double>& node_seconds, int steps,
                           double other_seconds) {
  std::map<std::string, double> by_kind;
  double total = other_seconds;
  for (size_t i = 0; i < node_seconds.size(); ++i) {
    const graph::Node& n = graph.nodes()[i];
    std::string kind(graph::op_name(n.kind));
    if (n.kind == graph::OpKind::matmul) {
      kind += n.name.find("lm_head") != std::string::npos ? " (lm_head" : " (layers";
      kind += n.backward ? ", backward)" : ", forward)";
    }
    by_kind[kind] += node_seconds[i];
    total += node_seconds[i];
  }
  if (other_seconds > 0) by_kind["optimizer (norm, clip, AdamW)"] = other_seconds;
  std::string out;
  char line[200];
  for (const auto& [kind, secs] : by_kind) {
    std::snprintf(line, sizeof line, "  %-36s %9.3f ms/step  %5.1f%%\n", kind.c_str(), secs * 1e3 / steps,
                  100.0 * secs / total);
    out += line;
  }

  // The same time by call signature (op, pass, shapes), heaviest first, with
  // the rate each reaches: what to compare against the GEMM and HBM ceilings.
  struct Signature {
    double seconds = 0;
    int nodes = 0;
    double flops = 0;  // matmul only
    double bytes = 0;  // every input and output, read or written once
  };
  std::map<std::string, Signature> by_call;
  for (size_t i = 0; i < node_seconds.size(); ++i) {
    const graph::Node& n = graph.nodes()[i];
    std::string key = std::string(graph::op_name(n.kind)) + (n.backward ? " bwd " : " fwd ");
    double bytes = 0;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const graph::ValueInfo& v = graph.value(n.inputs[k]);
      if (k) key += ',';
      key += v.shape.str();
      bytes += static_cast<double>(v.bytes());
    }
    for (const graph::Value o : n.outputs) bytes += static_cast<double>(graph.value(o).bytes());
    if (n.kind == graph::OpKind::matmul) {
      key += std::string(n.attrs.trans_a ? " Aᵀ" : "") + (n.attrs.trans_b ? " Bᵀ" : "") + (n.attrs.accumulate ? " +=" : "");
    }
    Signature& s = by_call[key];
    s.seconds += node_seconds[i];
    s.nodes += 1;
    s.bytes += bytes;
    if (n.kind == graph::OpKind::matmul) s.flops += ops::matmul_dims(graph, n).flops();
  }
  std::vector<std::pair<std::string, Signature>> heaviest(by_call.begin(), by_call.end());
  std::sort(heaviest.begin(), heaviest.end(), [](const auto& x, const auto& y) { return x.second.seconds > y.second.seconds; });
  if (heaviest.size() > 30) heaviest.resize(30);
  out += "by call (heaviest first):\n";
  for (const auto& [key, s] : heaviest) {
    if (s.seconds <= 0) continue;
    const double rate = s.flops > 0 ? s.flops / s.seconds / 1e12 : s.bytes / s.seconds / 1e9;
    std::snprintf(line, sizeof line, "  %8.3f ms/step  %3d× %7.1f %s  %s\n", s.seconds * 1e3 / steps, s.nodes,
                  rate, s.flops > 0 ? "TFLOP/s" : "GB/s   ", key.c_str());
    out += line;
  }
  return out;
}

size_t micro_batch_tokens(const EngineOptions& options, std::span<const int32_t> inputs,
                          std::span<const int32_t> targets, const PackedDocuments& documents,
                          int64_t micro_batches) {
  const auto n = static_cast<size_t>(options.batch * options.seq);
  SPW_CHECK(inputs.size() == n * static_cast<size_t>(micro_batches) && targets.size() == inputs.size(),
            "train step", "got ", inputs.size(), " tokens for ", micro_batches, " micro-batches of ", n);
  const size_t want = options.documents ? inputs.size() : 0;
  SPW_CHECK(documents.positions.size() == want && documents.doc_starts.size() == want, "train step", "got ",
            documents.positions.size(), " positions and ", documents.doc_starts.size(), " document starts for ",
            inputs.size(), " tokens ", options.documents ? "of packed rows" : "of rows that are not packed");
  return n;
}

bool picks_gpu(DeviceChoice device) {
#ifdef SPILLWAY_HAS_CUDA
  return device == DeviceChoice::cuda || (device == DeviceChoice::automatic && cuda_device_count() > 0);
#else
  SPW_CHECK(device != DeviceChoice::cuda, "--device", "this spillway was built without CUDA (SPILLWAY_CUDA=OFF)");
  return false;
#endif
}

model::QuantizedBase take_quantized_base(const EngineOptions& options, const model::LlamaConfig& config) {
  model::QuantizedBase& q = *options.lora_quantized;
  SPW_CHECK(options.lora && q.storage == options.lora_base &&
                q.names == model::quantized_weight_names(config, options.lora->adapters.lora(), options.lora_base) &&
                q.tensors.size() == q.names.size(),
            "--lora-base", "the quantized base given is not the ", model::lora_base_name(options.lora_base),
            " base of the adapters' targets");
  return std::move(q);
}

uint64_t micro_batch_dropout_key(const EngineOptions& o, int64_t steps_taken, int64_t micro_batches, int64_t micro) {
  const int64_t rank = o.data_parallel ? o.data_parallel->rank() : 0;
  return ops::dropout_micro_batch_key(o.seed, steps_taken, rank * micro_batches + micro);
}

double step_token_weight(Engine& engine, std::span<const int32_t> targets, int64_t micro_batches, int ranks) {
  double counted = static_cast<double>(counted_targets(targets));
  engine.sum_over_ranks(std::span<double>(&counted, 1));
  return loss_token_weight(micro_batches, ranks, counted);
}

std::unique_ptr<Device> make_run_device(DeviceChoice device, int gpu_ordinal) {
#ifdef SPILLWAY_HAS_CUDA
  if (picks_gpu(device)) {
    SPW_CHECK(gpu_ordinal >= 0 && gpu_ordinal < cuda_device_count(), "--device cuda", "GPU ", gpu_ordinal,
              " is not visible (", cuda_device_count(), " are)");
    set_current_cuda_device(gpu_ordinal);
    return make_cuda_device(gpu_ordinal);
  }
#else
  picks_gpu(device);
  (void)gpu_ordinal;
#endif
  return make_cpu_device();
}

std::unique_ptr<Engine> make_engine(model::LlamaWeights& weights, AdamW& optimizer, const EngineOptions& options) {
  SPW_CHECK(options.lora || options.lora_base == model::LoraBase::weights, "--lora-base",
            model::lora_base_name(options.lora_base), " keeps LoRA's frozen base; it needs --lora-rank");
  check_virtual_stages(options.pipeline_parallel ? options.pipeline_parallel->size() : 1, options.virtual_stages,
                       weights.config().num_hidden_layers);
#ifdef SPILLWAY_HAS_CUDA
  // LoRA has an engine of its own: its state is the adapters', all on the device.
  if (picks_gpu(options.device) && options.lora) return make_cuda_lora_engine(weights, optimizer, options);
  if (picks_gpu(options.device)) return make_cuda_engine(weights, optimizer, options);
#else
  picks_gpu(options.device);
#endif
  // The CPU engine keeps every value; auto chooses that.
  SPW_CHECK(options.memory.recompute == RecomputeChoice::none || options.memory.recompute == RecomputeChoice::automatic,
            "--recompute", "recomputation is a feature of the GPU engine (on the CPU, none or auto)");
  SPW_CHECK(!options.memory.bf16_moments, "--bf16-moments", "bf16 AdamW moments are a feature of the GPU engine; "
            "the CPU engine keeps fp32 moments");
  return make_cpu_engine(weights, optimizer, options);
}

}  // namespace spillway::train
