#include "base/bytes.h"

#include <gtest/gtest.h>

#include "base/status.h"

namespace spillway {
namespace {

TEST(Bytes, Parses) {
  EXPECT_EQ(parse_bytes("4096", "x"), 4096u);
  EXPECT_EQ(parse_bytes("24GiB", "x"), 24ull << 30);
  EXPECT_EQ(parse_bytes("1.5 GB", "x"), 1500000000ull);
  EXPECT_EQ(parse_bytes("512mib", "x"), 512ull << 20);
  EXPECT_EQ(parse_bytes("50%", "x", 1000), 500u);
  EXPECT_EQ(parse_bytes("0.25", "x", 1000), 250u);
}

TEST(Bytes, RejectsNonsenseNamingTheSetting) {
  EXPECT_THROW(parse_bytes("lots", "--device-mem"), Error);
  try {
    parse_bytes("3 parsecs", "--device-mem");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--device-mem: unknown unit", 0), 0u) << e.what();
  }
  EXPECT_THROW(parse_bytes("50%", "SPILLWAY_DEVICE_MEM"), Error);  // no whole to take it of
  EXPECT_THROW(parse_bytes("-3GB", "x"), Error);
}

TEST(Bytes, Formats) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(3ull << 29), "1.50 GiB");
}

TEST(Bytes, FormatsExactlyWhatParsesBack) {
  EXPECT_EQ(format_bytes_exact(0), "0");
  EXPECT_EQ(format_bytes_exact(4097), "4097");
  EXPECT_EQ(format_bytes_exact(24ull << 30), "24GiB");
  EXPECT_EQ(format_bytes_exact(3ull << 29), "1536MiB");
  for (uint64_t n : {0ull, 1ull, 4096ull, 4097ull, 3ull << 29, 76ull << 30, (1ull << 40) + 1}) {
    EXPECT_EQ(parse_bytes(format_bytes_exact(n), "x"), n);
  }
}

}  // namespace
}  // namespace spillway
