// The model fine-tuning tests start from: the micro config
// (e2e_util.h's micro_config_json) with a tokenizer of its own, trained one
// step on a generated corpus into DIR/base (beside DIR/corpus.txt and
// DIR/micro.json).
#pragma once

#include "e2e/e2e_util.h"
#include "train/trainer.h"

namespace spillway::e2e {

inline void train_micro_base(const ScratchDir& dir) {
  write_file(dir / "corpus.txt", make_corpus(200, 3));
  write_file(dir / "micro.json", micro_config_json());
  train::RunConfig o;
  o.run.out = dir / "base";
  o.model.config = dir / "micro.json";
  o.data.paths = {dir / "corpus.txt"};
  o.data.document_separator = "%";
  o.data.vocab_size = 300;
  o.schedule.steps = 1;
  o.schedule.batch = 2;
  o.schedule.seq = 32;
  o.optimizer.warmup = 0;
  o.sample.tokens = 0;
  o.run.quiet = true;
  o.run.device = train::DeviceChoice::cpu;
  train::train_model(o);
}

// A LoRA fine-tune of DIR/base on DIR/corpus.txt into DIR/RUN: rank 4
// (alpha 8) on q, v and down, `steps` steps of 4 x 32 tokens at a constant
// 2e-2, no validation, a checkpoint at the end only, quiet.
inline train::RunConfig lora_finetune(const ScratchDir& dir, const std::string& run, int64_t steps,
                                      train::DeviceChoice device) {
  train::RunConfig o;
  o.run.out = dir / run;
  o.model.init_from = dir / "base";
  o.data.paths = {dir / "corpus.txt"};
  o.data.document_separator = "%";
  o.data.validation_fraction = 0;
  o.lora.rank = 4;
  o.lora.alpha = 8;
  o.lora.targets = "q,v,down";
  o.schedule.steps = steps;
  o.schedule.batch = 4;
  o.schedule.seq = 32;
  o.schedule.checkpoint_every = 0;
  o.optimizer.lr = 2e-2;
  o.optimizer.min_lr = 2e-2;
  o.optimizer.warmup = 0;
  o.sample.tokens = 0;
  o.run.quiet = true;
  o.run.device = device;
  return o;
}

}  // namespace spillway::e2e
