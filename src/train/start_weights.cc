#include "train/start_weights.h"

#include <omp.h>

#include <algorithm>
#include <filesystem>

#include "base/bytes.h"
#include "base/host_memory.h"
#include "model/gguf.h"
#include "model/gguf_llama.h"
#include "model/llama_config_json.h"
#include "model/llama_weights_io.h"
#include "model/lora_io.h"
#include "model/qlora_stream.h"
#include "train/engine.h"
#include "train/lora_host_need.h"

namespace spillway::train {

namespace fs = std::filesystem;

namespace {

bool quantizes_base(const RunConfig& run) { return run.lora.rank > 0 && run.lora.base != model::LoraBase::weights; }

StartWeights from(model::StreamedBase base) {
  return {std::move(base.weights), std::move(base.quantized)};
}

}  // namespace

void check_lora_host_memory(const model::LlamaConfig& config, const RunConfig& run, int64_t makers,
                            int ranks_on_host) {
  if (run.lora.rank == 0 || !picks_gpu(run.run.device)) return;
  const uint64_t held = resident_host_bytes();
  const auto ranks = static_cast<uint64_t>(std::max(1, ranks_on_host));
  const uint64_t budget = run.memory.host_mem
                              ? run.memory.host_mem / ranks
                              : held + static_cast<uint64_t>(0.9 * static_cast<double>(available_host_bytes())) / ranks;
  const std::string from = run.memory.host_mem ? "--host-mem" + std::string(ranks > 1 ? ", this rank's share" : "")
                                               : "what this process holds and 90% of what is available";
  check_lora_host_fits(lora_host_need(config, lora_config(run), run.lora.base, makers, held), budget, run.lora.base,
                       from);
}

StartWeights load_start_weights(const std::string& dir, const RunConfig& run, bool merge_adapter, int ranks_on_host) {
  std::error_code ec;
  // A GGUF file's config is in its header (mapped, not read).
  std::optional<model::LlamaConfig> config;
  if (fs::is_directory(dir, ec)) config = model::load_config((fs::path(dir) / "config.json").string());
  if (!config && fs::is_regular_file(dir, ec) && is_gguf_file(dir)) {
    config = model::gguf_llama_config(GgufFile(dir));
  }
  if (config) check_lora_host_memory(*config, run, 1, ranks_on_host);
  std::optional<model::LoraWeights> adapter;
  if (config && merge_adapter && model::holds_peft_adapter(dir)) adapter = model::load_peft_adapter(dir, *config);
  if (quantizes_base(run)) {
    return from(model::load_quantized_base(dir, lora_config(run), run.lora.base, adapter ? &*adapter : nullptr));
  }
  model::LlamaWeights weights = model::load_llama(dir);
  if (adapter) weights = model::merge_lora(weights, *adapter);
  return {std::move(weights), std::nullopt};
}

StartWeights random_start_weights(const model::LlamaConfig& config, const RunConfig& run, uint64_t seed,
                                  int ranks_on_host) {
  check_lora_host_memory(config, run, omp_get_max_threads(), ranks_on_host);
  if (!quantizes_base(run)) return {model::LlamaWeights::random(config, seed), std::nullopt};
  return from(model::random_quantized_base(config, seed, lora_config(run), run.lora.base));
}

}  // namespace spillway::train
