#include "base/toml_parser.h"

#include <gtest/gtest.h>

#include <string_view>

namespace spillway {
namespace {

// Text base/toml_guard refuses because toml++ 3.3 checks its own
// assumptions there: past the guard, the check throws in every build type
// instead of aborting (debug) or being assumed true (release).
TEST(TomlParser, ItsOwnChecksThrowInEveryBuild) {
  EXPECT_THROW(toml::parse(std::string_view("[\n[schedule]\n")), TomlCheckFailed);
  EXPECT_THROW(toml::parse(std::string_view("x = 1\n[[ =\n")), TomlCheckFailed);
}

TEST(TomlParser, ValidTextStillParses) {
  const toml::table t = toml::parse(std::string_view("[a]\nb = 1\n"));
  EXPECT_EQ(t["a"]["b"].value<int64_t>(), 1);
}

}  // namespace
}  // namespace spillway
