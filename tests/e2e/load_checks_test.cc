// A model's weights, config and tokenizer checked against each other when
// `generate`, `eval` and `finetune` load it, and its context enforced: one
// clear line naming the file or flag and both numbers, exit 1.
#include <gtest/gtest.h>

#include <regex>

#include "e2e/e2e_util.h"

namespace spillway::e2e {
namespace {

// The one "spillway: " line of a failed run, exactly.
void expect_error(const CommandResult& r, const std::string& line) {
  EXPECT_EQ(r.exit_code, 1) << r.out;
  std::istringstream lines(r.out);
  std::string l;
  std::vector<std::string> errors;
  while (std::getline(lines, l)) {
    if (l.rfind("spillway: ", 0) == 0) errors.push_back(l);
  }
  ASSERT_EQ(errors.size(), 1u) << r.out;
  EXPECT_EQ(errors[0], line);
}

class LoadChecks : public ::testing::Test {
 protected:
  // One trained micro model (vocab 300, context 256), shared by the tests.
  static void SetUpTestSuite() {
    dir_ = new ScratchDir("load_checks");
    write_file(*dir_ / "corpus.txt", make_corpus(200, 3));
    write_file(*dir_ / "micro.json", micro_config_json());
    ASSERT_EQ(run_spillway("train --config " + (*dir_ / "micro.json") +
                           " --vocab 300 --steps 2 --batch 2 --seq 16 --sample-tokens 0 --out " + (*dir_ / "run") +
                           " --data " + (*dir_ / "corpus.txt") + " --separator %")
                  .exit_code, 0);
  }
  static void TearDownTestSuite() { delete dir_; }

  // A copy of the trained model.
  fs::path model_copy(const std::string& name) {
    const fs::path m = *dir_ / name;
    fs::remove_all(m);
    fs::copy(*dir_ / "run/step-0000002", m, fs::copy_options::recursive);
    return m;
  }
  // A copy with config.json's `key` set to `value`.
  fs::path model_with(const std::string& name, const std::string& key, const std::string& value) {
    const fs::path m = model_copy(name);
    const std::string config = read_file((m / "config.json").string());
    const std::string edited =
        std::regex_replace(config, std::regex("\"" + key + "\": [^,\n}]+"), "\"" + key + "\": " + value);
    EXPECT_NE(edited, config) << key;
    write_file(m / "config.json", edited);
    return m;
  }
  static ScratchDir* dir_;
};
ScratchDir* LoadChecks::dir_ = nullptr;

TEST_F(LoadChecks, AConfigWithFewerLayersThanTheWeightsIsRefusedNotTruncated) {
  const fs::path m = model_with("one_layer", "num_hidden_layers", "1");
  expect_error(run_spillway("generate --model " + m.string() + " --prompt hi -n 2"),
               "spillway: " + (m / "config.json").string() + ": num_hidden_layers is 1 but the weights in " +
                   m.string() + " hold 2 layers");
}

TEST_F(LoadChecks, ATokenizerLargerThanTheModelsVocabularyIsRefused) {
  ASSERT_EQ(run_spillway("tokenize " + (*dir_ / "corpus.txt") + " --separator % --train-vocab 330 --out " +
                         (*dir_ / "big"))
                .exit_code, 0);
  const fs::path m = model_copy("big_tokenizer");
  fs::copy_file(*dir_ / "big/tokenizer.json", m / "tokenizer.json", fs::copy_options::overwrite_existing);
  const std::string expected =
      "spillway: " + m.string() + ": the tokenizer has 330 tokens but the model's vocab_size is 300";
  expect_error(run_spillway("generate --model " + m.string() + " --prompt hi -n 2"), expected);
  expect_error(run_spillway("eval --model " + m.string() + " --data " + (*dir_ / "corpus.txt")), expected);
  expect_error(run_spillway("finetune --model " + m.string() + " --steps 1 --batch 2 --seq 16 --data " +
                            (*dir_ / "corpus.txt") + " --separator % --out " + (*dir_ / "ft")),
               expected);

  // A run whose checkpoint's tokenizer outgrew its model cannot be resumed.
  const fs::path run = *dir_ / "big_run";
  ASSERT_EQ(run_spillway("train --config " + (*dir_ / "micro.json") +
                         " --vocab 300 --steps 4 --stop-after 2 --batch 2 --seq 16 --sample-tokens 0 --out " +
                         run.string() + " --data " + (*dir_ / "corpus.txt") + " --separator %")
                .exit_code, 0);
  fs::copy_file(*dir_ / "big/tokenizer.json", run / "step-0000002/tokenizer.json",
                fs::copy_options::overwrite_existing);
  const CommandResult resumed = run_spillway("train --resume --out " + run.string());
  expect_error(resumed, "spillway: " + (run / "step-0000002").string() +
                            ": the tokenizer has 330 tokens but the model's vocab_size is 300");
}

TEST_F(LoadChecks, GenerationPastTheContextIsRefusedUpFront) {
  const fs::path m = model_with("short", "max_position_embeddings", "8");
  const CommandResult ok = run_spillway("generate --model " + m.string() + " --prompt hi -n 3");
  ASSERT_EQ(ok.exit_code, 0) << ok.out;
  // "hi" is 2 tokens for this tokenizer, so 6 more fit and 7 do not.
  EXPECT_EQ(run_spillway("generate --model " + m.string() + " --prompt hi -n 6").exit_code, 0);
  expect_error(run_spillway("generate --model " + m.string() + " --prompt hi -n 7"),
               "spillway: --max-tokens: the prompt's 2 tokens and 7 new ones are more than the model's context of 8 "
               "tokens (max_position_embeddings); ask for at most 6");
  // A prompt longer than the context on its own, whatever its token count.
  const std::string prompt = "the cat sees a dog and the old man remembers every child by the river";
  const CommandResult r = run_spillway("generate --model " + m.string() + " -n 1 --prompt '" + prompt + "'");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("(^|\\n)spillway: --prompt: its [0-9]+ tokens are more than the "
                                                  "model's context of 8 tokens \\(max_position_embeddings\\)\\n")))
      << r.out;
}

TEST_F(LoadChecks, EvalPastTheContextIsRefusedUpFront) {
  const fs::path m = model_with("short_eval", "max_position_embeddings", "8");
  expect_error(run_spillway("eval --model " + m.string() + " --seq 9 --data " + (*dir_ / "corpus.txt")),
               "spillway: --seq: 9 is longer than the model's context of 8 tokens");
}

}  // namespace
}  // namespace spillway::e2e
