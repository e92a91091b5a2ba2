// GGUF writing: what GgufWriter writes, GgufFile reads back: metadata of
// every type, and tensors stored exactly (F32) or rounded as each type rounds
// (F16, BF16 to nearest; Q8_0 within half a step of its block's scale).
#include "model/gguf_write.h"

#include <gtest/gtest.h>
#include <cmath>
#include <random>

#include "base/dtype.h"
#include "base/status.h"
#include "testing/files.h"

namespace spillway {
namespace {

class GgufWriter : public testing::TempDirTest {};

TEST_F(GgufWriter, WritesWhatGgufFileReads) {
  std::mt19937 rng(4);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  std::vector<float> values(64 * 3);
  for (float& v : values) v = normal(rng);

  spillway::GgufWriter w;
  w.add_string("general.name", "t\xC3\xA9st");
  w.add_u32("u", 7);
  w.add_i32("i", -3);
  w.add_f32("f", 0.5f);
  w.add_bool("b", true);
  w.add_strings("s", {"a", "b c", ""});
  w.add_i32s("is", {1, -2});
  w.add_f32s("fs", {1.5f});
  for (GgmlType type : {GgmlType::f32, GgmlType::f16, GgmlType::bf16, GgmlType::q8_0}) {
    w.add_tensor("t" + std::to_string(static_cast<int>(type)), Shape{3, 64}, type, values);
  }
  EXPECT_THROW(w.add_tensor("odd", Shape{2, 5}, GgmlType::q8_0, std::vector<float>(10)), Error);
  const std::string path = file("w.gguf");
  w.write(path);

  const GgufFile f(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_string("general.name"), "t\xC3\xA9st");
  EXPECT_EQ(f.get_int("u"), 7);
  EXPECT_EQ(f.get_int("i"), -3);
  EXPECT_EQ(f.get_float("f"), 0.5);
  EXPECT_TRUE(f.get_bool("b"));
  EXPECT_EQ(f.get_string_array("s"), (std::vector<std::string>{"a", "b c", ""}));
  EXPECT_EQ(f.get_int_array("is"), (std::vector<int64_t>{1, -2}));
  EXPECT_EQ(f.get_float_array("fs"), (std::vector<double>{1.5}));
  ASSERT_EQ(f.tensors().size(), 4u);
  for (const GgufTensorInfo& t : f.tensors()) {
    EXPECT_EQ(t.shape(), (Shape{3, 64})) << t.name;
    EXPECT_EQ(t.offset % kGgufDefaultAlignment, 0u);
    const std::vector<float> back = f.read_f32(t);
    for (size_t i = 0; i < values.size(); ++i) {
      switch (t.type) {
        case GgmlType::f32: EXPECT_EQ(back[i], values[i]); break;
        case GgmlType::f16: EXPECT_EQ(back[i], to_float(to_f16(values[i]))); break;
        case GgmlType::bf16: EXPECT_EQ(back[i], to_float(to_bf16(values[i]))); break;
        default: {
          float amax = 0;
          for (size_t k = i / 32 * 32; k < i / 32 * 32 + 32; ++k) amax = std::max(amax, std::fabs(values[k]));
          EXPECT_LE(std::fabs(back[i] - values[i]), amax / 127.0f * 0.51f + 1e-3f) << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace spillway
