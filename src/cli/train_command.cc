#include <cstdio>
#include <memory>

#include "base/bytes.h"
#include "cli/commands.h"
#include "train/trainer.h"

namespace spillway::cli {

namespace {

// Options shared by train and finetune.
void add_training_options(CLI::App* cmd, train::TrainOptions& o) {
  cmd->add_option("--data", o.data.paths,
                  "text files or folders of them, or a folder made by `spillway tokenize` "
                  "(default: the English fortunes corpus installed by setup)");
  cmd->add_option("--separator", o.data.document_separator,
                  "a line holding exactly this text ends a document (default: % for the default corpus)");
  cmd->add_option("--out", o.out_dir, "run folder: checkpoints, train_log.jsonl, loss.svg")->capture_default_str();
  cmd->add_option("--steps", o.steps, "optimizer steps in the schedule")->capture_default_str();
  cmd->add_option("--stop-after", o.stop_after, "stop after this many steps, with a checkpoint (resume later)");
  cmd->add_option("--batch", o.batch, "sequences per micro-batch")->capture_default_str();
  cmd->add_option("--seq", o.seq, "tokens per sequence")->capture_default_str();
  cmd->add_option("--grad-accum", o.grad_accum, "micro-batches per optimizer step")->capture_default_str();
  cmd->add_option("--lr", o.lr, "peak learning rate")->capture_default_str();
  cmd->add_option("--min-lr", o.min_lr, "learning rate at the end of the cosine")->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "linear warm-up steps")->capture_default_str();
  cmd->add_option("--weight-decay", o.weight_decay, "AdamW decoupled weight decay (matrices only)")->capture_default_str();
  cmd->add_option("--clip", o.grad_clip, "clip the global gradient norm to this (0: off)")->capture_default_str();
  cmd->add_option("--eval-every", o.eval_every, "validation every N steps (0: only at the end)")->capture_default_str();
  cmd->add_option("--eval-batches", o.eval_batches, "validation batches per evaluation")->capture_default_str();
  cmd->add_option("--checkpoint-every", o.checkpoint_every, "checkpoint every N steps (0: only at the end)")
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "seed for initialization, data order and the sample")->capture_default_str();
  cmd->add_option("--sample-tokens", o.sample_tokens, "tokens to generate at the end (0: none)")->capture_default_str();
  cmd->add_option("--prompt", o.sample_prompt, "prompt for the sample at the end");
  cmd->add_flag("--resume", o.resume, "continue the run in --out from its latest checkpoint, bit-identically");
  cmd->add_option("--device", o.device, "auto (the GPU when there is one), cpu or cuda")->capture_default_str();
  cmd->add_option_function<std::string>(
         "--device-mem", [&o](const std::string& v) { o.device_memory = parse_bytes(v, "--device-mem"); },
         "device memory budget (bytes, 24GiB, ...)")
      ->envname("SPILLWAY_DEVICE_MEM");
  cmd->add_option_function<std::string>(
         "--host-mem", [&o](const std::string& v) { o.host_memory = parse_bytes(v, "--host-mem"); },
         "pinned host memory budget for a planned GPU step (bytes, 100GiB, ...)")
      ->envname("SPILLWAY_HOST_MEM");
  cmd->add_flag("--cuda-graph,!--no-cuda-graph", o.cuda_graph,
                "GPU, all on the device: capture the step once and replay it (the default)");
  cmd->add_flag("--bf16-moments", o.bf16_moments,
                "GPU: AdamW moments in bf16 (half the moments' memory and optimizer traffic)");
  cmd->add_option("--offload", o.offload,
                  "GPU: auto (plan across device and host memory when the state does not fit), on, off")
      ->capture_default_str();
}

int run_training(const train::TrainOptions& o) {
  train::TrainResult r = train::train_model(o);
  std::printf("done: %lld steps, train loss %.4f, validation loss %.4f (unigram entropy %.4f), %.0f tok/s\n",
              static_cast<long long>(r.steps_done), r.train_loss, r.validation_loss, r.unigram_entropy,
              r.tokens_per_second);
  std::printf("checkpoint: %s\nlog: %s/train_log.jsonl\nloss curve: %s/loss.svg\n", r.checkpoint.c_str(),
              o.out_dir.c_str(), o.out_dir.c_str());
  if (!r.sample.empty()) std::printf("\nsample:\n%s\n", r.sample.c_str());
  return 0;
}

}  // namespace

Runner add_train(CLI::App& app) {
  auto o = std::make_shared<train::TrainOptions>();
  CLI::App* cmd = app.add_subcommand("train", "train a model from scratch (default: tiny LLaMA on the fortunes corpus)");
  cmd->add_option("--config", o->config, "a preset (tiny, llama3.2-1b, ...) or a config.json")->capture_default_str();
  cmd->add_option("--vocab", o->data.vocab_size, "size of the BPE tokenizer trained on the data")->capture_default_str();
  add_training_options(cmd, *o);
  return [o] { return run_training(*o); };
}

Runner add_finetune(CLI::App& app) {
  auto o = std::make_shared<train::TrainOptions>();
  o->out_dir = "runs/finetune";
  o->steps = 200;
  o->lr = 3e-4;
  o->min_lr = 3e-5;
  o->warmup = 10;
  CLI::App* cmd = app.add_subcommand("finetune", "continue training a checkpoint on new data; writes a new one");
  cmd->add_option("--model", o->init_from, "model folder or run folder to start from")->required();
  add_training_options(cmd, *o);
  return [o] { return run_training(*o); };
}

}  // namespace spillway::cli
