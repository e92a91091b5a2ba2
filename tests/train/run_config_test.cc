// The run configuration: defaults by command, every field from a file and
// from a flag, precedence, the one-line errors, and what a resume takes back.
#include "train/run_config.h"

#include <gtest/gtest.h>

#include <map>

#include "base/config_file.h"
#include "base/status.h"
#include "testing/run_config.h"
#include "testing/settings.h"
#include "train/run_config_fields.h"

namespace spillway::train {
namespace {

using testing::kRunCommands;
using testing::other_value;

class RunConfigTest : public testing::SettingsTest {
 protected:
  // The error of resolving a file named `name` holding `text` for `command`.
  std::string error_of_file(const std::string& name, const std::string& text, Command command = Command::train) {
    return error_of([&] { resolve_run_config(command, {.file = write(name, text)}); });
  }
};

std::map<std::string, std::string>& fake_environment() {
  static std::map<std::string, std::string> env;
  return env;
}
const char* fake_getenv(const char* name) {
  auto it = fake_environment().find(name);
  return it == fake_environment().end() ? nullptr : it->second.c_str();
}

TEST_F(RunConfigTest, CommandsStartFromTheirOwnDefaults) {
  EXPECT_EQ(default_run_config(Command::train).schedule.batch, 16);
  EXPECT_EQ(default_run_config(Command::bench).schedule.batch, 8);
  const RunConfig finetune = default_run_config(Command::finetune);
  EXPECT_EQ(finetune.run.out, "runs/finetune");
  EXPECT_EQ(finetune.schedule.steps, 200);
  EXPECT_EQ(finetune.optimizer.lr, 3e-4);
  const RunConfig plan = default_run_config(Command::plan);
  EXPECT_EQ(plan.model.config, "llama3-8b");
  EXPECT_EQ(plan.schedule.seq, 8192);
  EXPECT_EQ(plan.memory.device_mem, 80ull << 30);
  EXPECT_EQ(plan.memory.host_mem, 125ull << 30);
  EXPECT_EQ(plan.kernels.projections, ProjectionMode::automatic);
}

TEST_F(RunConfigTest, TheTableListsEachKeyAndFlagOnce) {
  std::map<std::string_view, int> keys, flags;
  for (const Field& f : run_config_fields()) {
    EXPECT_EQ(++keys[f.key], 1) << f.key;
    EXPECT_EQ(++flags[f.flag], 1) << f.flag;
    EXPECT_EQ(find_field(f.key), &f);
  }
}

// Every field a command uses, set alone from a TOML file, a JSON file and a
// flag, reaches the same configuration, one that differs from the default.
TEST_F(RunConfigTest, EveryFieldIsSettableFromFileAndFlag) {
  for (Command command : kRunCommands) {
    const RunConfig defaults = default_run_config(command);
    for (const Field& f : run_config_fields()) {
      if (!uses(f, command)) continue;
      SCOPED_TRACE(std::string(command_name(command)) + " " + std::string(f.key));
      // finetune needs a model to start from beside the field under test.
      const bool needs_model = command == Command::finetune && f.key != "model.init_from";
      RunSources flags{.flags = {{std::string(f.key), other_value(f, defaults)}}};
      if (needs_model) flags.flags.push_back({"model.init_from", {"base"}});
      const RunConfig from_flag = resolve_run_config(command, flags);
      nlohmann::ordered_json tree;
      tree[std::string(section_of(f.key))][std::string(name_of(f.key))] = field_json(f, from_flag);
      if (needs_model) tree["model"]["init_from"] = "base";
      const RunConfig from_toml = resolve_run_config(command, {.file = write("one.toml", settings_toml(tree, ""))});
      const RunConfig from_json = resolve_run_config(command, {.file = write("one.json", tree.dump())});
      EXPECT_EQ(run_config_json(from_flag, command), run_config_json(from_toml, command));
      EXPECT_EQ(run_config_json(from_flag, command), run_config_json(from_json, command));
      if (section_of(f.key) != "parallel") {
        EXPECT_NE(field_json(f, from_flag), field_json(f, defaults));
      }
    }
  }
}

TEST_F(RunConfigTest, AWrittenConfigurationReadsBackTheSame) {
  for (Command command : kRunCommands) {
    RunConfig config = default_run_config(command);
    RunSources sources;
    for (const Field& f : run_config_fields()) {
      if (!uses(f, command) || section_of(f.key) == "parallel") continue;
      // A probability below 1, and projections by name: other_value's
      // text would be neither.
      if (f.key == "lora.dropout" || f.key == "lora.targets") continue;
      sources.flags.push_back({std::string(f.key), other_value(f, config)});
    }
    config = resolve_run_config(command, sources);
    const std::string path = write("all.toml", settings_toml(run_config_json(config, command), "all of them"));
    EXPECT_EQ(run_config_json(resolve_run_config(command, {.file = path}), command), run_config_json(config, command))
        << command_name(command);
  }
}

TEST_F(RunConfigTest, FileThenEnvironmentThenFlags) {
  const std::string file =
      write("run.toml", "[memory]\ndevice_mem = \"10GiB\"\nhost_mem = \"20GiB\"\n[schedule]\nseq = 64\n");
  fake_environment() = {{"SPILLWAY_DEVICE_MEM", "11GiB"}};
  RunConfig c = resolve_run_config(Command::bench, {.file = file, .getenv = fake_getenv});
  EXPECT_EQ(c.memory.device_mem, 11ull << 30);  // the environment over the file
  EXPECT_EQ(c.memory.host_mem, 20ull << 30);    // the file over the default
  EXPECT_EQ(c.schedule.seq, 64);
  c = resolve_run_config(Command::bench,
                         {.file = file, .flags = {{"memory.device_mem", {"12GiB"}}}, .getenv = fake_getenv});
  EXPECT_EQ(c.memory.device_mem, 12ull << 30);  // the flag over both
}

TEST_F(RunConfigTest, AMalformedVariableMattersOnlyWhereItIsUsed) {
  fake_environment() = {{"SPILLWAY_DEVICE_MEM", "lots"}};
  const RunConfig c =
      resolve_run_config(Command::train, {.flags = {{"memory.device_mem", {"1GiB"}}}, .getenv = fake_getenv});
  EXPECT_EQ(c.memory.device_mem, 1ull << 30);
  EXPECT_EQ(error_of([] { resolve_run_config(Command::train, {.getenv = fake_getenv}); }),
            "SPILLWAY_DEVICE_MEM: 'lots' is not a byte size (try 24GiB, 512MB or 4096)");
}

TEST_F(RunConfigTest, BadFilesGetOneLineNamingFileAndKey) {
  EXPECT_EQ(error_of_file("a.toml", "[memory]\noffload = \"maybe\"\n"),
            "a.toml: memory.offload is \"maybe\"; one of auto, on, off, stream");
  EXPECT_EQ(error_of_file("b.toml", "[memory]\nrecompute = 2\n"),
            "b.toml: memory.recompute is 2; one of none, layers, selective, auto");
  EXPECT_EQ(error_of_file("c.toml", "[memory]\nofload = \"on\"\n"),
            "c.toml: unknown key memory.ofload (memory has device_mem, host_mem, offload, recompute, bf16_moments)");
  EXPECT_EQ(error_of_file("d.toml", "[mem]\noffload = \"on\"\n"),
            "d.toml: unknown section mem (sections: model, data, optimizer, lora, schedule, memory, kernels, parallel, run, "
            "sample)");
  EXPECT_EQ(error_of_file("e.toml", "[schedule]\nsteps = \"ten\"\n"),
            "e.toml: schedule.steps is \"ten\"; expected a whole number");
  EXPECT_EQ(error_of_file("f.toml", "[schedule]\nsteps = 1.5\n"),
            "f.toml: schedule.steps is 1.5; expected a whole number");
  EXPECT_EQ(error_of_file("g.toml", "[schedule]\nsteps = 0\n"), "g.toml: schedule.steps is 0; must be at least 1");
  EXPECT_EQ(error_of_file("h.toml", "[optimizer]\nlr = \"fast\"\n"),
            "h.toml: optimizer.lr is \"fast\"; expected a number");
  EXPECT_EQ(error_of_file("i.toml", "[memory]\nbf16_moments = 1\n"),
            "i.toml: memory.bf16_moments is 1; expected true or false");
  EXPECT_EQ(error_of_file("j.toml", "[data]\npaths = [1]\n"), "j.toml: data.paths is [1]; expected a list of text");
  EXPECT_EQ(error_of_file("k.toml", "[memory]\ndevice_mem = \"lots\"\n"),
            "k.toml: memory.device_mem is \"lots\"; 'lots' is not a byte size (try 24GiB, 512MB or 4096)");
  EXPECT_EQ(error_of_file("l.toml", "memory = 3\n"), "l.toml: memory is 3; expected a table of settings");
  EXPECT_EQ(error_of_file("m.json", "{\"run\": {\"device\": \"tpu\"}}"),
            "m.json: run.device is \"tpu\"; one of auto, cpu, cuda");
  EXPECT_EQ(error_of_file("n.json", "[1, 2]"),
            "n.json: expected a table of sections (model, data, optimizer, lora, schedule, memory, kernels, parallel, run, "
            "sample)");
}

TEST_F(RunConfigTest, AFileMayHoldSettingsOfAnotherCommand) {
  const RunConfig c =
      resolve_run_config(Command::bench, {.file = write("run.toml", "[optimizer]\nlr = 0.5\n[schedule]\nseq = 32\n")});
  EXPECT_EQ(c.schedule.seq, 32);
  EXPECT_EQ(c.optimizer.lr, default_run_config(Command::bench).optimizer.lr);
}

TEST_F(RunConfigTest, BadFlagsNameTheFlag) {
  const auto error_of_flag = [&](const std::string& key, const std::string& text) {
    return error_of([&] { resolve_run_config(Command::train, {.flags = {{key, {text}}}}); });
  };
  EXPECT_EQ(error_of_flag("memory.offload", "sometimes"),
            "--offload: unknown value 'sometimes'; one of auto, on, off, stream");
  EXPECT_EQ(error_of_flag("memory.recompute", "all"),
            "--recompute: unknown policy 'all'; one of none, layers, selective, auto");
  EXPECT_EQ(error_of_flag("schedule.batch", "two"), "--batch: 'two' is not a whole number");
  EXPECT_EQ(error_of_flag("optimizer.lr", "1e-3x"), "--lr: '1e-3x' is not a number");
  EXPECT_EQ(error_of_flag("schedule.steps", "-4"), "--steps: must be at least 1, got -4");
  EXPECT_EQ(error_of_flag("data.vocab_size", "99999999999"), "--vocab: '99999999999' is out of range");
  EXPECT_EQ(error_of_flag("parallel.dp", "-1"), "--dp: must be at least 0, got -1");
  EXPECT_EQ(error_of_flag("parallel.nproc_per_node", "0"), "--nproc-per-node: must be at least 1, got 0");
}

// Values that are well formed but absurd: sizes past base/limits.h, a batch
// whose tokens overflow what a step can hold, fractional counts, budgets of
// 1e30. Each is one line naming the flag or the file and key.
TEST_F(RunConfigTest, AbsurdValuesGetOneLineEach) {
  const auto error_of_flags = [&](std::vector<std::pair<std::string, std::vector<std::string>>> flags,
                                  Command command = Command::train) {
    return error_of([&] { resolve_run_config(command, {.flags = std::move(flags)}); });
  };
  EXPECT_EQ(error_of_flags({{"schedule.batch", {"2097152"}}}), "--batch: must be at most 1048576, got 2097152");
  EXPECT_EQ(error_of_flags({{"schedule.seq", {"100000000"}}}), "--seq: must be at most 16777216, got 100000000");
  EXPECT_EQ(error_of_flags({{"schedule.eval_batches", {"2147483648"}}}),
            "--eval-batches: must be at most 1048576, got 2147483648");
  EXPECT_EQ(error_of_flags({{"schedule.steps", {"9223372036854775807"}}}),
            "--steps: must be at most 1099511627776, got 9223372036854775807");
  EXPECT_EQ(error_of_flags({{"schedule.batch", {"1048576"}}, {"schedule.seq", {"16777216"}}}, Command::plan),
            "--batch: batch 1048576 x seq 16777216 is 17592186044416 tokens per micro-batch; at most 2147483648");
  EXPECT_EQ(error_of_flags({{"schedule.batch", {"2.5"}}}), "--batch: '2.5' is not a whole number");
  EXPECT_EQ(error_of_flags({{"memory.device_mem", {"1e30"}}}), "--device-mem: '1e30' is more bytes than 64 bits count");
  EXPECT_EQ(error_of_flags({{"memory.device_mem", {"2PiB"}}}),
            "--device-mem: unknown unit 'pib' in '2PiB' (use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB or %)");
  EXPECT_EQ(error_of_flags({{"memory.host_mem", {"2048TiB"}}}), "--host-mem: must be at most 1024TiB, got 2048TiB");

  EXPECT_EQ(error_of_file("a.toml", "[schedule]\nbatch = 2.5\n"), "a.toml: schedule.batch is 2.5; expected a whole number");
  EXPECT_EQ(error_of_file("b.toml", "[memory]\ndevice_mem = 1e30\n"),
            "b.toml: memory.device_mem is 1e+30; expected a byte size such as 24GiB, 512MB or 4096");
  EXPECT_EQ(error_of_file("c.toml", "[memory]\ndevice_mem = \"1e30\"\n"),
            "c.toml: memory.device_mem is \"1e30\"; '1e30' is more bytes than 64 bits count");
  EXPECT_EQ(error_of_file("d.toml", "[schedule]\nbatch = 1048576\nseq = 16777216\n"),
            "d.toml: batch 1048576 x seq 16777216 is 17592186044416 tokens per micro-batch; at most 2147483648");
  EXPECT_EQ(error_of_file("e.json", R"({"schedule": {"grad_accum": 2147483648}})"),
            "e.json: schedule.grad_accum is 2147483648; must be at most 1048576");
  EXPECT_EQ(error_of_file("f.json", R"({"parallel": {"tp": 1025}})", Command::bench),
            "f.json: parallel.tp is 1025; must be at most 1024");
}

// A checkpoint's options are read like a file's: whole numbers within the
// limits, or one line naming the trainer state and the key.
TEST_F(RunConfigTest, AResumeRefusesAbsurdCheckpointedOptions) {
  const auto error_of_saved = [&](const char* text) {
    RunConfig c = default_run_config(Command::train);
    return error_of([&] { restore_checkpointed(c, nlohmann::json::parse(text), "step-5/trainer_state.json"); });
  };
  EXPECT_EQ(error_of_saved(R"({"schedule": {"batch": 2.5}})"),
            "step-5/trainer_state.json: schedule.batch is 2.5; expected a whole number");
  EXPECT_EQ(error_of_saved(R"({"schedule": {"batch": 0}})"),
            "step-5/trainer_state.json: schedule.batch is 0; must be at least 1");
  EXPECT_EQ(error_of_saved(R"({"schedule": {"seq": 1099511627776}})"),
            "step-5/trainer_state.json: schedule.seq is 1099511627776; must be at most 16777216");
  EXPECT_EQ(error_of_saved(R"({"steps": -5})"), "step-5/trainer_state.json: schedule.steps is -5; must be at least 1");
}

TEST_F(RunConfigTest, FinetuneNeedsAModelToStartFrom) {
  EXPECT_THROW(resolve_run_config(Command::finetune, {}), Error);
  EXPECT_EQ(resolve_run_config(Command::finetune, {.flags = {{"model.init_from", {"runs/tiny"}}}}).model.init_from,
            "runs/tiny");
}

TEST_F(RunConfigTest, AResumeTakesTheScheduleAndOptimizerBack) {
  RunConfig saved;
  saved.schedule.steps = 77;
  saved.optimizer.lr = 5e-3;
  saved.optimizer.beta2 = 0.99;
  const nlohmann::json kept = checkpointed_json(saved);
  EXPECT_FALSE(kept.contains("memory"));
  RunConfig now;
  now.schedule.steps = 5;
  now.schedule.stop_after = 3;
  now.optimizer.lr = 99;
  now.memory.bf16_moments = true;
  restore_checkpointed(now, kept, "trainer_state.json");
  EXPECT_EQ(now.schedule.steps, 77);
  EXPECT_EQ(now.optimizer.lr, 5e-3);
  EXPECT_EQ(now.optimizer.beta2, 0.99);
  EXPECT_EQ(now.schedule.stop_after, 3);  // may differ on a resume
  EXPECT_TRUE(now.memory.bf16_moments);   // so may memory settings
}

// Checkpoints written before the table kept their options flat and had no
// AdamW betas: those runs used the built-in ones.
TEST_F(RunConfigTest, AResumeReadsCheckpointsOfEarlierVersions) {
  const nlohmann::json flat = nlohmann::json::parse(R"({"steps": 10, "batch": 4, "seq": 32, "grad_accum": 1,
      "lr": 0.01, "min_lr": 0.001, "warmup": 5, "weight_decay": 0.1, "grad_clip": 1.0, "eval_every": 4,
      "eval_batches": 4, "checkpoint_every": 3, "seed": 1337})");
  RunConfig now;
  now.optimizer.beta1 = 0.5;
  restore_checkpointed(now, flat, "trainer_state.json");
  EXPECT_EQ(now.schedule.steps, 10);
  EXPECT_EQ(now.schedule.checkpoint_every, 3);
  EXPECT_EQ(now.optimizer.lr, 0.01);
  EXPECT_EQ(now.optimizer.beta1, RunConfig{}.optimizer.beta1);
  const nlohmann::json bad = nlohmann::json::parse(R"({"schedule": {"steps": "many"}})");
  EXPECT_EQ(error_of([&] { restore_checkpointed(now, bad, "trainer_state.json"); }),
            "trainer_state.json: schedule.steps is \"many\"; expected a whole number");
}

}  // namespace
}  // namespace spillway::train
