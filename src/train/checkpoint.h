// Training checkpoints.
//
// A checkpoint is a folder RUN/step-NNNNNNN/ that is first of all a Hugging
// Face model directory (config.json, model.safetensors, tokenizer.json or
// tokenizer.model, tokenizer_config.json, generation_config.json), so
// `generate`, `finetune` and transformers read it as is, plus what resuming
// needs: optimizer.safetensors (AdamW moments) and trainer_state.json (step,
// data position, options). It is written under a temporary name, fsynced and
// renamed into place; then RUN/latest, itself replaced atomically, names it.
// Old checkpoints leave the same way: renamed to `step-N.deleting`, then
// deleted. A crash at any moment leaves the previous checkpoint intact and
// named, and every step folder that exists complete; what it leaves behind
// (temporaries, `.deleting` folders) the next run removes at its start.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "model/tokenizer.h"
#include "model/llama_weights.h"
#include "train/lora_state.h"
#include "train/optimizer.h"
#include "train/state_part.h"

namespace spillway::train {

inline constexpr const char* kTrainerStateFormat = "spillway-trainer-state/1";

// The training state a checkpoint holds, read tensor by tensor while its
// files are written (from an engine that may keep it on a device), so a
// checkpoint never needs a second copy of it in host memory.
struct CheckpointState {
  model::LlamaConfig config;
  // Tensor `i` (model::parameter_specs's order) of `part` into `out`.
  std::function<void(StatePart part, size_t i, std::span<float> out)> read;
  int64_t optimizer_steps = 0;  // AdamW's steps_taken
  // AdamW's hyperparameters are the run's, saved with its options.
  // LoRA: the adapters and their moments (in host memory, where the CPU
  // engine trains them), and the model they adapt; `read` then gives the
  // frozen base as masters and no moments.
  const LoraState* lora = nullptr;
  std::string base_model;
};

// What a checkpoint reads of weights and an optimizer in host memory.
CheckpointState host_checkpoint_state(const model::LlamaWeights& weights, const AdamW& optimizer);

// Writes the checkpoint of `step` and points RUN/latest at it; keeps the
// newest `keep` step folders (0: all) and removes older ones. Returns the
// folder. With `state.lora` the masters are the frozen base, the folder
// holds the adapters as PEFT does (model/lora_io.h; `state.base_model` is
// recorded as the model they adapt) and optimizer.safetensors the adapters'
// moments.
std::string save_checkpoint(const std::string& run_dir, int64_t step, const CheckpointState& state,
                            const Tokenizer& tokenizer, const nlohmann::json& trainer_state, int64_t keep = 2);
inline std::string save_checkpoint(const std::string& run_dir, int64_t step, const model::LlamaWeights& weights,
                                   const AdamW& optimizer, const Tokenizer& tokenizer,
                                   const nlohmann::json& trainer_state, int64_t keep = 2,
                                   const LoraState* lora = nullptr, const std::string& base_model = {}) {
  CheckpointState state = host_checkpoint_state(weights, optimizer);
  state.lora = lora;
  state.base_model = base_model;
  return save_checkpoint(run_dir, step, state, tokenizer, trainer_state, keep);
}
// Makes every read save_checkpoint would make of `state`, in its order, and
// writes nothing: the part of a data-parallel rank that does not write but
// whose reads are collectives the writer's join.
void walk_checkpoint_reads(const CheckpointState& state);

// Removes what killed runs left in the run folder RUN: checkpoints half
// written (`step-N.tmp.<pid>`) or half deleted (`step-N.deleting`), and the
// temporaries of its atomically replaced files (`latest.tmp.XXXXXX`, likewise
// run_config.toml and loss.svg, and any in the run's own prepared data,
// RUN/data). Nothing else is touched, so a folder that is not a run folder
// loses nothing of its own. Only the run's writer (the lead
// rank) calls it, when the run starts or resumes, before it writes.
void remove_stale_temporaries(const std::string& run_dir);

// Removes every checkpoint of the run folder RUN, `latest` first, each step
// folder in one step, and what killed runs left (--overwrite).
void remove_checkpoints(const std::string& run_dir);

// A run folder resolves to the checkpoint `latest` names, or where there is
// no `latest` (a run killed before it wrote its first) to its newest step
// folder; any other folder is taken to be a model folder itself, and a file
// (a GGUF file) is itself. Error naming the path when it does not exist.
std::string resolve_checkpoint(const std::string& path);

// Whether `path` is a run folder: one holding `latest` or step folders.
bool is_run_folder(const std::string& path);

// The AdamW moments and step count saved beside the weights. Error naming
// the file when it is absent or does not match the model.
AdamW load_optimizer(const std::string& checkpoint_dir, const model::LlamaConfig& config);
// A LoRA checkpoint's adapters and their moments, and the step count into
// `optimizer` (whose own moments stay empty). Error naming the file.
LoraState load_lora_checkpoint(const std::string& checkpoint_dir, const model::LlamaConfig& config,
                               AdamW& optimizer);
// trainer_state.json; Error naming the file when it is absent, not JSON, or
// not a spillway trainer state (a foreign checkpoint).
nlohmann::json load_trainer_state(const std::string& checkpoint_dir);

}  // namespace spillway::train
