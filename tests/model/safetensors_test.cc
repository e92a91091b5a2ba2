// safetensors: round trips of every dtype through the writer and the reader,
// the writer's bytes checked against the format by a parser written here,
// the reader checked on files built here by hand, conversions to f32 against
// independent references, every kind of corrupt file, and writes that fail
// leaving nothing behind.
#include "model/safetensors.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "base/status.h"
#include "testing/files.h"
#include "testing/numeric.h"

namespace spillway {
namespace {

namespace fs = std::filesystem;
using testing::FileSizeLimit;
using testing::read_bytes;

class SafetensorsTest : public testing::TempDirTest {};

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A safetensors file built byte by byte: the length (the header's own unless
// given), the header text, the data.
std::string raw_file(const std::string& header, const std::string& data, std::optional<uint64_t> length = {}) {
  uint64_t n = length.value_or(header.size());
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &n, 8);
  return bytes + header + data;
}

template <typename T>
std::string as_bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// Runs `f`, which must throw Error about `thing` whose message holds every word.
template <typename F>
void expect_error(F&& f, const std::string& thing, const std::vector<std::string>& words) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one with " << ::testing::PrintToString(words);
  } catch (const Error& e) {
    EXPECT_EQ(e.thing(), thing);
    const std::string what = e.what();
    EXPECT_NE(what.find(thing), std::string::npos) << what;
    for (const std::string& w : words) EXPECT_NE(what.find(w), std::string::npos) << "no '" << w << "' in: " << what;
  }
}

// Random contents for a tensor of `dtype`: floats are random values stored in
// that dtype; the integer types are random bit patterns.
std::string random_tensor_bytes(DType dtype, int64_t numel, uint64_t seed) {
  auto values = testing::random_vector(numel, seed, -3.0, 3.0);
  std::mt19937_64 rng(seed);
  std::string bytes;
  auto put = [&](const auto& v) { bytes.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  for (int64_t i = 0; i < numel; ++i) {
    double x = values[static_cast<size_t>(i)];
    switch (dtype) {
      case DType::f32: put(static_cast<float>(x)); break;
      case DType::f64: put(x); break;
      case DType::bf16: put(to_bf16(static_cast<float>(x)).bits); break;
      case DType::f16: put(to_f16(static_cast<float>(x)).bits); break;
      case DType::i32: put(static_cast<int32_t>(rng())); break;
      case DType::u16: put(static_cast<uint16_t>(rng())); break;
      case DType::u32: put(static_cast<uint32_t>(rng())); break;
    }
  }
  return bytes;
}

const DType kAllDTypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::u16, DType::u32};
const std::vector<Shape> kShapes = {Shape{}, Shape{1}, Shape{7}, Shape{3, 5}, Shape{2, 3, 5}, Shape{0, 4}, Shape{1, 1, 1, 3}};

TEST_F(SafetensorsTest, EveryDtypeAndShapeRoundTripsBitExact) {
  std::map<std::string, std::tuple<DType, Shape, std::string>> want;
  SafetensorsWriter writer;
  uint64_t seed = 1;
  for (DType dtype : kAllDTypes) {
    for (size_t s = 0; s < kShapes.size(); ++s) {
      // Names interleave dtypes so that name order and data order differ.
      std::string name = "t";
      name += std::to_string(s);
      name += '.';
      name += dtype_name(dtype);
      auto& [d, shape, bytes] = want[name];
      d = dtype;
      shape = kShapes[s];
      bytes = random_tensor_bytes(dtype, shape.numel(), seed++);
      writer.add(name, dtype, shape, bytes.data());
    }
  }
  writer.add_metadata("format", "pt");
  writer.add_metadata("note", "ünïcode ok");
  const std::string path = file("all.safetensors");
  writer.write(path);

  SafetensorsFile f(path);
  ASSERT_EQ(f.tensors().size(), want.size());
  auto it = want.begin();
  for (const SafetensorsTensor& t : f.tensors()) {
    SCOPED_TRACE(t.name);
    const auto& [dtype, shape, bytes] = it->second;
    EXPECT_EQ(t.name, it->first);  // sorted by name
    EXPECT_EQ(t.dtype, dtype);
    EXPECT_EQ(t.shape, shape);
    ASSERT_EQ(t.bytes.size(), bytes.size());
    EXPECT_EQ(std::memcmp(t.bytes.data(), bytes.data(), bytes.size()), 0);
    // The writer orders data widest element first, so each tensor sits at a
    // multiple of its element size (the mapping itself is page-aligned).
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.bytes.data()) % dtype_size(dtype), 0u);
    EXPECT_EQ(f.find(t.name), &t);
    ++it;
  }
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"note", "ünïcode ok"}}));
  EXPECT_EQ(f.find("absent"), nullptr);
  expect_error([&] { f.tensor("absent"); }, path, {"absent"});
  EXPECT_EQ(listing(), std::vector<std::string>{"all.safetensors"});
}

// The writer's output read by a parser of the format written here, not by
// SafetensorsFile: length, padding, alignment, offsets that tile the data.
TEST_F(SafetensorsTest, WrittenFileFollowsTheFormat) {
  std::vector<float> a = testing::random_vector<float>(5, 11);
  std::string b = random_tensor_bytes(DType::bf16, 3, 12);
  std::vector<double> c = testing::random_vector(2, 13);
  SafetensorsWriter writer;
  writer.add("b", DType::bf16, Shape{3}, b.data());
  writer.add("a", DType::f32, Shape{5}, a.data());
  writer.add("c", DType::f64, Shape{1, 2}, c.data());
  writer.add_metadata("format", "pt");
  const std::string path = file("layout.safetensors");
  writer.write(path);

  const std::string bytes = read_bytes(path);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.front(), '{');
  EXPECT_EQ(header.find_first_not_of(' ', header.rfind('}') + 1), std::string::npos);
  EXPECT_EQ(header, writer.header_json());
  // "__metadata__" first, then names sorted, as Hugging Face writes them.
  EXPECT_LT(header.find("__metadata__"), header.find("\"a\""));
  EXPECT_LT(header.find("\"a\""), header.find("\"b\""));
  EXPECT_LT(header.find("\"b\""), header.find("\"c\""));

  auto json = nlohmann::json::parse(header);
  EXPECT_EQ(json["__metadata__"]["format"], "pt");
  const std::string data = bytes.substr(8 + n);
  EXPECT_EQ(data.size(), writer.data_bytes());
  std::map<std::string, std::tuple<std::string, std::vector<int64_t>, std::string>> expected = {
      {"a", {"F32", {5}, as_bytes(a)}}, {"b", {"BF16", {3}, b}}, {"c", {"F64", {1, 2}, as_bytes(c)}}};
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const auto& [name, want] : expected) {
    const auto& entry = json.at(name);
    EXPECT_EQ(entry.at("dtype"), std::get<0>(want));
    EXPECT_EQ(entry.at("shape").get<std::vector<int64_t>>(), std::get<1>(want));
    uint64_t begin = entry.at("data_offsets")[0], end = entry.at("data_offsets")[1];
    EXPECT_EQ(data.substr(begin, end - begin), std::get<2>(want)) << name;
    spans.emplace_back(begin, end);
  }
  std::sort(spans.begin(), spans.end());
  uint64_t covered = 0;
  for (auto [begin, end] : spans) {
    EXPECT_EQ(begin, covered);
    covered = end;
  }
  EXPECT_EQ(covered, data.size());
}

// A file laid out as no writer here would: names out of order, an f32 at an
// odd offset after one bf16, no padding. The reader must take it as it is.
TEST_F(SafetensorsTest, ReadsAHandBuiltFileWithUnalignedTensors) {
  std::vector<float> w = {1.5f, -2.25f, 3.0f};
  uint16_t h = 0x3f80;  // bf16 1.0
  const std::string header =
      R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[2,14]},"h":{"shape":[],"dtype":"BF16","data_offsets":[0,2]}})";
  std::string data(reinterpret_cast<const char*>(&h), 2);
  data += as_bytes(w);
  const std::string path = file("hand.safetensors");
  write_bytes(path, raw_file(header, data));

  SafetensorsFile f(path);
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensors()[0].name, "h");
  EXPECT_EQ(f.tensors()[0].shape, Shape{});
  EXPECT_TRUE(f.metadata().empty());
  std::vector<float> out(3);
  f.read_tensor_as_f32("w", Shape{3}, out);
  EXPECT_EQ(out, w);
  float scalar = 0;
  f.read_tensor_as_f32("h", Shape{}, std::span<float>(&scalar, 1));
  EXPECT_EQ(scalar, 1.0f);
}

TEST_F(SafetensorsTest, FloatTypesConvertToF32) {
  const std::vector<int64_t> sizes = {1, 7, 33, 300001};  // the last crosses the parallel threshold
  for (int64_t n : sizes) {
    SCOPED_TRACE(n);
    auto x = testing::random_vector(n, static_cast<uint64_t>(n) + 5, -100.0, 100.0);
    std::vector<double> f64 = x;
    std::vector<float> f32(x.begin(), x.end());
    std::vector<uint16_t> bf16_bits(static_cast<size_t>(n)), f16_bits(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      bf16_bits[static_cast<size_t>(i)] = to_bf16(static_cast<float>(x[static_cast<size_t>(i)])).bits;
      f16_bits[static_cast<size_t>(i)] = to_f16(static_cast<float>(x[static_cast<size_t>(i)])).bits;
    }
    SafetensorsWriter writer;
    Shape shape{n};
    writer.add("f64", DType::f64, shape, f64.data());
    writer.add("f32", DType::f32, shape, f32.data());
    writer.add("bf16", DType::bf16, shape, bf16_bits.data());
    writer.add("f16", DType::f16, shape, f16_bits.data());
    const std::string path = file("convert.safetensors");
    writer.write(path);
    SafetensorsFile f(path);
    std::vector<float> out(static_cast<size_t>(n));

    f.read_tensor_as_f32("f32", shape, out);
    EXPECT_EQ(out, f32);
    f.read_tensor_as_f32("f64", shape, out);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], static_cast<float>(f64[i])) << i;
    // bf16 is the top half of an f32: widening is a shift, computed here
    // without dtype.h.
    f.read_tensor_as_f32("bf16", shape, out);
    for (int64_t i = 0; i < n; ++i) {
      uint32_t bits = static_cast<uint32_t>(bf16_bits[i]) << 16;
      float want;
      std::memcpy(&want, &bits, 4);
      ASSERT_EQ(out[i], want) << i;
      ASSERT_LE(std::abs(out[i] - x[i]), std::abs(x[i]) * 0x1p-8 * 1.001) << i;
    }
    // f16 has an 11-bit significand and |x| < 100 is well inside its range.
    f.read_tensor_as_f32("f16", shape, out);
    EXPECT_LT(testing::rel_error(out, x), 0x1p-11);
    for (int64_t i = 0; i < n; ++i) ASSERT_LE(std::abs(out[i] - x[i]), std::abs(x[i]) * 0x1p-11 * 1.001 + 1e-7) << i;
  }
}

TEST_F(SafetensorsTest, F16DecodesKnownBitPatterns) {
  // (bits, value) pairs from the IEEE 754 binary16 definition.
  const std::vector<std::pair<uint16_t, float>> known = {
      {0x3c00, 1.0f},       {0xc000, -2.0f},        {0x3800, 0.5f},    {0x7bff, 65504.0f},
      {0x0001, 0x1p-24f},   {0x03ff, 1023 * 0x1p-24f}, {0x0400, 0x1p-14f}, {0x8000, -0.0f},
      {0x7c00, INFINITY},   {0x3555, 0.333251953125f},
  };
  std::vector<uint16_t> bits;
  for (auto [b, v] : known) bits.push_back(b);
  SafetensorsWriter writer;
  writer.add("h", DType::f16, Shape{static_cast<int64_t>(bits.size())}, bits.data());
  const std::string path = file("f16.safetensors");
  writer.write(path);
  std::vector<float> out(bits.size());
  SafetensorsFile(path).read_tensor_as_f32("h", out);
  for (size_t i = 0; i < known.size(); ++i) EXPECT_EQ(out[i], known[i].second) << std::hex << known[i].first;
  EXPECT_TRUE(std::signbit(out[7]));
}

TEST_F(SafetensorsTest, ReadAsF32ChecksShapeSizeAndType) {
  std::vector<float> w = testing::random_vector<float>(6, 3);
  std::vector<int32_t> ids = {1, 2, 3};
  SafetensorsWriter writer;
  writer.add("layer.weight", DType::f32, Shape{2, 3}, w.data());
  writer.add("ids", DType::i32, Shape{3}, ids.data());
  const std::string path = file("checks.safetensors");
  writer.write(path);
  SafetensorsFile f(path);
  std::vector<float> out(6);
  expect_error([&] { f.read_tensor_as_f32("layer.weight", Shape{3, 2}, out); }, path,
               {"layer.weight", "[2, 3]", "expected [3, 2]"});
  std::vector<float> small(5);
  expect_error([&] { f.read_tensor_as_f32("layer.weight", small); }, path, {"layer.weight", "6", "5"});
  std::vector<float> three(3);
  expect_error([&] { f.read_tensor_as_f32("ids", Shape{3}, three); }, path, {"ids", "I32", "floating-point"});
  expect_error([&] { f.read_tensor_as_f32("nope", Shape{3}, three); }, path, {"no tensor 'nope'"});
}

TEST_F(SafetensorsTest, EmptyFileAndMoves) {
  SafetensorsWriter empty;
  const std::string path = file("empty.safetensors");
  empty.write(path);
  EXPECT_EQ(read_bytes(path).size() % 8, 0u);
  EXPECT_TRUE(SafetensorsFile(path).tensors().empty());

  std::vector<float> w = testing::random_vector<float>(4, 9);
  SafetensorsWriter writer;
  writer.add("w", DType::f32, Shape{4}, w.data());
  const std::string path2 = file("w.safetensors");
  writer.write(path2);
  SafetensorsFile a(path2);
  SafetensorsFile b(std::move(a));
  SafetensorsFile c(path);
  c = std::move(b);
  std::vector<float> out(4);
  c.read_tensor_as_f32("w", Shape{4}, out);
  EXPECT_EQ(out, w);
}

// One valid file, then each way to break it; every break must be refused
// with the file, the tensor where there is one, and the word for the problem.
TEST_F(SafetensorsTest, CorruptFilesGiveOneClearError) {
  const std::string data(20, '\x01');
  const std::string a = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string b = R"("b":{"dtype":"F32","shape":[3],"data_offsets":[8,20]})";
  const std::string good = "{" + a + "," + b + "}";
  {
    const std::string path = file("good.safetensors");
    write_bytes(path, raw_file(good, data));
    EXPECT_EQ(SafetensorsFile(path).tensors().size(), 2u);
  }
  struct Case {
    std::string name;
    std::string bytes;
    std::vector<std::string> words;
  };
  auto with_b = [&](const std::string& entry) { return "{" + a + "," + entry + "}"; };
  const std::vector<Case> cases = {
      {"short", std::string(5, '\0'), {"5 bytes", "shorter"}},
      {"empty", "", {"0 bytes", "shorter"}},
      {"past_end", raw_file(good, data, 4000), {"header length 4000", "past the end", "truncated"}},
      {"absurd", raw_file(good, data, uint64_t{1} << 50), {"absurdly large"}},
      {"not_json", raw_file("{\"a\": oops}", ""), {"not valid JSON"}},
      {"cut_json", raw_file(good.substr(0, 30), ""), {"not valid JSON"}},
      {"bad_utf8", raw_file("{\"\xff\xfe\":{}}", ""), {"not valid JSON"}},
      {"not_object", raw_file("[1, 2]  ", ""), {"not a JSON object"}},
      {"entry_not_object", raw_file(R"({"a":[1,2]})", ""), {"tensor 'a'", "not a JSON object"}},
      {"no_dtype", raw_file(with_b(R"("b":{"shape":[3],"data_offsets":[8,20]})"), data),
       {"tensor 'b'", "missing", "dtype"}},
      {"no_shape", raw_file(with_b(R"("b":{"dtype":"F32","data_offsets":[8,20]})"), data),
       {"tensor 'b'", "missing", "shape"}},
      {"no_offsets", raw_file(with_b(R"("b":{"dtype":"F32","shape":[3]})"), data),
       {"tensor 'b'", "missing", "data_offsets"}},
      {"dtype_i64", raw_file(with_b(R"("b":{"dtype":"I64","shape":[3],"data_offsets":[8,32]})"), data + std::string(12, '\0')),
       {"tensor 'b'", "I64", "not support"}},
      {"dtype_not_string", raw_file(with_b(R"("b":{"dtype":4,"shape":[3],"data_offsets":[8,20]})"), data),
       {"tensor 'b'", "dtype", "not a string"}},
      {"negative_dim", raw_file(with_b(R"("b":{"dtype":"F32","shape":[-3],"data_offsets":[8,20]})"), data),
       {"tensor 'b'", "negative dimension -3"}},
      {"float_dim", raw_file(with_b(R"("b":{"dtype":"F32","shape":[3.0],"data_offsets":[8,20]})"), data),
       {"tensor 'b'", "non-integer"}},
      {"huge_shape",
       raw_file(with_b(R"("b":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[8,20]})"), data),
       {"tensor 'b'", "too large"}},
      {"negative_offset", raw_file(with_b(R"("b":{"dtype":"F32","shape":[3],"data_offsets":[-4,8]})"), data),
       {"tensor 'b'", "non-negative"}},
      {"three_offsets", raw_file(with_b(R"("b":{"dtype":"F32","shape":[3],"data_offsets":[8,20,20]})"), data),
       {"tensor 'b'", "data_offsets"}},
      {"out_of_order", raw_file(with_b(R"("b":{"dtype":"F32","shape":[3],"data_offsets":[20,8]})"), data),
       {"tensor 'b'", "[20, 8]", "out of order"}},
      {"size_mismatch", raw_file(with_b(R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,20]})"), data),
       {"tensor 'b'", "12 bytes", "needs 16", "mismatch"}},
      {"bf16_size_mismatch", raw_file(with_b(R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[8,20]})"), data),
       {"tensor 'b'", "needs 6", "mismatch"}},
      {"overlap", raw_file(with_b(R"("b":{"dtype":"F32","shape":[3],"data_offsets":[4,16]})"), data.substr(0, 16)),
       {"tensor 'b'", "overlap", "tensor 'a'"}},
      {"hole", raw_file(with_b(R"("b":{"dtype":"F32","shape":[3],"data_offsets":[12,24]})"), data + "1234"),
       {"hole of 4 bytes", "before tensor 'b'"}},
      {"trailing_hole", raw_file(good, data + "xyz"), {"hole of 3 bytes", "end", "tensor 'b'"}},
      {"truncated", raw_file(good, data.substr(0, 17)), {"truncated", "tensor 'b'", "ends at data byte 20", "17"}},
      {"metadata_not_string", raw_file(R"({"__metadata__":{"format":1}})", ""), {"__metadata__", "format", "not a string"}},
      {"metadata_not_object", raw_file(R"({"__metadata__":"pt"})", ""), {"__metadata__", "not a JSON object"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = file(c.name + ".safetensors");
    write_bytes(path, c.bytes);
    expect_error([&] { SafetensorsFile f(path); }, path, c.words);
  }
  expect_error([&] { SafetensorsFile f(file("absent.safetensors")); }, file("absent.safetensors"), {"cannot open"});
  expect_error([&] { SafetensorsFile f(dir_); }, dir_, {"directory"});
}

TEST_F(SafetensorsTest, WriterRefusesBadTensors) {
  float x[4] = {1, 2, 3, 4};
  SafetensorsWriter writer;
  writer.add("x", DType::f32, Shape{4}, x);
  expect_error([&] { writer.add("x", DType::f32, Shape{4}, x); }, "x", {"twice"});
  expect_error([&] { writer.add("y", DType::f32, Shape{2, -2}, x); }, "y", {"negative dimension"});
  expect_error([&] { writer.add("__metadata__", DType::f32, Shape{4}, x); }, "__metadata__", {"reserved"});
  expect_error([&] { writer.add("z", DType::f32, Shape{4}, nullptr); }, "z", {"no data"});
  expect_error([&] { writer.add(std::string("\xff"), DType::f32, Shape{4}, x); }, "safetensors writer", {"UTF-8"});
}

TEST_F(SafetensorsTest, FailedWriteToMissingFolderLeavesNothing) {
  float x[3] = {1, 2, 3};
  SafetensorsWriter writer;
  writer.add("x", DType::f32, Shape{3}, x);
  const std::string path = file("no_such_folder/x.safetensors");
  expect_error([&] { writer.write(path); }, path, {"cannot create", ".tmp."});
  EXPECT_FALSE(fs::exists(file("no_such_folder")));
  EXPECT_TRUE(listing().empty());
}

TEST_F(SafetensorsTest, FailedRenameLeavesNoTemporary) {
  // A non-empty folder at the destination: the temporary is written and
  // synced, then the rename fails.
  fs::create_directory(file("occupied"));
  write_bytes(file("occupied/keep"), "k");
  float x[3] = {1, 2, 3};
  SafetensorsWriter writer;
  writer.add("x", DType::f32, Shape{3}, x);
  expect_error([&] { writer.write(file("occupied")); }, file("occupied"), {"rename"});
  EXPECT_EQ(listing(), std::vector<std::string>{"occupied"});
  EXPECT_EQ(read_bytes(file("occupied/keep")), "k");
}

TEST_F(SafetensorsTest, FailureMidWriteKeepsTheOldFile) {
  const std::string path = file("model.safetensors");
  std::vector<float> old_values = testing::random_vector<float>(16, 21);
  SafetensorsWriter old_writer;
  old_writer.add("w", DType::f32, Shape{16}, old_values.data());
  old_writer.write(path);
  const std::string old_bytes = read_bytes(path);

  std::vector<float> big = testing::random_vector<float>(1 << 15, 22);  // 128 KiB
  SafetensorsWriter writer;
  writer.add("w", DType::f32, Shape{1 << 15}, big.data());
  {
    FileSizeLimit limit(64 << 10);
    expect_error([&] { writer.write(path); }, path, {"cannot write"});
  }
  EXPECT_EQ(listing(), std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(read_bytes(path), old_bytes);

  // A callback that fails partway: its own exception comes through.
  EXPECT_THROW(write_file_atomically(path,
                                     [](FileSink& sink) {
                                       sink.write("partial", 7);
                                       throw std::runtime_error("injected");
                                     }),
               std::runtime_error);
  EXPECT_EQ(listing(), std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(read_bytes(path), old_bytes);

  // And the same write, unhindered, replaces the file whole.
  writer.write(path);
  std::vector<float> out(big.size());
  SafetensorsFile(path).read_tensor_as_f32("w", Shape{1 << 15}, out);
  EXPECT_EQ(out, big);
  EXPECT_EQ(listing(), std::vector<std::string>{"model.safetensors"});
}

// Hostile inputs that earlier versions accepted or crashed on, each with the
// exact line a user sees.
TEST_F(SafetensorsTest, StrictFormatErrorsAreExactLines) {
  const std::string data(20, '\x01');
  const std::string a = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  struct Case {
    std::string name;
    std::string bytes;
    std::string problem;  // after "<path>: "
  };
  const std::vector<Case> cases = {
      {"extra_field",
       raw_file("{" + a + R"(,"b":{"dtype":"F32","shape":[3],"data_offsets":[8,20],"offset":4}})", data),
       "tensor 'b' has an unknown field \"offset\" (a tensor has only \"dtype\", \"shape\" and "
       "\"data_offsets\")"},
      {"same_offsets", raw_file("{" + a + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data.substr(0, 8)),
       "tensor 'b' bytes [0, 8) overlap tensor 'a' bytes [0, 8)"},
      {"overflowing_shape",
       raw_file(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})", ""),
       "tensor 'a' has a shape [4611686018427387904, 4] too large to address"},
      {"unknown_dtype", raw_file(R"({"a":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", "xy"),
       "tensor 'a' has dtype F8_E4M3, which spillway does not support (supported: F32, F16, BF16, F64, I32, U16, "
       "U32)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = file(c.name + ".safetensors");
    write_bytes(path, c.bytes);
    try {
      SafetensorsFile f(path);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), path + ": " + c.problem);
    }
  }
}

// A FIFO in place of a model file is refused by its kind at once; opening it
// for reading would wait for a writer forever.
TEST_F(SafetensorsTest, FifoIsRefusedWithoutHanging) {
  const std::string path = file("model.safetensors");
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  try {
    SafetensorsFile f(path);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ": is a FIFO, not a safetensors file");
  }
}

}  // namespace
}  // namespace spillway

namespace spillway {
namespace {

// Tensors made on demand (state read from a device tensor by tensor) give
// the bytes of the same tensors handed over whole, and walk() makes them in
// the order write() does, writing nothing.
TEST_F(SafetensorsTest, TensorsMadeOnDemandWriteTheSameBytesInOneOrder) {
  const std::vector<std::pair<std::string, DType>> tensors = {
      {"b.weight", DType::f32}, {"a.bias", DType::bf16}, {"c.table", DType::f64}, {"a.weight", DType::f32}};
  std::vector<std::string> contents;
  contents.reserve(tensors.size());  // the writer references the bytes
  SafetensorsWriter whole, made;
  std::vector<std::string> filled;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, dtype] = tensors[i];
    contents.push_back(random_tensor_bytes(dtype, 6, 40 + i));
    whole.add(name, dtype, Shape{2, 3}, contents.back().data());
    made.add(name, dtype, Shape{2, 3}, [&, i](std::span<std::byte> out) {
      ASSERT_EQ(out.size(), contents[i].size());
      std::memcpy(out.data(), contents[i].data(), out.size());
      filled.push_back(tensors[i].first);
    });
  }
  const std::string a = file("whole.safetensors"), b = file("made.safetensors");
  whole.write(a);
  made.write(b);
  EXPECT_EQ(read_bytes(a), read_bytes(b));
  // Widest first, then by name: where each tensor sits in the data buffer.
  const std::vector<std::string> order = {"c.table", "a.weight", "b.weight", "a.bias"};
  EXPECT_EQ(filled, order);
  filled.clear();
  made.walk();
  EXPECT_EQ(filled, order);
  EXPECT_EQ(listing(), (std::vector<std::string>{"made.safetensors", "whole.safetensors"}));
}

}  // namespace
}  // namespace spillway
