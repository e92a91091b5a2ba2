// The training loop: data, model, AdamW with warm-up and cosine decay,
// gradient accumulation and clipping, periodic evaluation and checkpoints,
// progress for people and a JSON-lines log for programs, and at the end a
// loss curve and a generated sample.
#pragma once

#include <cstdint>
#include <chrono>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "device/communicator.h"
#include "model/tokenizer.h"
#include "model/llama_weights.h"
#include "train/run_config.h"

namespace spillway::train {

struct TrainResult {
  int64_t steps_done = 0;
  double train_loss = 0;       // mean over the last step's micro-batches
  double validation_loss = 0;  // at the end
  double unigram_entropy = 0;
  double tokens_per_second = 0;
  uint64_t peak_device_bytes = 0;
  std::string checkpoint;  // folder of the final checkpoint
  std::string sample;      // generated text
  bool validation = true;  // false: validation was off (validation_loss is NaN)
  int stop_signal = 0;     // SIGINT or SIGTERM when one stopped the run early, after a checkpoint
  bool stopped_by_caller = false;  // the StepHook asked the run to stop early, after a checkpoint
};

// The text a finished run shows, from its final weights (the layer that
// generates text lies above training: the caller brings it).
using SampleText = std::function<std::string(const model::LlamaWeights& weights, const Tokenizer& tokenizer,
                                             const SampleConfig& sample, uint64_t seed)>;

// This process's place among the ranks of a data-parallel run (the dist/
// layer, which makes it, lies above training). Alone by default.
struct DataParallelRun {
  Communicator* comm = nullptr;  // the data-parallel group
  // The tensor-parallel group (null: none): its ranks train on the same
  // micro-batches, each its pieces of the layers.
  Communicator* tensor_parallel = nullptr;
  Communicator* pipeline_parallel = nullptr;  // the pipeline group (null: none): its ranks hold the model's stages
  Communicator* context_parallel = nullptr;   // the context group (null: none): its ranks split each sequence
  // The ranks holding the same state (dist::World::replicas: dp x cp).
  Communicator* replicas = nullptr;
  int world_rank = 0;  // rank 0 of the world leads: prints, logs, checkpoints
  int world_size = 1;
  // Returns once every rank has called it; Error when one has not within `wait`.
  std::function<void(std::chrono::milliseconds wait)> barrier;
  int gpu_ordinal = 0;            // this rank's GPU
  int ranks_on_host = 1;          // which share this host's memory
  int rank() const { return comm ? comm->rank() : 0; }
  int size() const { return comm ? comm->size() : 1; }
};

// Hears each step's record as the JSON-lines log writes it (step, loss, lr,
// grad_norm, tokens, epoch, tok_per_s, elapsed_s) on the lead rank; returns
// false to stop the run at this step boundary with a checkpoint, as a
// signal would. An exception it throws ends the run there, unsaved.
using StepHook = std::function<bool(const nlohmann::json& record)>;

// Trains as `config` says: from scratch, from config.model.init_from
// (finetune), or on from the latest checkpoint of config.run.out (resume),
// writing the resolved configuration to RUN/run_config.toml first. With
// `sample_text` and config.sample.tokens > 0, a run that reaches the end of
// its schedule ends with a sample. With several data-parallel `ranks`, each
// trains on its share of every optimizer step's config.schedule.grad_accum
// micro-batches (which the ranks must divide), and the lead rank (0) alone
// prints, logs and checkpoints.
//
// No work is lost: the configuration, the data and the validation set are
// checked before the first step; an out folder that holds a run is resumed
// only with run.resume, started over only with run.overwrite, and refused
// otherwise; a finished run's resume is an Error saying so; SIGINT or
// SIGTERM during the run ends it at the next step boundary with a
// checkpoint (a second signal ends it at once); so does `on_step` returning
// false.
TrainResult train_model(RunConfig config, const SampleText& sample_text = {}, const DataParallelRun& ranks = {},
                        const StepHook& on_step = {});

// The out folder's check that train_model makes first: one that holds a run
// is taken up only with run.resume, started over only with run.overwrite
// (the two exclude each other), and otherwise an Error; a resume needs a
// checkpoint of a run that is not finished. A caller about to start ranks
// makes it once, before them.
void check_run_folder(const RunConfig& config);

}  // namespace spillway::train
