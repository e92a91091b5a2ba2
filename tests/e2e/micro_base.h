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

}  // namespace spillway::e2e
