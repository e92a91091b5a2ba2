#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>

#include "base/bytes.h"
#include "cli/commands.h"
#include "cli/run_flags.h"
#include "cli/training_ranks.h"
#include "infer/generate.h"
#include "train/trainer.h"

namespace spillway::cli {

namespace {

int run_training(const train::RunConfig& config, train::Command command) {
  train::check_run_folder(config);  // once here, rather than once from every rank
  if (std::optional<int> exit_code = start_ranks_here(config)) return *exit_code;
  const train::RunConfig run = with_planned_layout(config);
  const TrainingRanks ranks = meet_ranks(run, command);
  train::TrainResult r = train::train_model(run, infer::run_sample_text, ranks.data_parallel);
  if (ranks.data_parallel.world_rank != 0) return r.stop_signal != 0 ? 128 + r.stop_signal : 0;
  if (r.stop_signal != 0) {
    std::printf("stopped by %s after step %lld: checkpoint %s; continue with --resume\n",
                r.stop_signal == SIGINT ? "SIGINT" : "SIGTERM", static_cast<long long>(r.steps_done),
                r.checkpoint.c_str());
    return 128 + r.stop_signal;
  }
  char validation[64] = "validation off";
  if (r.validation) std::snprintf(validation, sizeof validation, "validation loss %.4f", r.validation_loss);
  std::printf("done: %lld steps, train loss %.4f, %s (unigram entropy %.4f), %.0f tok/s, peak device memory %s\n",
              static_cast<long long>(r.steps_done), r.train_loss, validation, r.unigram_entropy, r.tokens_per_second,
              format_bytes(r.peak_device_bytes).c_str());
  const char* out = config.run.out.c_str();
  std::printf("checkpoint: %s\nlog: %s/train_log.jsonl\nloss curve: %s/loss.svg\nconfiguration: %s/run_config.toml\n",
              r.checkpoint.c_str(), out, out, out);
  if (!r.sample.empty()) std::printf("\nsample:\n%s\n", r.sample.c_str());
  return 0;
}

Runner add_training(CLI::App& app, train::Command command, const char* description) {
  CLI::App* cmd = app.add_subcommand(std::string(train::command_name(command)), description);
  auto flags = std::make_shared<RunFlags>(cmd, command);
  return [flags, command] { return run_training(flags->resolve(), command); };
}

}  // namespace

Runner add_train(CLI::App& app) {
  return add_training(app, train::Command::train,
                      "train a model from scratch (default: tiny LLaMA on the fortunes corpus)");
}

Runner add_finetune(CLI::App& app) {
  return add_training(app, train::Command::finetune, "continue training a checkpoint on new data; writes a new one");
}

}  // namespace spillway::cli
