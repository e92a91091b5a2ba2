// Weight directories: single-file and sharded round trips of f32 and bf16
// weights, the index checked by a parser written here, stale files of an
// earlier layout removed, hand-written indexes read, and every broken
// directory (missing shard, tensor not in its shard, bad index) refused with
// an error naming the index and the shard.
#include "model/weight_directory.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/status.h"
#include "testing/files.h"
#include "testing/numeric.h"

namespace spillway {
namespace {

namespace fs = std::filesystem;
using testing::FileSizeLimit;
using nlohmann::json;

class WeightDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::path(::testing::TempDir()) / "weight_directory_test_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
    dir_ = (fs::path(root_) / "ckpt").string();
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string in_dir(const std::string& name) const { return (fs::path(dir_) / name).string(); }
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  std::string root_, dir_;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

template <typename F>
void expect_error(F&& f, const std::string& thing, const std::vector<std::string>& words) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one with " << ::testing::PrintToString(words);
  } catch (const Error& e) {
    EXPECT_EQ(e.thing(), thing);
    const std::string what = e.what();
    for (const std::string& w : words) EXPECT_NE(what.find(w), std::string::npos) << "no '" << w << "' in: " << what;
  }
}

// A small LLaMA-like set of weights: f32 norms and embeddings, bf16
// projections, odd shapes and a scalar.
struct Weight {
  DType dtype;
  Shape shape;
  std::vector<float> f32;      // the values, as floats
  std::vector<uint16_t> bf16;  // their bf16 bits, for bf16 weights
  const void* data() const { return dtype == DType::bf16 ? static_cast<const void*>(bf16.data()) : f32.data(); }
  uint64_t bytes() const { return static_cast<uint64_t>(shape.numel()) * dtype_size(dtype); }
};

std::map<std::string, Weight> make_weights() {
  const std::vector<std::tuple<std::string, DType, Shape>> specs = {
      {"model.embed_tokens.weight", DType::f32, Shape{11, 8}},
      {"model.layers.0.input_layernorm.weight", DType::f32, Shape{8}},
      {"model.layers.0.self_attn.q_proj.weight", DType::bf16, Shape{8, 8}},
      {"model.layers.0.mlp.up_proj.weight", DType::bf16, Shape{12, 8}},
      {"model.layers.1.odd", DType::f32, Shape{3, 5, 7}},
      {"model.layers.1.scale", DType::f32, Shape{}},
      {"model.layers.1.odd_bf16", DType::bf16, Shape{1, 13}},
      {"model.norm.weight", DType::f32, Shape{8}},
      {"lm_head.weight", DType::bf16, Shape{11, 8}},
  };
  std::map<std::string, Weight> weights;
  uint64_t seed = 100;
  for (const auto& [name, dtype, shape] : specs) {
    Weight w{dtype, shape, testing::random_vector<float>(shape.numel(), seed++), {}};
    if (dtype == DType::bf16) {
      for (float& x : w.f32) {
        w.bf16.push_back(to_bf16(x).bits);
        uint32_t bits = static_cast<uint32_t>(w.bf16.back()) << 16;  // what bf16 can hold
        std::memcpy(&x, &bits, 4);
      }
    }
    weights.emplace(name, std::move(w));
  }
  return weights;
}

WeightDirectoryWriter writer_for(const std::map<std::string, Weight>& weights) {
  WeightDirectoryWriter writer;
  for (const auto& [name, w] : weights) writer.add(name, w.dtype, w.shape, w.data());
  return writer;
}

void expect_same_weights(const WeightDirectory& dir, const std::map<std::string, Weight>& weights) {
  std::vector<std::string> names;
  for (const auto& [name, w] : weights) names.push_back(name);
  EXPECT_EQ(dir.names(), names);
  for (const auto& [name, w] : weights) {
    SCOPED_TRACE(name);
    const WeightEntry& e = dir.at(name);
    EXPECT_EQ(e.tensor->dtype, w.dtype);
    EXPECT_EQ(e.tensor->shape, w.shape);
    ASSERT_EQ(e.tensor->bytes.size(), w.bytes());
    EXPECT_EQ(std::memcmp(e.tensor->bytes.data(), w.data(), w.bytes()), 0);
    std::vector<float> out(w.f32.size());
    dir.read_tensor_as_f32(name, w.shape, out);
    EXPECT_EQ(out, w.f32);
  }
}

uint64_t total_bytes(const std::map<std::string, Weight>& weights) {
  uint64_t total = 0;
  for (const auto& [name, w] : weights) total += w.bytes();
  return total;
}

TEST_F(WeightDirectoryTest, SingleFileRoundTrip) {
  const auto weights = make_weights();
  EXPECT_EQ(writer_for(weights).write(dir_), std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(listing(), std::vector<std::string>{"model.safetensors"});
  WeightDirectory dir(dir_);
  EXPECT_FALSE(dir.sharded());
  EXPECT_EQ(dir.files().size(), 1u);
  EXPECT_EQ(dir.files()[0]->metadata().at("format"), "pt");
  EXPECT_FALSE(dir.index_total_size().has_value());
  expect_same_weights(dir, weights);
  EXPECT_EQ(dir.find("absent"), nullptr);
  expect_error([&] { dir.at("absent"); }, dir_, {"no tensor 'absent'"});
  std::vector<float> out(8);
  expect_error([&] { dir.read_tensor_as_f32("model.norm.weight", Shape{2, 4}, out); }, in_dir("model.safetensors"),
               {"model.norm.weight", "[8]", "expected [2, 4]"});
}

TEST_F(WeightDirectoryTest, ShardedRoundTripWithSmallLimit) {
  const auto weights = make_weights();
  const uint64_t limit = 400;
  const std::vector<std::string> written = writer_for(weights).write(dir_, limit);
  ASSERT_GE(written.size(), 4u);  // three shards or more, then the index
  const int count = static_cast<int>(written.size()) - 1;
  EXPECT_EQ(written.back(), "model.safetensors.index.json");
  for (int i = 0; i < count; ++i) {
    char want[64];
    std::snprintf(want, sizeof(want), "model-%05d-of-%05d.safetensors", i + 1, count);
    EXPECT_EQ(written[static_cast<size_t>(i)], want);
  }
  std::vector<std::string> sorted_written = written;
  std::sort(sorted_written.begin(), sorted_written.end());
  EXPECT_EQ(listing(), sorted_written);

  // The index, read as plain JSON: every tensor mapped to an existing shard,
  // total_size the sum of the tensor bytes, each shard under the limit
  // unless a single tensor alone is larger, and no shard that could have
  // taken the next tensor without passing the limit.
  json index = json::parse(read_text(in_dir("model.safetensors.index.json")));
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total_bytes(weights));
  std::map<std::string, uint64_t> shard_bytes;
  std::map<std::string, int> shard_tensors;
  ASSERT_EQ(index["weight_map"].size(), weights.size());
  for (const auto& [name, w] : weights) {
    const std::string shard = index["weight_map"].at(name);
    EXPECT_TRUE(fs::exists(in_dir(shard))) << shard;
    shard_bytes[shard] += w.bytes();
    shard_tensors[shard] += 1;
  }
  EXPECT_EQ(static_cast<int>(shard_bytes.size()), count);
  for (const auto& [shard, bytes] : shard_bytes) {
    EXPECT_TRUE(bytes <= limit || shard_tensors[shard] == 1) << shard << " holds " << bytes;
  }

  WeightDirectory dir(dir_);
  EXPECT_TRUE(dir.sharded());
  EXPECT_EQ(static_cast<int>(dir.files().size()), count);
  EXPECT_EQ(dir.index_total_size(), total_bytes(weights));
  for (const auto& f : dir.files()) EXPECT_EQ(f->metadata().at("format"), "pt");
  for (const auto& [name, w] : weights) {
    EXPECT_EQ(fs::path(dir.at(name).file->path()).filename(), index["weight_map"].at(name).get<std::string>());
  }
  expect_same_weights(dir, weights);
}

TEST_F(WeightDirectoryTest, RewritingRemovesFilesOfTheEarlierLayout) {
  const auto weights = make_weights();
  const auto writer = writer_for(weights);
  const auto many = writer.write(dir_, 200);
  EXPECT_EQ(listing().size(), many.size());

  EXPECT_EQ(writer.write(dir_), std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(listing(), std::vector<std::string>{"model.safetensors"});

  auto fewer = writer.write(dir_, 1000);
  ASSERT_LT(fewer.size(), many.size());
  ASSERT_GE(fewer.size(), 3u);
  writer.write(dir_, 200);
  fewer = writer.write(dir_, 1000);  // a shorter series over a longer one
  std::sort(fewer.begin(), fewer.end());
  EXPECT_EQ(listing(), fewer);
  expect_same_weights(WeightDirectory(dir_), weights);
}

TEST_F(WeightDirectoryTest, ReadsAHandWrittenIndex) {
  fs::create_directory(dir_);
  std::vector<float> a = testing::random_vector<float>(6, 1), b = testing::random_vector<float>(5, 2);
  SafetensorsWriter first, second;
  first.add("a", DType::f32, Shape{2, 3}, a.data());
  first.add("unlisted", DType::f32, Shape{2, 3}, a.data());
  second.add("b", DType::f32, Shape{5}, b.data());
  first.write(in_dir("part-a.safetensors"));
  second.write(in_dir("part-b.safetensors"));
  write_text(in_dir("model.safetensors.index.json"),
             R"({"metadata": {"format": "pt"},
                 "weight_map": {"b": "part-b.safetensors", "a": "part-a.safetensors"}})");
  WeightDirectory dir(dir_);
  EXPECT_TRUE(dir.sharded());
  EXPECT_FALSE(dir.index_total_size().has_value());
  EXPECT_EQ(dir.names(), (std::vector<std::string>{"a", "b"}));  // the index is the truth
  std::vector<float> out(5);
  dir.read_tensor_as_f32("b", Shape{5}, out);
  EXPECT_EQ(out, b);

  // With both layouts present, model.safetensors wins, as in transformers.
  SafetensorsWriter single;
  single.add("only", DType::f32, Shape{5}, b.data());
  single.write(in_dir("model.safetensors"));
  WeightDirectory both(dir_);
  EXPECT_FALSE(both.sharded());
  EXPECT_EQ(both.names(), std::vector<std::string>{"only"});
}

TEST_F(WeightDirectoryTest, MissingShardNamesTheShardAndTheIndex) {
  writer_for(make_weights()).write(dir_, 400);
  const std::string index = in_dir("model.safetensors.index.json");
  const std::string shard = json::parse(read_text(index))["weight_map"]["model.norm.weight"];
  fs::remove(in_dir(shard));
  expect_error([&] { WeightDirectory d(dir_); }, index, {shard, "missing"});
}

TEST_F(WeightDirectoryTest, TensorAbsentFromItsShardNamesBoth) {
  writer_for(make_weights()).write(dir_, 400);
  const std::string index = in_dir("model.safetensors.index.json");
  json doc = json::parse(read_text(index));
  const std::string shard = doc["weight_map"]["lm_head.weight"];
  doc["weight_map"]["ghost.weight"] = shard;
  write_text(index, doc.dump());
  expect_error([&] { WeightDirectory d(dir_); }, index, {"ghost.weight", shard, "does not hold"});
}

TEST_F(WeightDirectoryTest, BrokenDirectoriesAndIndexes) {
  expect_error([&] { WeightDirectory d(dir_); }, dir_, {"no such directory"});
  fs::create_directory(dir_);
  expect_error([&] { WeightDirectory d(dir_); }, dir_, {"holds neither", "model.safetensors.index.json"});
  write_text(in_dir("plain"), "x");
  expect_error([&] { WeightDirectory d(in_dir("plain")); }, in_dir("plain"), {"not a directory"});

  const std::string index = in_dir("model.safetensors.index.json");
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {R"({"weight_map": {"a": )", {"not valid JSON"}},
      {R"([1, 2])", {"not a JSON object"}},
      {R"({"metadata": {}})", {"weight_map"}},
      {R"({"weight_map": {"a": 3}})", {"tensor 'a'", "not a file name"}},
      {R"({"weight_map": {"a": "../elsewhere.safetensors"}})", {"../elsewhere.safetensors", "tensor 'a'", "inside"}},
      {R"({"weight_map": {"a": "/etc/passwd"}})", {"/etc/passwd", "inside"}},
  };
  for (const auto& [text, words] : cases) {
    SCOPED_TRACE(text);
    write_text(index, text);
    expect_error([&] { WeightDirectory d(dir_); }, index, words);
  }

  // A corrupt shard: the error comes from the shard itself, named by its path.
  writer_for(make_weights()).write(dir_, 400);
  const std::string shard =
      in_dir(json::parse(read_text(index))["weight_map"]["model.embed_tokens.weight"].get<std::string>());
  fs::resize_file(shard, fs::file_size(shard) - 3);
  expect_error([&] { WeightDirectory d(dir_); }, shard, {"truncated"});
}

TEST_F(WeightDirectoryTest, FailedShardRemovesTheShardsAlreadyWritten) {
  std::vector<float> small = testing::random_vector<float>(100, 7), large = testing::random_vector<float>(1000, 8);
  WeightDirectoryWriter writer;
  writer.add("a.small", DType::f32, Shape{100}, small.data());
  writer.add("b.large", DType::f32, Shape{10, 100}, large.data());
  {
    // The first shard (~500 bytes) fits under the limit, the second (~4 KB) does not.
    FileSizeLimit limit(2048);
    expect_error([&] { writer.write(dir_, 1000); }, in_dir("model-00002-of-00002.safetensors"), {"cannot write"});
  }
  EXPECT_TRUE(listing().empty()) << ::testing::PrintToString(listing());

  EXPECT_EQ(writer.write(dir_, 1000).size(), 3u);
  std::vector<float> out(1000);
  WeightDirectory(dir_).read_tensor_as_f32("b.large", Shape{10, 100}, out);
  EXPECT_EQ(out, large);
}

TEST_F(WeightDirectoryTest, WriterRefusesBadInput) {
  float x[4] = {1, 2, 3, 4};
  WeightDirectoryWriter writer;
  writer.add("x", DType::f32, Shape{4}, x);
  expect_error([&] { writer.add("x", DType::bf16, Shape{2}, x); }, "x", {"twice"});
  expect_error([&] { writer.add("y", DType::f32, Shape{-1}, x); }, "y", {"negative"});
  expect_error([&] { writer.write(dir_, 0); }, dir_, {"limit"});
  EXPECT_FALSE(fs::exists(dir_));
}

}  // namespace
}  // namespace spillway
