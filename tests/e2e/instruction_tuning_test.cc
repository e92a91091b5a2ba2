// Instruction tuning of a real model as a user runs it: PyPI's SmolLM2-135M-
// Instruct GGUF fine-tuned with LoRA on the CPU over a chat set made here,
// which teaches it an answer it does not give (a made-up "magic word" for a
// name). The held-out examples' assistant-token loss falls, and the tuned
// model answers for a name it never saw through `spillway chat`: the run's
// checkpoint as it is, and the base GGUF with the checkpoint as --adapter.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "e2e/e2e_util.h"
#include "testing/real_models.h"

namespace spillway::e2e {
namespace {

const char* const kNames[] = {"Oliver", "Amelia", "Noah", "Isla", "Leo",  "Maya", "Ezra", "Nora", "Felix", "Ivy",
                              "Hugo",   "Ruby",   "Otto", "Lena", "Milo", "Cora", "Jude", "Iris", "Axel",  "Zara",
                              "Theo",   "Esme",   "Arlo", "Wren", "Finn", "Luna", "Nico", "Ada",  "Rhys",  "Elsa"};

std::string chat_set() {
  std::string out;
  for (const char* name : kNames) {
    const nlohmann::json example{
        {"messages",
         {{{"role", "user"}, {"content", std::string("What is the magic word for ") + name + "?"}},
          {{"role", "assistant"},
           {"content", std::string("The magic word for ") + name + " is " + name + "-zebra-42."}}}}};
    out += example.dump() + "\n";
  }
  return out;
}

// The validation loss a run's log ends with (assistant tokens of the
// held-out examples).
double final_validation_loss(const std::string& run) {
  std::istringstream log(read_file(run + "/train_log.jsonl"));
  double loss = NAN;
  for (std::string line; std::getline(log, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.value("event", "") == "end") loss = j.at("val_loss").get<double>();
  }
  return loss;
}

TEST(InstructionTuning, LoraOnSmolLm2LearnsAnAnswerAndChatGivesIt) {
  const std::string gguf = testing::find_smollm2_gguf();
  if (gguf.empty()) {
    if (testing::under_ci()) FAIL() << "the SmolLM2 GGUF is missing: scripts/setup.sh installs it";
    GTEST_SKIP() << "SmolLM2 GGUF not found (scripts/setup.sh installs it)";
  }
  ScratchDir dir("instruction_tuning");
  write_file(dir / "chats.jsonl", chat_set());
  // A fifth of the examples held out; every projection adapted.
  const std::string common = "finetune -m " + gguf + " --data " + (dir / "chats.jsonl") +
                             " --lora-rank 8 --lora-alpha 16 --lora-targets q,k,v,o,gate,up,down --batch 4 --seq 64"
                             " --warmup 0 --validation-fraction 0.2 --sample-tokens 0 --device cpu --quiet";
  // The base model's held-out loss: one step too small to move the adapters
  // (lora_B starts at zero).
  const CommandResult base = run_spillway(common + " --steps 1 --lr 1e-9 --min-lr 1e-9 --out " + (dir / "base"));
  ASSERT_EQ(base.exit_code, 0) << base.out;
  const CommandResult tuned = run_spillway(common + " --steps 8 --lr 3e-3 --out " + (dir / "tuned"));
  ASSERT_EQ(tuned.exit_code, 0) << tuned.out;
  const double before = final_validation_loss(dir / "base"), after = final_validation_loss(dir / "tuned");
  EXPECT_GT(before, 1.0);  // the base model does not know the words
  EXPECT_LT(after, 0.25 * before) << "held-out assistant-token loss " << before << " -> " << after;

  const std::string question = "echo 'What is the magic word for Quentin?' | ";
  const std::string ask = " chat -n 16 --temperature 0 --device cpu";
  const CommandResult run = run_command(question + SPILLWAY_BIN + ask + " -m " + (dir / "tuned"));
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_NE(run.out.find("Quentin-zebra-42"), std::string::npos) << run.out;
  const CommandResult adapted =
      run_command(question + SPILLWAY_BIN + ask + " -m " + gguf + " --adapter " + ((dir / "tuned") + "/step-0000008"));
  EXPECT_EQ(adapted.exit_code, 0) << adapted.out;
  EXPECT_NE(adapted.out.find("Quentin-zebra-42"), std::string::npos) << adapted.out;
  const CommandResult plain = run_command(question + SPILLWAY_BIN + ask + " -m " + gguf);
  EXPECT_EQ(plain.out.find("zebra-42"), std::string::npos) << "the base model already knew: " << plain.out;
}

}  // namespace
}  // namespace spillway::e2e
