// spillway tokenize with a SentencePiece tokenizer.model (LLaMA-1/2 style):
// token files made through the common Tokenizer interface.
#include <gtest/gtest.h>

#ifdef SPILLWAY_HAS_SENTENCEPIECE
#include <sentencepiece_trainer.h>
#endif

#include "e2e/e2e_util.h"
#include "model/sentencepiece_tokenizer.h"
#include "train/token_file.h"

namespace spillway::e2e {
namespace {

TEST(TokenizeE2E, SentencePieceModelMakesTokenFiles) {
#ifndef SPILLWAY_HAS_SENTENCEPIECE
  GTEST_SKIP() << "built without SentencePiece";
#else
  ScratchDir dir("tokenize_spm");
  write_file(dir / "corpus.txt", make_corpus(300, 11));
  const auto status = sentencepiece::SentencePieceTrainer::Train({
      {"input", dir / "corpus.txt"},
      {"model_prefix", dir / "spm"},
      {"model_type", "bpe"},
      {"vocab_size", "400"},
      {"normalization_rule_name", "identity"},
      {"byte_fallback", "true"},
      {"num_threads", "1"},
      {"minloglevel", "2"},
  });
  ASSERT_TRUE(status.ok()) << status.ToString();
  CommandResult r = run_spillway("tokenize " + (dir / "corpus.txt") + " --separator % --tokenizer " +
                                 (dir / "spm.model") + " --out " + (dir / "data"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(fs::exists(dir / "data/tokenizer.model"));
  SentencePieceTokenizer spm(dir / "spm.model");
  TokenFile train(dir / "data/train.bin");
  EXPECT_EQ(train.vocab_size(), spm.vocab_size());
  train.require_tokenizer(spm.fingerprint());
  // The first document comes back as text, followed by the end-of-text id.
  std::vector<int32_t> ids(static_cast<size_t>(std::min<uint64_t>(train.size(), 40)));
  train.copy(0, ids);
  auto eos = std::find(ids.begin(), ids.end(), spm.eos_id());
  ASSERT_NE(eos, ids.end());
  const std::string first = spm.decode(std::vector<int32_t>(ids.begin(), eos));
  EXPECT_NE(read_file(dir / "corpus.txt").find(first), std::string::npos) << first;
#endif
}

}  // namespace
}  // namespace spillway::e2e
