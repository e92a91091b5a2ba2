#include "model/sentencepiece_tokenizer.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "base/status.h"

#ifdef SPILLWAY_HAS_SENTENCEPIECE
#include <sentencepiece_trainer.h>
#endif

namespace spillway {
namespace {

namespace fs = std::filesystem;

#ifdef SPILLWAY_HAS_SENTENCEPIECE

// Words built from syllables so that BPE has pairs worth merging, plus a
// few non-ASCII words so that the model holds multi-byte characters.
std::string random_word(std::mt19937& rng) {
  static const std::vector<std::string> syllables = {
      "ka", "lo", "mi", "ne", "ru", "ta", "ve", "so", "pi", "dan", "the", "ing", "er", "caf\xC3\xA9",
      "\xE6\x97\xA5\xE6\x9C\xAC", "na", "go", "zu"};
  std::uniform_int_distribution<size_t> pick(0, syllables.size() - 1);
  std::uniform_int_distribution<int> length(1, 3);
  std::string word;
  for (int n = length(rng); n > 0; --n) word += syllables[pick(rng)];
  return word;
}

std::string random_line(std::mt19937& rng, int words) {
  std::string line;
  for (int i = 0; i < words; ++i) {
    if (i > 0) line += ' ';
    line += random_word(rng);
  }
  return line;
}

// Trains a BPE model the way LLaMA's was set up: identity normalization,
// spaces kept as they are, digits split, byte fallback for unseen text.
std::string train_model(const fs::path& dir, const std::string& name, int vocab_size) {
  std::mt19937 rng(1234);
  const fs::path corpus = dir / (name + ".txt");
  {
    std::ofstream out(corpus);
    for (int i = 0; i < 600; ++i) out << random_line(rng, 12) << " " << i * 37 << "\n";
  }
  const std::string prefix = (dir / name).string();
  const auto status = sentencepiece::SentencePieceTrainer::Train({
      {"input", corpus.string()},
      {"model_prefix", prefix},
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(vocab_size)},
      {"character_coverage", "1.0"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"split_digits", "true"},
      {"byte_fallback", "true"},
      {"num_threads", "1"},
      {"minloglevel", "2"},
  });
  if (!status.ok()) throw Error(prefix, status.ToString());
  return prefix + ".model";
}

class SentencePieceTokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string pattern = (fs::temp_directory_path() / "spillway-spm-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = new fs::path(pattern);
    model_path_ = new std::string(train_model(*dir_, "small", 400));
    other_model_path_ = new std::string(train_model(*dir_, "other", 350));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete model_path_;
    delete other_model_path_;
  }

  static std::string write(const std::string& name, const std::string& bytes) {
    const std::string path = (*dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  static void expect_error(const std::string& path, const std::string& problem) {
    try {
      SentencePieceTokenizer tokenizer(path);
      ADD_FAILURE() << "loaded " << path;
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind(path + ": ", 0), 0u) << what;
      EXPECT_NE(what.find(problem), std::string::npos) << what;
    }
  }

  static fs::path* dir_;
  static std::string* model_path_;
  static std::string* other_model_path_;
};

fs::path* SentencePieceTokenizerTest::dir_ = nullptr;
std::string* SentencePieceTokenizerTest::model_path_ = nullptr;
std::string* SentencePieceTokenizerTest::other_model_path_ = nullptr;

// Texts of several kinds: like the training text, with odd spacing, with
// characters never seen in training (byte fallback), and with digits.
std::vector<std::string> sample_texts() {
  std::mt19937 rng(99);
  std::vector<std::string> texts = {
      "a",
      " leading space",
      "trailing space ",
      "two  spaces   and\ttab\nnew line",
      "unseen: \xF0\x9F\x99\x82 \xD0\x96\xD0\xB8\xD0\xB2 \xCE\xBB!",
      "numbers 1234567 and 0.5",
      "\n\n",
  };
  for (int i = 0; i < 60; ++i) {
    std::uniform_int_distribution<int> words(1, 17);
    texts.push_back(random_line(rng, words(rng)));
  }
  return texts;
}

// The reference decoding, written from the pieces alone: "▁" is a space,
// "<0xAB>" is a byte, anything else is its own text. SentencePiece's dummy
// prefix makes the pieces spell " " + text.
std::string spell(const SentencePieceTokenizer& tokenizer, const std::vector<int32_t>& ids) {
  std::string out;
  for (const int32_t id : ids) {
    const std::string piece = tokenizer.piece(id);
    if (piece.size() == 6 && piece.rfind("<0x", 0) == 0 && piece.back() == '>') {
      out += static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16));
      continue;
    }
    for (size_t i = 0; i < piece.size();) {
      if (piece.compare(i, 3, "\xE2\x96\x81") == 0) {
        out += ' ';
        i += 3;
      } else {
        out += piece[i++];
      }
    }
  }
  return out;
}

TEST_F(SentencePieceTokenizerTest, SizesAndSpecialIdsAreLlamaLike) {
  SentencePieceTokenizer tokenizer(*model_path_);
  EXPECT_EQ(tokenizer.vocab_size(), 400);
  EXPECT_EQ(tokenizer.bos_id(), 1);
  EXPECT_EQ(tokenizer.eos_id(), 2);
  EXPECT_EQ(tokenizer.piece(0), "<unk>");
  EXPECT_EQ(tokenizer.piece(1), "<s>");
  EXPECT_EQ(tokenizer.piece(2), "</s>");
  EXPECT_EQ(tokenizer.kind(), "sentencepiece");
}

TEST_F(SentencePieceTokenizerTest, PiecesSpellTheTextAndDecodeRoundTrips) {
  SentencePieceTokenizer tokenizer(*model_path_);
  for (const std::string& text : sample_texts()) {
    const std::vector<int32_t> ids = tokenizer.encode(text);
    ASSERT_FALSE(ids.empty()) << text;
    for (const int32_t id : ids) {
      ASSERT_GE(id, 3) << text;  // no control or unknown ids from plain text
      ASSERT_LT(id, tokenizer.vocab_size()) << text;
    }
    EXPECT_EQ(spell(tokenizer, ids), " " + text) << text;
    EXPECT_EQ(tokenizer.decode(ids), text) << text;
  }
}

TEST_F(SentencePieceTokenizerTest, MergesShortenTrainingLikeText) {
  SentencePieceTokenizer tokenizer(*model_path_);
  std::mt19937 rng(5);
  const std::string text = random_line(rng, 200);
  const std::vector<int32_t> ids = tokenizer.encode(text);
  EXPECT_LT(ids.size() * 2, text.size()) << "ids " << ids.size() << " for " << text.size() << " bytes";
}

TEST_F(SentencePieceTokenizerTest, BosIsAddedOnlyWhenAsked) {
  SentencePieceTokenizer tokenizer(*model_path_);
  for (const std::string& text : sample_texts()) {
    const std::vector<int32_t> plain = tokenizer.encode(text);
    const std::vector<int32_t> with_bos = tokenizer.encode_with_bos(text);
    ASSERT_EQ(with_bos.size(), plain.size() + 1);
    EXPECT_EQ(with_bos[0], tokenizer.bos_id());
    EXPECT_EQ(std::vector<int32_t>(with_bos.begin() + 1, with_bos.end()), plain);
    EXPECT_EQ(tokenizer.decode(with_bos), "<s>" + text);
  }
  EXPECT_TRUE(tokenizer.encode("").empty());
  EXPECT_EQ(tokenizer.encode_with_bos(""), std::vector<int32_t>{1});
}

// LLaMA-2 chat text: with allow_special each stretch between <s> and </s>
// is encoded on its own, which is Meta's reference (one encode per turn,
// wrapped in bos and eos ids).
TEST_F(SentencePieceTokenizerTest, AllowSpecialCutsControlTextsOut) {
  SentencePieceTokenizer tokenizer(*model_path_);
  const std::string turn1 = "[INST] kalo mi [/INST] tave so ";
  const std::string turn2 = "[INST] danthe 42 [/INST]";
  const std::string text = "<s>" + turn1 + "</s><s>" + turn2;

  std::vector<int32_t> expected{tokenizer.bos_id()};
  for (const int32_t id : tokenizer.encode(turn1)) expected.push_back(id);
  expected.push_back(tokenizer.eos_id());
  expected.push_back(tokenizer.bos_id());
  for (const int32_t id : tokenizer.encode(turn2)) expected.push_back(id);

  const std::vector<int32_t> ids = tokenizer.encode(text, /*allow_special=*/true);
  EXPECT_EQ(ids, expected);
  EXPECT_EQ(tokenizer.decode(ids), text);

  const std::vector<int32_t> literal = tokenizer.encode(text, /*allow_special=*/false);
  for (const int32_t id : literal) EXPECT_GE(id, 3);
  EXPECT_EQ(tokenizer.decode(literal), text);

  // <unk> is cut out too, as Hugging Face's LlamaTokenizer does.
  const std::vector<int32_t> x = tokenizer.encode("x");
  const std::vector<int32_t> with_unk = tokenizer.encode("x<unk>y", true);
  ASSERT_GT(with_unk.size(), x.size());
  EXPECT_EQ(with_unk[x.size()], 0);
}

TEST_F(SentencePieceTokenizerTest, DecodeRefusesIdsOutsideTheVocabulary) {
  SentencePieceTokenizer tokenizer(*model_path_);
  for (const int32_t bad : {-1, 400, 1 << 20}) {
    const std::vector<int32_t> ids{5, bad};
    try {
      tokenizer.decode(ids);
      ADD_FAILURE() << "decoded id " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("token id " + std::to_string(bad)), std::string::npos) << e.what();
    }
  }
}

TEST_F(SentencePieceTokenizerTest, FingerprintFollowsTheModel) {
  SentencePieceTokenizer a(*model_path_);
  SentencePieceTokenizer b(*model_path_);
  SentencePieceTokenizer other(*other_model_path_);
  EXPECT_EQ(a.fingerprint().size(), 16u);
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  EXPECT_NE(a.fingerprint(), other.fingerprint());
  EXPECT_EQ(other.vocab_size(), 350);
}

TEST_F(SentencePieceTokenizerTest, MissingAndCorruptFilesAreRefusedByName) {
  expect_error((*dir_ / "absent.model").string(), "no such file");
  std::string noise(3000, '\0');
  std::mt19937 rng(7);
  for (char& c : noise) c = static_cast<char>(rng());
  expect_error(write("noise.model", noise), "not a SentencePiece model");
  expect_error(write("json.model", "{\"model\": {}}"), "not a SentencePiece model");

  std::ifstream in(*model_path_, std::ios::binary);
  const std::string whole((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  expect_error(write("truncated.model", whole.substr(0, whole.size() / 2)), "not a SentencePiece model");
}

// A unigram model with a zero-length piece makes the library throw from its
// trie instead of returning a status (a fuzzer finding): one line, and a
// FIFO is refused by its kind without being opened.
TEST_F(SentencePieceTokenizerTest, ModelsTheLibraryThrowsOnAreOneLine) {
  const auto varint = [](std::string& out, uint64_t v) {
    for (; v >= 0x80; v >>= 7) out += static_cast<char>((v & 0x7F) | 0x80);
    out += static_cast<char>(v);
  };
  const auto bytes_field = [&](std::string& out, int field, const std::string& payload) {
    varint(out, static_cast<uint64_t>(field) << 3 | 2);
    varint(out, payload.size());
    out += payload;
  };
  const auto piece = [&](const std::string& text, int type) {
    std::string p;
    bytes_field(p, 1, text);
    p += std::string("\x15\x00\x00\x80\xbf", 5);  // score (field 2, fixed32): -1.0
    varint(p, 3 << 3);
    varint(p, static_cast<uint64_t>(type));
    return p;
  };
  std::string proto;
  for (const auto& [text, type] : std::vector<std::pair<std::string, int>>{
           {"<unk>", 2}, {"<s>", 3}, {"</s>", 3}, {"", 1}, {"a", 1}}) {
    bytes_field(proto, 1, piece(text, type));
  }
  std::string trainer;
  varint(trainer, 3 << 3);
  varint(trainer, 1);  // model_type: unigram
  bytes_field(proto, 2, trainer);
  try {
    SentencePieceTokenizer::from_serialized(proto, "tokenizer.model");
    ADD_FAILURE() << "loaded";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("tokenizer.model: not a SentencePiece model (", 0), 0u) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }

  const std::string fifo = (*dir_ / "fifo.model").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_error(fifo, "is a FIFO, not a SentencePiece tokenizer.model");
}

TEST_F(SentencePieceTokenizerTest, MovedTokenizerKeepsWorking) {
  SentencePieceTokenizer first(*model_path_);
  const std::vector<int32_t> ids = first.encode("kalo mi");
  SentencePieceTokenizer moved(std::move(first));
  EXPECT_EQ(moved.encode("kalo mi"), ids);
}

#else  // !SPILLWAY_HAS_SENTENCEPIECE

TEST(SentencePieceTokenizerTest, SaysItWasBuiltWithoutSentencePiece) {
  try {
    SentencePieceTokenizer tokenizer("tokenizer.model");
    ADD_FAILURE() << "constructed without SentencePiece";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("built without SentencePiece"), std::string::npos) << e.what();
  }
}

#endif

}  // namespace
}  // namespace spillway
