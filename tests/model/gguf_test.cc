#include "model/gguf.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "base/dtype.h"
#include "base/status.h"
#include "infer/llama_decoder.h"
#include "model/gguf_llama.h"
#include "testing/numeric.h"

namespace spillway::model {
namespace {

namespace fs = std::filesystem;

// A GGUF writer written from the format description, independent of the
// reader: header, typed metadata, tensor infos, aligned data.
class GgufBuilder {
 public:
  struct Tensor {
    std::string name;
    std::vector<int64_t> dims;  // ggml order
    uint32_t type;
    std::string bytes;
    std::optional<uint64_t> offset_override;
  };

  template <typename T>
  static void put(std::string& out, T v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  static void put_string(std::string& out, const std::string& s) {
    put<uint64_t>(out, s.size());
    out += s;
  }

  template <typename T>
  void scalar(const std::string& key, uint32_t type, T v) {
    begin(key, type);
    put<T>(kv_, v);
  }
  void u32(const std::string& key, uint32_t v) { scalar(key, 4, v); }
  void f32(const std::string& key, float v) { scalar(key, 6, v); }
  void string(const std::string& key, const std::string& v) {
    begin(key, 8);
    put_string(kv_, v);
  }
  void string_array(const std::string& key, const std::vector<std::string>& v) {
    begin(key, 9);
    put<uint32_t>(kv_, 8);
    put<uint64_t>(kv_, v.size());
    for (const auto& s : v) put_string(kv_, s);
  }
  // Any other value, already encoded (type code, then bytes).
  void raw_value(const std::string& key, uint32_t type, const std::string& encoded) {
    begin(key, type);
    kv_ += encoded;
  }

  void tensor(Tensor t) { tensors_.push_back(std::move(t)); }

  std::string build(uint32_t version = 3, uint64_t alignment = 32) const {
    std::string out = "GGUF";
    put<uint32_t>(out, version);
    put<uint64_t>(out, tensors_.size());
    put<uint64_t>(out, kv_count_);
    out += kv_;
    std::vector<uint64_t> offsets;
    uint64_t at = 0;
    for (const auto& t : tensors_) {
      offsets.push_back(at);
      at = (at + t.bytes.size() + alignment - 1) / alignment * alignment;
    }
    for (size_t k = 0; k < tensors_.size(); ++k) {
      const Tensor& t = tensors_[k];
      put_string(out, t.name);
      put<uint32_t>(out, static_cast<uint32_t>(t.dims.size()));
      for (int64_t d : t.dims) put<uint64_t>(out, static_cast<uint64_t>(d));
      put<uint32_t>(out, t.type);
      put<uint64_t>(out, t.offset_override.value_or(offsets[k]));
    }
    out.resize((out.size() + alignment - 1) / alignment * alignment, '\0');
    const size_t data = out.size();
    for (size_t k = 0; k < tensors_.size(); ++k) {
      out.resize(data + offsets[k], '\0');
      out += tensors_[k].bytes;
    }
    return out;
  }

 private:
  void begin(const std::string& key, uint32_t type) {
    put_string(kv_, key);
    put<uint32_t>(kv_, type);
    ++kv_count_;
  }
  std::string kv_;
  uint64_t kv_count_ = 0;
  std::vector<Tensor> tensors_;
};

std::string f32_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

std::string f16_bytes(const std::vector<float>& v) {
  std::string out;
  for (float x : v) GgufBuilder::put<uint16_t>(out, to_f16(x).bits);
  return out;
}

std::string bf16_bytes(const std::vector<float>& v) {
  std::string out;
  for (float x : v) GgufBuilder::put<uint16_t>(out, to_bf16(x).bits);
  return out;
}

// llama.cpp's Q8_0 quantizer: scale = max|x| / 127 per block of 32, values
// rounded to nearest. `dequantized` receives what a correct reader returns.
std::string q8_0_bytes(const std::vector<float>& v, std::vector<float>* dequantized) {
  std::string out;
  dequantized->assign(v.size(), 0.0f);
  for (size_t b = 0; b < v.size(); b += 32) {
    float amax = 0;
    for (size_t k = 0; k < 32; ++k) amax = std::max(amax, std::fabs(v[b + k]));
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    const f16 dh = to_f16(d);
    GgufBuilder::put<uint16_t>(out, dh.bits);
    for (size_t k = 0; k < 32; ++k) {
      auto q = static_cast<int8_t>(std::lround(v[b + k] * id));
      out.push_back(static_cast<char>(q));
      (*dequantized)[b + k] = to_float(dh) * static_cast<float>(q);
    }
  }
  return out;
}

// llama.cpp's Q4_1 quantizer: per block of 32, d = (max - min) / 15 and
// m = min, values rounded to nearest in [0, 15]; element k in the low nibble
// of byte k, element k + 16 in its high nibble.
std::string q4_1_bytes(const std::vector<float>& v, std::vector<float>* dequantized) {
  std::string out;
  dequantized->assign(v.size(), 0.0f);
  for (size_t b = 0; b < v.size(); b += 32) {
    float lo = v[b], hi = v[b];
    for (size_t k = 0; k < 32; ++k) lo = std::min(lo, v[b + k]), hi = std::max(hi, v[b + k]);
    const float d = (hi - lo) / 15.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    const f16 dh = to_f16(d), mh = to_f16(lo);
    GgufBuilder::put<uint16_t>(out, dh.bits);
    GgufBuilder::put<uint16_t>(out, mh.bits);
    uint8_t q[32];
    for (size_t k = 0; k < 32; ++k) {
      q[k] = static_cast<uint8_t>(std::min(15L, std::max(0L, std::lround((v[b + k] - lo) * id))));
      (*dequantized)[b + k] = to_float(dh) * static_cast<float>(q[k]) + to_float(mh);
    }
    for (size_t k = 0; k < 16; ++k) out.push_back(static_cast<char>(q[k] | (q[k + 16] << 4)));
  }
  return out;
}

std::vector<float> random_floats(size_t n, uint64_t seed, double scale = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(normal(rng));
  return v;
}

// llama.cpp's q/k reordering, as its converter states it:
// w.reshape(heads, 2, rows / heads / 2, cols).swapaxes(1, 2).reshape(w.shape),
// done here as a strided 4-D transpose.
std::vector<float> llama_cpp_permute(const std::vector<float>& w, int64_t heads, int64_t rows, int64_t cols) {
  const int64_t half = rows / heads / 2;
  std::vector<float> out(w.size());
  // Source strides of [heads, 2, half, cols]; the output walks [heads, half, 2, cols].
  const int64_t s_head = 2 * half * cols, s_two = half * cols, s_half = cols;
  size_t o = 0;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j)
        for (int64_t c = 0; c < cols; ++c) out[o++] = w[h * s_head + j * s_two + i * s_half + c];
  return out;
}

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("gguf_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& bytes) {
    std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  fs::path dir_;
};

// Runs `f` and returns the Error's message; fails the test when none is thrown.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no Error thrown";
  return "";
}

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << "'" << (part) << "' not in: " << (msg)

using GgufRead = TempDir;

TEST_F(GgufRead, MetadataOfEveryTypeReadsBackInBothVersions) {
  for (uint32_t version : {2u, 3u}) {
    GgufBuilder b;
    std::string enc;
    b.scalar<uint8_t>("u8", 0, 200);
    b.scalar<int8_t>("i8", 1, -100);
    b.scalar<uint16_t>("u16", 2, 60000);
    b.scalar<int16_t>("i16", 3, -30000);
    b.u32("u32", 4000000000u);
    b.scalar<int32_t>("i32", 5, -2000000000);
    b.f32("f32", 1.5f);
    b.scalar<uint8_t>("bool", 7, 1);
    b.string("str", "héllo");
    b.scalar<uint64_t>("u64", 10, uint64_t{1} << 40);
    b.scalar<int64_t>("i64", 11, -(int64_t{1} << 40));
    b.scalar<double>("f64", 12, 0.1);
    b.string_array("strs", {"a", "", "ccc"});
    enc.clear();
    GgufBuilder::put<uint32_t>(enc, 5);
    GgufBuilder::put<uint64_t>(enc, 3);
    for (int32_t x : {7, -8, 9}) GgufBuilder::put<int32_t>(enc, x);
    b.raw_value("ints", 9, enc);
    enc.clear();
    GgufBuilder::put<uint32_t>(enc, 6);
    GgufBuilder::put<uint64_t>(enc, 2);
    for (float x : {0.25f, -3.0f}) GgufBuilder::put<float>(enc, x);
    b.raw_value("floats", 9, enc);
    enc.clear();  // an array of two arrays of u8
    GgufBuilder::put<uint32_t>(enc, 9);
    GgufBuilder::put<uint64_t>(enc, 2);
    for (int k = 0; k < 2; ++k) {
      GgufBuilder::put<uint32_t>(enc, 0);
      GgufBuilder::put<uint64_t>(enc, 1);
      GgufBuilder::put<uint8_t>(enc, static_cast<uint8_t>(k + 1));
    }
    b.raw_value("nested", 9, enc);

    GgufFile f(write("meta.gguf", b.build(version)));
    EXPECT_EQ(f.version(), version);
    EXPECT_EQ(f.metadata().size(), 16u);
    EXPECT_EQ(f.get_int("u8"), 200);
    EXPECT_EQ(f.get_int("i8"), -100);
    EXPECT_EQ(f.get_int("u16"), 60000);
    EXPECT_EQ(f.get_int("i16"), -30000);
    EXPECT_EQ(f.get_int("u32"), 4000000000ll);
    EXPECT_EQ(f.get_int("i32"), -2000000000);
    EXPECT_EQ(f.get_float("f32"), 1.5);
    EXPECT_TRUE(f.get_bool("bool"));
    EXPECT_EQ(f.get_string("str"), "héllo");
    EXPECT_EQ(f.get_int("u64"), int64_t{1} << 40);
    EXPECT_EQ(f.get_int("i64"), -(int64_t{1} << 40));
    EXPECT_EQ(f.get_float("f64"), 0.1);
    EXPECT_EQ(f.get_float("i32"), -2000000000.0);
    EXPECT_EQ(f.get_string_array("strs"), (std::vector<std::string>{"a", "", "ccc"}));
    EXPECT_EQ(f.get_int_array("ints"), (std::vector<int64_t>{7, -8, 9}));
    EXPECT_EQ(f.get_float_array("floats"), (std::vector<double>{0.25, -3.0}));
    const GgufValue* nested = f.find("nested");
    ASSERT_NE(nested, nullptr);
    ASSERT_EQ(nested->items.size(), 2u);
    EXPECT_EQ(nested->items[1].items[0].u, 2u);
    EXPECT_FALSE(f.int_or_none("absent").has_value());
    EXPECT_HAS(error_of([&] { f.get_int("str"); }), "metadata 'str' is string, not an integer");
    EXPECT_HAS(error_of([&] { f.get_string("absent"); }), "missing metadata 'absent'");
    EXPECT_HAS(error_of([&] { f.get_string("absent"); }), "meta.gguf");
  }
}

TEST_F(GgufRead, DequantizesEachTypeInRowMajorShape) {
  for (uint64_t alignment : {32u, 64u}) {
    GgufBuilder b;
    if (alignment != 32) b.u32("general.alignment", static_cast<uint32_t>(alignment));
    auto a = random_floats(5 * 3, 1);
    auto h = random_floats(7 * 3, 2);
    auto bf = random_floats(11, 3);
    auto q = random_floats(64 * 3, 4, 0.5);
    std::vector<float> q_ref;
    b.tensor({"a", {5, 3}, 0, f32_bytes(a), {}});
    b.tensor({"h", {7, 3}, 1, f16_bytes(h), {}});
    b.tensor({"q", {64, 3}, 8, q8_0_bytes(q, &q_ref), {}});
    b.tensor({"bf", {11}, 30, bf16_bytes(bf), {}});
    auto q4 = random_floats(32 * 5, 5, 0.5);
    std::vector<float> q4_ref;
    b.tensor({"q4", {32, 5}, 3, q4_1_bytes(q4, &q4_ref), {}});
    GgufFile f(write("t.gguf", b.build(3, alignment)));
    EXPECT_EQ(f.read_f32(f.tensor("q4")), q4_ref);
    // Within Q4_1's error: half a step of (max - min) / 15, plus f16 rounding.
    const auto q4_back = f.read_f32(f.tensor("q4"));
    for (size_t blk = 0; blk < q4.size(); blk += 32) {
      const auto [lo, hi] = std::minmax_element(q4.begin() + static_cast<std::ptrdiff_t>(blk),
                                                q4.begin() + static_cast<std::ptrdiff_t>(blk) + 32);
      const float step = (*hi - *lo) / 15.0f;
      for (size_t k = blk; k < blk + 32; ++k) EXPECT_NEAR(q4_back[k], q4[k], 0.5f * step + 2e-3f) << k;
    }
    EXPECT_EQ(f.alignment(), alignment);
    EXPECT_EQ(f.data_offset() % alignment, 0u);
    EXPECT_EQ(f.tensor("a").shape(), (Shape{3, 5}));
    EXPECT_EQ(f.tensor("q").shape(), (Shape{3, 64}));
    EXPECT_EQ(f.tensor("bf").shape(), (Shape{11}));
    EXPECT_EQ(f.read_f32(f.tensor("a")), a);
    auto h_back = f.read_f32(f.tensor("h"));
    auto bf_back = f.read_f32(f.tensor("bf"));
    for (size_t k = 0; k < h.size(); ++k) EXPECT_EQ(h_back[k], to_float(to_f16(h[k]))) << k;
    for (size_t k = 0; k < bf.size(); ++k) EXPECT_EQ(bf_back[k], to_float(to_bf16(bf[k]))) << k;
    auto q_back = f.read_f32(f.tensor("q"));
    EXPECT_EQ(q_back, q_ref);
    // Within Q8_0's error: half a step of max|x| / 127, plus the f16 scale's rounding.
    for (size_t blk = 0; blk < q.size(); blk += 32) {
      float amax = 0;
      for (size_t k = 0; k < 32; ++k) amax = std::max(amax, std::fabs(q[blk + k]));
      for (size_t k = 0; k < 32; ++k) {
        EXPECT_LE(std::fabs(q_back[blk + k] - q[blk + k]), amax / 127.0f * 0.5f + amax * 1e-3f) << blk + k;
      }
    }
  }
}

TEST_F(GgufRead, BadFilesNameTheFileAndTheTensor) {
  auto good = [&](std::optional<uint64_t> offset_override, uint32_t type) {
    GgufBuilder b;
    b.string("general.architecture", "llama");
    b.tensor({"first.weight", {32, 2}, 0, f32_bytes(random_floats(64, 5)), {}});
    b.tensor({"blk.0.attn_q.weight", {32, 3}, type, f32_bytes(random_floats(96, 6)), offset_override});
    return b.build();
  };
  const std::string ok = good({}, 0);
  ASSERT_NO_THROW(GgufFile(write("ok.gguf", ok)));

  std::string msg = error_of([&] { GgufFile(write("cut.gguf", ok.substr(0, ok.size() - 5))); });
  EXPECT_HAS(msg, "cut.gguf");
  EXPECT_HAS(msg, "tensor 'blk.0.attn_q.weight'");
  EXPECT_HAS(msg, "past the end");

  msg = error_of([&] { GgufFile(write("head.gguf", ok.substr(0, 30))); });
  EXPECT_HAS(msg, "head.gguf: truncated");

  msg = error_of([&] { GgufFile(write("empty.gguf", "")); });
  EXPECT_HAS(msg, "empty.gguf: truncated");

  std::string bad_magic = ok;
  bad_magic[0] = 'X';
  msg = error_of([&] { GgufFile(write("magic.gguf", bad_magic)); });
  EXPECT_HAS(msg, "magic.gguf: not a GGUF file");

  msg = error_of([&] { GgufFile(write("far.gguf", good(uint64_t{1} << 20, 0))); });
  EXPECT_HAS(msg, "far.gguf");
  EXPECT_HAS(msg, "tensor 'blk.0.attn_q.weight'");
  EXPECT_HAS(msg, "past the end");

  msg = error_of([&] { GgufFile(write("misaligned.gguf", good(uint64_t{264}, 0))); });
  EXPECT_HAS(msg, "tensor 'blk.0.attn_q.weight' offset 264 is not a multiple of the alignment 32");

  msg = error_of([&] { GgufFile(write("overlap.gguf", good(uint64_t{224}, 0))); });
  EXPECT_HAS(msg, "overlaps tensor 'first.weight'");

  msg = error_of([&] { GgufFile(write("q4k.gguf", good({}, 12))); });
  EXPECT_HAS(msg, "q4k.gguf");
  EXPECT_HAS(msg, "tensor 'blk.0.attn_q.weight' has ggml type 12 (Q4_K)");

  msg = error_of([&] { GgufFile(write("unknown.gguf", good({}, 99))); });
  EXPECT_HAS(msg, "tensor 'blk.0.attn_q.weight' has ggml type 99 (unknown)");

  std::string v1 = ok;
  v1[4] = 1;
  msg = error_of([&] { GgufFile(write("v1.gguf", v1)); });
  EXPECT_HAS(msg, "v1.gguf: GGUF version 1 is not supported");
}

// Inputs that earlier versions accepted or crashed on, each with the exact
// line a user sees.
TEST_F(GgufRead, HostileFilesGiveExactLines) {
  GgufBuilder b;
  b.string("general.architecture", "llama");
  b.tensor({"first.weight", {32, 2}, 0, f32_bytes(random_floats(64, 5)), {}});
  const std::string ok = b.build();
  ASSERT_EQ(ok.size() % 32, 0u);
  ASSERT_NO_THROW(GgufFile(write("ok.gguf", ok)));

  // Bytes after the last tensor: up to the alignment is padding, more is not.
  std::string path;
  {
    GgufBuilder odd;
    odd.tensor({"w", {3}, 0, f32_bytes({1, 2, 3}), {}});
    const std::string bytes = odd.build();
    ASSERT_NO_THROW(GgufFile(write("odd.gguf", bytes)));
    const size_t padded = (bytes.size() + 31) / 32 * 32;
    ASSERT_NO_THROW(GgufFile(write("odd_padded.gguf", bytes + std::string(padded - bytes.size(), '\0'))));
    path = write("odd_junk.gguf", bytes + std::string(padded - bytes.size() + 1, '\0'));
    EXPECT_EQ(error_of([&] { GgufFile f(path); }),
              path + ": " + std::to_string(padded - bytes.size() + 1) +
                  " bytes follow the last tensor's data ('w') where the file should end (" +
                  std::to_string(bytes.size()) + " bytes, or " + std::to_string(padded) +
                  " with the alignment's padding): garbage appended or a damaged file");
  }
  path = write("junk.gguf", ok + "junk");
  EXPECT_EQ(error_of([&] { GgufFile f(path); }),
            path + ": 4 bytes follow the last tensor's data ('first.weight') where the file should end (" +
                std::to_string(ok.size()) + " bytes, or " + std::to_string(ok.size()) +
                " with the alignment's padding): garbage appended or a damaged file");

  // A shape whose byte count wraps 64 bits to zero would pass every bounds check.
  GgufBuilder wrap;
  wrap.tensor({"huge", {int64_t{1} << 40, int64_t{1} << 22}, 0, "", uint64_t{0}});
  path = write("wrap.gguf", wrap.build());
  EXPECT_EQ(error_of([&] { GgufFile f(path); }),
            path + ": the byte size of tensor 'huge' overflows 64 bits: 4611686018427387904 x 4");

  std::string v4 = ok;
  v4[4] = 4;
  path = write("v4.gguf", v4);
  EXPECT_EQ(error_of([&] { GgufFile f(path); }),
            path + ": GGUF version 4 is not supported (spillway reads versions 2 and 3, little-endian)");

  // An array claiming 2^25 one-byte elements, with the bytes there.
  GgufBuilder big;
  std::string encoded;
  GgufBuilder::put<uint32_t>(encoded, 0);
  GgufBuilder::put<uint64_t>(encoded, uint64_t{1} << 25);
  encoded += std::string(size_t{1} << 25, '\0');
  big.raw_value("tokenizer.ggml.scores", 9, encoded);
  path = write("big_array.gguf", big.build());
  EXPECT_EQ(error_of([&] { GgufFile f(path); }),
            path + ": metadata 'tokenizer.ggml.scores' holds 33554432 elements; at most 16777216");

  path = (dir_ / "fifo.gguf").string();
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  EXPECT_EQ(error_of([&] { GgufFile f(path); }), path + ": is a FIFO, not a GGUF file");
}

// --- LLaMA mapping ---------------------------------------------------------

LlamaConfig small_config(bool tied) {
  LlamaConfig c;
  c.vocab_size = 37;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 64;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 5000.0;
  c.tie_word_embeddings = tied;
  return c;
}

enum class Storage { f32, quantized };

// The GGUF llama.cpp's converter would write for `w`: llama.* metadata, GGUF
// names, q and k permuted, 2-D tensors Q8_0 (embedding F16) when quantized.
// `stored` receives the HF-layout weights a correct reader must return.
std::string llama_gguf(const LlamaWeights& w, Storage storage, LlamaWeights* stored) {
  const LlamaConfig& c = w.config();
  *stored = w;
  GgufBuilder b;
  b.string("general.architecture", "llama");
  b.u32("llama.context_length", static_cast<uint32_t>(c.max_position_embeddings));
  b.u32("llama.embedding_length", static_cast<uint32_t>(c.hidden_size));
  b.u32("llama.block_count", static_cast<uint32_t>(c.num_hidden_layers));
  b.u32("llama.feed_forward_length", static_cast<uint32_t>(c.intermediate_size));
  b.u32("llama.rope.dimension_count", static_cast<uint32_t>(c.head_dim()));
  b.u32("llama.attention.head_count", static_cast<uint32_t>(c.num_attention_heads));
  b.u32("llama.attention.head_count_kv", static_cast<uint32_t>(c.num_key_value_heads));
  b.f32("llama.rope.freq_base", static_cast<float>(c.rope_theta));
  b.f32("llama.attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_norm_eps));
  std::vector<std::string> tokens;
  for (int64_t k = 0; k < c.vocab_size; ++k) tokens.push_back("t" + std::to_string(k));
  b.string_array("tokenizer.ggml.tokens", tokens);
  for (const NamedTensor& t : w.tensors()) {
    std::vector<float> data = t.data;
    const bool q = t.name.ends_with("q_proj.weight"), k = t.name.ends_with("k_proj.weight");
    if (q || k) data = llama_cpp_permute(data, q ? c.num_attention_heads : c.num_key_value_heads, t.shape[0], t.shape[1]);
    std::vector<int64_t> dims(t.shape.dims().rbegin(), t.shape.dims().rend());
    std::string name = gguf_tensor_name(t.name);
    std::vector<float>& expect = stored->at(t.name).data;
    if (storage == Storage::f32 || t.shape.rank() == 1) {
      b.tensor({name, dims, 0, f32_bytes(data), {}});
    } else if (t.name == "model.embed_tokens.weight") {
      b.tensor({name, dims, 1, f16_bytes(data), {}});
      for (float& x : expect) x = to_float(to_f16(x));
    } else {
      std::vector<float> deq;
      b.tensor({name, dims, 8, q8_0_bytes(data, &deq), {}});
      // The reader un-permutes, so compare against the dequantized rows in HF order.
      if (q || k) {
        int64_t heads = q ? c.num_attention_heads : c.num_key_value_heads;
        unpermute_qk_rows_from_gguf(deq, expect, heads, c.head_dim(), t.shape[1]);
      } else {
        expect = deq;
      }
    }
  }
  return b.build();
}

std::vector<float> logits_of(const LlamaWeights& w, const std::vector<int32_t>& tokens) {
  infer::LlamaDecoder dec(w, static_cast<int64_t>(tokens.size()));
  return dec.forward(tokens);
}

const std::vector<int32_t> kTokens = {3, 17, 0, 36, 5, 5, 21, 9, 30};

TEST(GgufPermutation, MatchesLlamaCppAndIsUndoneExactly) {
  for (auto [heads, head_dim, cols] : {std::tuple<int64_t, int64_t, int64_t>{4, 8, 5}, {2, 6, 3}, {1, 4, 7}}) {
    auto w = random_floats(static_cast<size_t>(heads * head_dim * cols), 11);
    std::vector<float> ours(w.size()), back(w.size());
    permute_qk_rows_to_gguf(w, ours, heads, head_dim, cols);
    EXPECT_EQ(ours, llama_cpp_permute(w, heads, heads * head_dim, cols));
    EXPECT_NE(ours, w);
    unpermute_qk_rows_from_gguf(ours, back, heads, head_dim, cols);
    EXPECT_EQ(back, w);
  }
}

// Why the permutation exists: llama.cpp's RoPE rotates adjacent pairs, HF's
// rotates halves; on permuted rows the first equals the permuted second.
TEST(GgufPermutation, InterleavedRopeOnPermutedRowsIsPermutedRotateHalf) {
  const int64_t heads = 3, head_dim = 10, half = head_dim / 2;
  auto v = random_floats(static_cast<size_t>(heads * head_dim), 12);
  std::vector<float> pv = llama_cpp_permute(v, heads, heads * head_dim, 1);
  for (double pos : {0.0, 1.0, 7.0, 123.0}) {
    std::vector<double> rot_half(v.size()), interleaved(v.size());
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t o = h * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const double angle = pos * std::pow(10000.0, -2.0 * static_cast<double>(i) / head_dim);
        const double cs = std::cos(angle), sn = std::sin(angle);
        rot_half[o + i] = v[o + i] * cs - v[o + i + half] * sn;
        rot_half[o + i + half] = v[o + i + half] * cs + v[o + i] * sn;
        interleaved[o + 2 * i] = pv[o + 2 * i] * cs - pv[o + 2 * i + 1] * sn;
        interleaved[o + 2 * i + 1] = pv[o + 2 * i] * sn + pv[o + 2 * i + 1] * cs;
      }
    }
    std::vector<float> rot_half_f(rot_half.begin(), rot_half.end());
    std::vector<float> expected = llama_cpp_permute(rot_half_f, heads, heads * head_dim, 1);
    for (size_t k = 0; k < v.size(); ++k) EXPECT_NEAR(interleaved[k], expected[k], 1e-6) << k;
  }
}

using GgufLlama = TempDir;

TEST_F(GgufLlama, F32FileLoadsToTheSameWeightsConfigAndLogits) {
  for (bool tied : {false, true}) {
    LlamaWeights w = LlamaWeights::random(small_config(tied), 21, 0.2);
    LlamaWeights expect;
    GgufFile f(write("m.gguf", llama_gguf(w, Storage::f32, &expect)));
    LlamaConfig c = gguf_llama_config(f);
    EXPECT_EQ(c.vocab_size, 37);
    EXPECT_EQ(c.hidden_size, 32);
    EXPECT_EQ(c.intermediate_size, 64);
    EXPECT_EQ(c.num_hidden_layers, 2);
    EXPECT_EQ(c.num_attention_heads, 4);
    EXPECT_EQ(c.num_key_value_heads, 2);
    EXPECT_EQ(c.max_position_embeddings, 64);
    EXPECT_FLOAT_EQ(static_cast<float>(c.rms_norm_eps), 1e-6f);
    EXPECT_EQ(c.rope_theta, 5000.0);
    EXPECT_EQ(c.tie_word_embeddings, tied);

    LlamaWeights back = load_gguf_llama(f);
    ASSERT_EQ(back.tensors().size(), w.tensors().size());
    for (size_t k = 0; k < w.tensors().size(); ++k) {
      EXPECT_EQ(back.tensors()[k].name, w.tensors()[k].name);
      EXPECT_EQ(back.tensors()[k].data, w.tensors()[k].data) << w.tensors()[k].name;
    }
    EXPECT_EQ(logits_of(back, kTokens), logits_of(w, kTokens));
  }
}

TEST_F(GgufLlama, QuantizedFileGivesTheLogitsOfItsDequantizedWeights) {
  LlamaWeights w = LlamaWeights::random(small_config(false), 22, 0.2);
  LlamaWeights expect;
  GgufFile f(write("q.gguf", llama_gguf(w, Storage::quantized, &expect)));
  LlamaWeights back = load_gguf_llama(f);
  for (size_t k = 0; k < w.tensors().size(); ++k) {
    EXPECT_EQ(back.tensors()[k].data, expect.tensors()[k].data) << w.tensors()[k].name;
  }
  auto got = logits_of(back, kTokens);
  auto original = logits_of(w, kTokens);
  EXPECT_EQ(got, logits_of(expect, kTokens));
  std::vector<double> got_d(got.begin(), got.end()), original_d(original.begin(), original.end());
  EXPECT_LT(testing::rel_error(got_d, original_d), 0.05);

  // The test can fail: q and k left in llama.cpp's order change the logits.
  LlamaWeights unfixed = back;
  for (NamedTensor& t : unfixed.tensors()) {
    const bool q = t.name.ends_with("q_proj.weight"), k = t.name.ends_with("k_proj.weight");
    if (q || k) t.data = llama_cpp_permute(t.data, q ? 4 : 2, t.shape[0], t.shape[1]);
  }
  auto wrong = logits_of(unfixed, kTokens);
  std::vector<double> wrong_d(wrong.begin(), wrong.end());
  EXPECT_GT(testing::rel_error(wrong_d, original_d), 0.05);
}

TEST_F(GgufLlama, MismatchesNameTheFileAndTheTensorOrKey) {
  LlamaWeights w = LlamaWeights::random(small_config(false), 23, 0.2);
  LlamaWeights expect;
  std::string good = llama_gguf(w, Storage::f32, &expect);

  // Drop a tensor, misshape one, add a bias: rebuild with the builder.
  // `blocks` > 0 replaces llama.block_count.
  auto rebuild = [&](const std::string& skip, const std::string& misshape, bool bias, uint32_t blocks = 0) {
    GgufBuilder b;
    GgufFile f(write("src.gguf", good));
    for (const auto& [key, value] : f.metadata()) {
      if (key == "tokenizer.ggml.tokens") continue;
      if (value.type == GgufValueType::string) b.string(key, value.s);
      else if (value.type == GgufValueType::f32) b.f32(key, static_cast<float>(value.f));
      else b.u32(key, blocks > 0 && key == "llama.block_count" ? blocks : static_cast<uint32_t>(value.u));
    }
    for (const GgufTensorInfo& t : f.tensors()) {
      if (t.name == skip) continue;
      auto raw = f.raw(t);
      std::vector<int64_t> dims = t.dims;
      if (t.name == misshape) std::swap(dims[0], dims[1]);
      b.tensor({t.name, dims, static_cast<uint32_t>(t.type), std::string(reinterpret_cast<const char*>(raw.data()), raw.size()), {}});
    }
    if (bias) b.tensor({"blk.1.attn_q.bias", {32}, 0, f32_bytes(random_floats(32, 1)), {}});
    return b.build();
  };
  std::string msg = error_of([&] { load_gguf_llama(write("a.gguf", rebuild("blk.1.ffn_up.weight", "", false))); });
  EXPECT_HAS(msg, "a.gguf: missing tensor 'blk.1.ffn_up.weight'");
  msg = error_of([&] { load_gguf_llama(write("b.gguf", rebuild("", "blk.0.ffn_down.weight", false))); });
  EXPECT_HAS(msg, "b.gguf: tensor 'blk.0.ffn_down.weight' has shape [64, 32]");
  msg = error_of([&] { load_gguf_llama(write("c.gguf", rebuild("", "", true))); });
  EXPECT_HAS(msg, "c.gguf: tensor 'blk.1.attn_q.bias' is not part of the LLaMA model");
  // A block_count other than the file's layers names both numbers.
  EXPECT_EQ(error_of([&] { load_gguf_llama(write("e.gguf", rebuild("", "", false, 1))); }),
            (dir_ / "e.gguf").string() + ": llama.block_count is 1 but the file's tensors hold 2 layers");
  EXPECT_EQ(error_of([&] { load_gguf_llama(write("f.gguf", rebuild("", "", false, 3))); }),
            (dir_ / "f.gguf").string() + ": llama.block_count is 3 but the file's tensors hold 2 layers");
  // No output.weight: tied embeddings, still a valid model.
  EXPECT_TRUE(load_gguf_llama(write("d.gguf", rebuild("output.weight", "", false))).config().tie_word_embeddings);
}

TEST_F(GgufLlama, MissingOrForeignMetadataIsNamed) {
  GgufBuilder b;
  b.string("general.architecture", "llama");
  b.u32("llama.embedding_length", 32);
  b.tensor({"token_embd.weight", {32, 5}, 0, f32_bytes(random_floats(160, 1)), {}});
  std::string msg = error_of([&] { gguf_llama_config(GgufFile(write("m.gguf", b.build()))); });
  EXPECT_HAS(msg, "m.gguf: missing metadata 'llama.feed_forward_length'");

  GgufBuilder g;
  g.string("general.architecture", "gemma");
  msg = error_of([&] { gguf_llama_config(GgufFile(write("g.gguf", g.build()))); });
  EXPECT_HAS(msg, "g.gguf: general.architecture is 'gemma'");
}

}  // namespace
}  // namespace spillway::model
