// The flags generated from the field table: every field by its flag, the
// run file beside them, the command lines the scripts in bench/ and scripts/
// use, and plan's auto.
#include "cli/run_flags.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "base/bytes.h"
#include "base/status.h"
#include "cli/commands.h"
#include "testing/run_config.h"
#include "testing/settings.h"

namespace spillway::cli {
namespace {

using train::Command;
using train::RunConfig;

// Parses `args` (after the program name) for `command`'s flags.
class Parsed {
 public:
  Parsed(Command command, std::vector<std::string> args, std::vector<ChoiceWord> words = {}) {
    CLI::App* cmd = app_.add_subcommand(std::string(train::command_name(command)));
    flags_ = std::make_unique<RunFlags>(cmd, command, std::move(words));
    args.insert(args.begin(), std::string(train::command_name(command)));
    std::reverse(args.begin(), args.end());  // CLI11 takes them last first
    app_.parse(args);
  }
  RunConfig resolve() const { return flags_->resolve(); }
  const RunFlags& flags() const { return *flags_; }

 private:
  CLI::App app_;
  std::unique_ptr<RunFlags> flags_;
};

constexpr const char* kBenchRunFlags =
    "--config llama3.2-1b --seq 4096 --batch 4 --nondeterministic --bf16-moments --device-mem 76GiB --host-mem 110GiB "
    "--offload on --recompute layers --grad-accum 32 --cublaslt-only --matmul-candidates 8 --no-cuda-graph "
    "--projections fused";
constexpr const char* kPlanRunFlags =
    "--config llama3-8b --seq 8192 --batch auto --grad-accum 64 --device-mem 24GiB --host-mem 110GiB --bf16-moments "
    "--recompute auto";

std::vector<std::string> split(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

TEST(RunFlags, EveryFieldIsSetByItsFlag) {
  for (Command command : testing::kRunCommands) {
    const RunConfig defaults = train::default_run_config(command);
    for (const train::Field& f : train::run_config_fields()) {
      if (!train::uses(f, command)) continue;
      SCOPED_TRACE(std::string(train::command_name(command)) + " " + std::string(f.flag));
      const std::vector<std::string> texts = testing::other_value(f, defaults);
      std::vector<std::string> args;
      if (train::is_switch(f)) {
        args.push_back(texts[0] == "true" ? std::string(f.flag) : train::negation_flag(f));
      } else {
        args.push_back(std::string(f.flag));
        args.insert(args.end(), texts.begin(), texts.end());
      }
      train::RunSources expected{.flags = {{std::string(f.key), texts}}};
      if (command == Command::finetune && f.key != "model.init_from") {
        args.insert(args.end(), {"--model", "base"});
        expected.flags.push_back({"model.init_from", {"base"}});
      }
      EXPECT_EQ(train::run_config_json(Parsed(command, args).resolve(), command),
                train::run_config_json(train::resolve_run_config(command, expected), command));
    }
  }
}

class RunFileAndFlags : public testing::SettingsTest {};

TEST_F(RunFileAndFlags, FlagsOverrideTheFileNamedFirst) {
  const std::string file = write("run.toml", "[schedule]\nsteps = 100\nseq = 64\n[memory]\noffload = \"on\"\n");
  const RunConfig c = Parsed(Command::train, {file, "--steps", "7", "--no-bf16-moments"}).resolve();
  EXPECT_EQ(c.schedule.steps, 7);
  EXPECT_EQ(c.schedule.seq, 64);
  EXPECT_EQ(c.memory.offload, train::OffloadMode::on);
  EXPECT_EQ(error_of([&] { Parsed(Command::bench, {write("bad.toml", "[memory]\noffload = \"maybe\"\n")}).resolve(); }),
            "bad.toml: memory.offload is \"maybe\"; one of auto, on, off, stream");
}

// The run settings of the command lines bench/gpu_*.sh and scripts/ use
// (less bench's and plan's own flags) keep their meaning.
TEST(RunFlags, TheScriptsSettingsKeepTheirMeaning) {
  const RunConfig bench = Parsed(Command::bench, split(kBenchRunFlags)).resolve();
  EXPECT_EQ(bench.model.config, "llama3.2-1b");
  EXPECT_EQ(bench.schedule.seq, 4096);
  EXPECT_EQ(bench.schedule.batch, 4);
  EXPECT_EQ(bench.schedule.grad_accum, 32);
  EXPECT_FALSE(bench.kernels.deterministic);
  EXPECT_FALSE(bench.kernels.own_gemm);
  EXPECT_FALSE(bench.kernels.cuda_graph);
  EXPECT_EQ(bench.kernels.matmul_candidates, 8);
  EXPECT_EQ(bench.kernels.projections, train::ProjectionMode::fused);
  EXPECT_TRUE(bench.memory.bf16_moments);
  EXPECT_EQ(bench.memory.device_mem, 76ull << 30);
  EXPECT_EQ(bench.memory.host_mem, 110ull << 30);
  EXPECT_EQ(bench.memory.offload, train::OffloadMode::on);
  EXPECT_EQ(bench.memory.recompute, train::RecomputeChoice::layers);

  const std::vector<ChoiceWord> autos = {{"schedule.batch", "auto", ""}, {"memory.recompute", "auto", ""}};
  const Parsed plan(Command::plan, split(kPlanRunFlags), autos);
  const RunConfig p = plan.resolve();
  EXPECT_TRUE(plan.flags().chose("schedule.batch"));
  EXPECT_TRUE(plan.flags().chose("memory.recompute"));
  EXPECT_EQ(p.schedule.grad_accum, 64);
  EXPECT_EQ(p.memory.device_mem, 24ull << 30);
  EXPECT_TRUE(p.memory.bf16_moments);

  const Parsed fixed(Command::plan, split("--batch 2 --recompute selective"), autos);
  EXPECT_FALSE(fixed.flags().chose("schedule.batch"));
  EXPECT_EQ(fixed.resolve().schedule.batch, 2);
  EXPECT_EQ(fixed.resolve().memory.recompute, train::RecomputeChoice::selective);
  try {
    Parsed(Command::plan, split("--batch two"), autos).resolve();
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--batch: 'two' is not a whole number (or auto)");
  }
}

// bench/gpu_lora.sh's line: bench takes LoRA's settings.
TEST(RunFlags, BenchTakesLorasSettings) {
  const RunConfig c = Parsed(Command::bench, split("--config llama3-8b --seq 4096 --batch 1 --lora-rank 16 "
                                                   "--lora-alpha 32 --lora-targets all --lora-base nf4-dq"))
                          .resolve();
  EXPECT_EQ(c.lora.rank, 16);
  EXPECT_EQ(c.lora.alpha, 32);
  EXPECT_EQ(c.lora.targets, "all");
  EXPECT_EQ(c.lora.base, model::LoraBase::nf4_double);
}

// The subcommands as main builds them: no flag is defined twice (CLI11 would
// throw), and the scripts' whole lines parse, the commands' own flags too.
TEST(RunFlags, TheCommandsRegisterEachFlagOnce) {
  for (const std::string& line :
       {"bench " + std::string(kBenchRunFlags) + " --steps 3 --warmup 2 --json F --profile --timeline t.svg",
        "plan " + std::string(kPlanRunFlags) + " --svg t.svg"}) {
    CLI::App app;
    std::vector<Runner> runners;  // they own what the flags write into
    for (auto add : {add_train, add_finetune, add_generate, add_tokenize, add_bench, add_plan, add_convert}) {
      EXPECT_NO_THROW(runners.push_back(add(app)));
    }
    std::vector<std::string> args = split(line);
    std::reverse(args.begin(), args.end());
    EXPECT_NO_THROW(app.parse(args)) << line;
  }
}

}  // namespace
}  // namespace spillway::cli
