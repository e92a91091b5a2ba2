// The training loop: data, model, AdamW with warm-up and cosine decay,
// gradient accumulation and clipping, periodic evaluation and checkpoints,
// progress for people and a JSON-lines log for programs, and at the end a
// loss curve and a generated sample.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "train/dataset.h"

namespace spillway::train {

struct TrainOptions {
  std::string out_dir = "runs/tiny";
  std::string config = "tiny";  // a preset or a config.json; unused when init_from is set
  std::string init_from;        // fine-tune: start from this model or run folder
  bool resume = false;          // continue out_dir's run from its latest checkpoint
  DataOptions data;

  int64_t steps = 600;       // length of the schedule
  int64_t stop_after = -1;   // stop (with a checkpoint) after this many steps; -1: at the end
  int64_t batch = 16;
  int64_t seq = 128;
  int64_t grad_accum = 1;
  double lr = 2e-3;
  double min_lr = 2e-4;
  int64_t warmup = 30;
  double weight_decay = 0.1;
  double grad_clip = 1.0;
  int64_t eval_every = 100;
  int64_t eval_batches = 16;
  int64_t checkpoint_every = 200;
  uint64_t seed = 1337;

  int64_t sample_tokens = 120;  // generated after training; 0: none
  std::string sample_prompt;    // empty: start a new document
  double sample_temperature = 0.8;
  int64_t sample_top_k = 40;
  bool quiet = false;  // no progress output (tests)
  std::string device = "auto";  // auto, cpu, cuda
  uint64_t device_memory = 0;   // device budget in bytes; 0: the backend's default
  uint64_t host_memory = 0;     // pinned host budget when the GPU step is planned; 0: 90% of what is available
  std::string offload = "auto";  // GPU: auto (plan when the state does not fit), on, off
  bool bf16_moments = false;     // GPU: AdamW moments in bf16 (the planned engine)
  bool cuda_graph = true;        // GPU, all on the device: replay a captured step (EngineOptions::cuda_graph)

  // The options that define the run; a resumed run takes them from its
  // checkpoint, so a resume cannot silently change the training.
  nlohmann::json schedule_json() const;
  void apply_schedule_json(const nlohmann::json& j, const std::string& source);
};

struct TrainResult {
  int64_t steps_done = 0;
  double train_loss = 0;       // mean over the last step's micro-batches
  double validation_loss = 0;  // at the end
  double unigram_entropy = 0;
  double tokens_per_second = 0;
  uint64_t peak_device_bytes = 0;
  std::string checkpoint;  // folder of the final checkpoint
  std::string sample;      // generated text
};

TrainResult train_model(TrainOptions options);

}  // namespace spillway::train
