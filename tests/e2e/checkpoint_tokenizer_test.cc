// Every folder spillway writes carries its tokenizer so that transformers'
// AutoTokenizer loads it complete: a training checkpoint (a tokenizer
// trained here) and `convert`'s folder of the SmolLM2 GGUF (the GGUF's
// tokenizer and chat template). AutoTokenizer's ids (special tokens inside
// text found), BOS, EOS and size equal spillway's, and its chat template
// renders. tests/parity/auto_tokenizer.py runs transformers; without it in
// .venv the test skips, except under CI, where it fails.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "e2e/e2e_util.h"
#include "model/tokenizer.h"
#include "testing/real_models.h"
#include "train/checkpoint.h"

namespace spillway::e2e {
namespace {

class CheckpointTokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    python_ = testing::venv_python_with("transformers, jinja2");
    if (python_.empty()) {
      if (testing::under_ci()) FAIL() << ".venv has no `transformers` (scripts/setup.sh installs it)";
      GTEST_SKIP() << ".venv has no `transformers` (scripts/setup.sh installs it)";
    }
  }
  // AutoTokenizer on `folder` against spillway's tokenizer of the same folder.
  nlohmann::json expect_same_as_transformers(const std::string& folder, const std::vector<std::string>& texts) {
    write_file(dir_ / "texts.json", nlohmann::json(texts).dump());
    const CommandResult r = run_command(python_ + " " + (testing::repo_root() / "tests/parity/auto_tokenizer.py").string() +
                                        " " + folder + " " + (dir_ / "texts.json") + " " + (dir_ / "auto.json"));
    EXPECT_EQ(r.exit_code, 0) << r.out;
    if (r.exit_code != 0) return {};
    const nlohmann::json got = nlohmann::json::parse(read_file(dir_ / "auto.json"));
    const std::unique_ptr<Tokenizer> tok = load_tokenizer(folder);
    EXPECT_EQ(got.at("size"), tok->vocab_size());
    EXPECT_EQ(got.at("eos_token"), tok->token_text(tok->eos_id()));
    if (tok->roles().bos) {
      EXPECT_EQ(got.at("bos_token"), tok->token_text(*tok->roles().bos));
    } else {
      EXPECT_TRUE(got.at("bos_token").is_null()) << got.at("bos_token");
    }
    for (size_t i = 0; i < texts.size(); ++i) {
      EXPECT_EQ(got.at("ids").at(i).get<std::vector<int32_t>>(), tok->encode_text(texts[i], true)) << texts[i];
    }
    return got;
  }
  ScratchDir dir_{"checkpoint_tokenizer"};
  std::string python_;
};

TEST_F(CheckpointTokenizer, ATrainingCheckpointLoadsInAutoTokenizer) {
  write_file(dir_ / "corpus.txt", make_corpus(200, 5));
  write_file(dir_ / "micro.json", micro_config_json());
  const CommandResult r = run_spillway("train --config " + (dir_ / "micro.json") + " --data " + (dir_ / "corpus.txt") +
                                       " --separator % --vocab 300 --steps 2 --batch 2 --seq 16 --eval-batches 1 "
                                       "--sample-tokens 0 --quiet -o " + (dir_ / "run"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::string checkpoint = train::resolve_checkpoint(dir_ / "run");
  const std::unique_ptr<Tokenizer> tok = load_tokenizer(checkpoint);
  const std::string eos = tok->token_text(tok->eos_id());
  const nlohmann::json got = expect_same_as_transformers(
      checkpoint, {"the cat sees the moon", "  a dog\tlikes\n\nher song 12345", "café 日本語 🙂", "the cat" + eos + " sees",
                   ""});
  if (!got.is_null()) {
    EXPECT_EQ(got.at("chat"), "Hi there" + eos);
  }
}

TEST_F(CheckpointTokenizer, ConvertedFolderOfTheSmolLM2GgufLoadsInAutoTokenizer) {
  const std::string gguf = testing::find_smollm2_gguf();
  if (gguf.empty()) {
    if (testing::under_ci()) FAIL() << "the SmolLM2 GGUF is missing: scripts/setup.sh installs it";
    GTEST_SKIP() << "SmolLM2 GGUF not found (scripts/setup.sh installs it)";
  }
  const CommandResult r = run_spillway("convert --from " + gguf + " --to " + (dir_ / "hf"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json got = expect_same_as_transformers(
      dir_ / "hf", {"The capital of France is", "x = 1234  +  56\n\tprint(x)", "naïve café — 日本語 🙂",
                    "<|im_start|>user\nHi<|im_end|>\n"});
  if (got.is_null()) return;
  EXPECT_EQ(got.at("eos_token"), "<|im_end|>");
  EXPECT_NE(got.at("chat").get<std::string>().find("<|im_start|>user\nHi there<|im_end|>"), std::string::npos)
      << got.at("chat");
}

}  // namespace
}  // namespace spillway::e2e
