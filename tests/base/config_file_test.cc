#include "base/config_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "base/status.h"

namespace spillway {
namespace {

namespace fs = std::filesystem;

class SettingsFile : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  // The one-line message of reading `text` as `name`.
  std::string error_of(const std::string& name, const std::string& text) {
    const std::string path = write(name, text);
    try {
      read_settings_file(path);
    } catch (const Error& e) {
      return std::string(e.what()).substr(dir_.string().size() + 1);
    }
    return "no error";
  }
  void SetUp() override { fs::create_directories(dir_); }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_ = fs::path(::testing::TempDir()) / ("settings_file_" + std::to_string(::getpid()));
};

TEST_F(SettingsFile, TomlAndJsonGiveTheSameTree) {
  const nlohmann::json from_toml = read_settings_file(write("run.toml", R"(
# a comment
[schedule]
steps = 100
seed = 7
[optimizer]
lr = 3e-4
[data]
paths = ["a.txt", "b.txt"]
separator = "%"
[memory]
bf16_moments = true
device_mem = "24GiB"
)"));
  const nlohmann::json from_json = read_settings_file(write("run.json", R"({
  "schedule": {"steps": 100, "seed": 7},
  "optimizer": {"lr": 3e-4},
  "data": {"paths": ["a.txt", "b.txt"], "separator": "%"},
  "memory": {"bf16_moments": true, "device_mem": "24GiB"}
})"));
  EXPECT_EQ(from_toml, from_json);
  EXPECT_TRUE(from_toml["schedule"]["steps"].is_number_integer());
  EXPECT_TRUE(from_toml["optimizer"]["lr"].is_number_float());
}

TEST_F(SettingsFile, DottedTomlKeysAreTables) {
  EXPECT_EQ(read_settings_file(write("run.toml", "memory.offload = \"on\"\n")),
            nlohmann::json::parse(R"({"memory": {"offload": "on"}})"));
}

TEST_F(SettingsFile, SyntaxErrorsSayWhereInPlainWords) {
  EXPECT_EQ(error_of("a.toml", "[schedule]\nsteps = = 3\n"),
            "a.toml:2:9: Error while parsing value: could not determine value type");
  EXPECT_EQ(error_of("b.toml", "[schedule]\nsteps = 1\nsteps = 2\n"),
            "b.toml:3:9: Error while parsing key-value pair: cannot redefine existing integer 'steps'");
  EXPECT_EQ(error_of("c.json", "{\"memory\": {\"offload\": \"on\",}}"),
            "c.json:1:29: unexpected '}'; expected string literal (reading object key)");
  EXPECT_EQ(error_of("d.json", "{\"memory\":\n {\"offload\": tru}}"),
            "d.json:2:17: invalid literal; last read: '\"offload\": tru}' (reading value)");
}

TEST_F(SettingsFile, DatesExtensionsAndMissingFilesAreNamed) {
  EXPECT_EQ(error_of("e.toml", "[run]\nwhen = 1979-05-27\n"), "e.toml:2:8: run.when is a date or time, which no setting is");
  EXPECT_EQ(error_of("f.yaml", "a: 1\n"), "f.yaml: a settings file is .toml or .json");
  try {
    read_settings_file((dir_ / "absent.toml").string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.problem(), "cannot read it (no such file?)");
  }
}

TEST_F(SettingsFile, WrittenTomlReadsBackInOrder) {
  nlohmann::ordered_json tree;
  tree["schedule"]["steps"] = 100;
  tree["schedule"]["batch"] = 4;
  tree["optimizer"]["lr"] = 0.002;
  tree["optimizer"]["eps"] = 1e-8;
  tree["data"]["paths"] = {"a b.txt", "quote\".txt"};
  tree["memory"]["bf16_moments"] = false;
  const std::string text = settings_toml(tree, "first line\nsecond line");
  EXPECT_EQ(text.rfind("# first line\n# second line\n\n[schedule]\nsteps = 100\nbatch = 4\n", 0), 0u) << text;
  EXPECT_EQ(read_settings_file(write("back.toml", text)), nlohmann::json(tree));
}

}  // namespace
}  // namespace spillway
