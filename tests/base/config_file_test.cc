#include "base/config_file.h"

#include <gtest/gtest.h>

#include <string>

#include "testing/settings.h"

namespace spillway {
namespace {

class SettingsFile : public testing::SettingsTest {
 protected:
  // The one-line message of reading `text` as a file named `name`.
  std::string error_of_file(const std::string& name, const std::string& text) {
    return error_of([&] { read_settings_file(write(name, text)); });
  }
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

// Invalid TOML that toml++ 3.3 asserts on (undefined behaviour in a release
// build) is refused first; TOML that only looks like it is not.
TEST_F(SettingsFile, TomlTheParserWouldAssertOnIsRefusedFirst) {
  EXPECT_EQ(error_of_file("a.toml", "[\n[schedule]\n"), "a.toml:1:2: a table header's '[' must be followed by a key name");
  EXPECT_EQ(error_of_file("b.toml", "x = 1\n[[ =\n"), "b.toml:2:4: a table header's '[' must be followed by a key name");
  EXPECT_EQ(error_of_file("c.toml", std::string("[sched\0ule]\n", 12)),
            "c.toml:1:7: control character 0x00 is not allowed in TOML");
  EXPECT_EQ(error_of_file("d.toml", "[schedule]\nsteps = 1\xe4\xb8\xad\n"),
            "d.toml:2:10: a non-ASCII character in a value that is not a string");
  // Where toml++ tests a string's characters for whitespace: the one after
  // a backslash in a multi-line string, and the first one that is not
  // whitespace after a line-ending backslash (U+3000 is whitespace to it).
  const std::string unsafe = " after a backslash in a multi-line string cannot be read safely by this build's TOML "
                             "parser (toml++ 3.3); write the file as JSON";
  EXPECT_EQ(error_of_file("h.toml", "[run]\nout = \"\"\"\\\n  \xc3\xa9t\xc3\xa9\"\"\"\n"),
            "h.toml:3:3: the character U+00E9" + unsafe);
  EXPECT_EQ(error_of_file("i.toml", "out = \"\"\"a\\\n\n \xe3\x80\x80\xe3\x81\x82\"\"\"\n"),
            "i.toml:3:3: the character U+3042" + unsafe);
  EXPECT_EQ(error_of_file("j.toml", "out = \"\"\"\\\xef\xb9\xbf\"\"\"\n"), "j.toml:1:11: the character U+FE7F" + unsafe);
  EXPECT_EQ(error_of_file("g.toml", "[run]\n\xe4\xb8\xad = 1\n"),
            "g.toml:2:1: a non-ASCII character outside a string or comment");
  EXPECT_EQ(error_of_file("f.toml", "x = +44[opt\"\"\"e\xe4\xb8\xad\n"),
            "f.toml:1:16: a non-ASCII character in a value that is not a string");
  EXPECT_EQ(error_of_file("e.toml", "[model]\nconfig = [[1, # c\n }]]\n"),
            "e.toml:3:2: '}' where an array expects a value or ']'");
  // A multi-line string may end in one or two of its quotes just inside the
  // delimiter: the header after it is still seen (fuzzer finding).
  EXPECT_EQ(error_of_file("k.toml", "x = \"\"\"\"\"\"\"\n[\n"),
            "k.toml:2:2: a table header's '[' must be followed by a key name");
  EXPECT_EQ(error_of_file("l.toml", "x = \"ab\n[\n"), "l.toml:2:2: a table header's '[' must be followed by a key name");
  const nlohmann::json fine = read_settings_file(write("fine.toml", R"(# [= a comment, 中
[data]
paths = [
  "a",
  "b", # [
]
nested = [[1, 2], [], {a = [3,], b=true}]
n = -1.5e3
w="中"
separator = """
[=
"""
quoted = """"a"""""
[ "run" ]
out = '[= 中'
)"));
  EXPECT_EQ(fine["data"]["paths"], nlohmann::json({"a", "b"}));
  EXPECT_EQ(fine["data"]["nested"].size(), 3u);
  EXPECT_EQ(fine["data"]["separator"], "[=\n");
  EXPECT_EQ(fine["data"]["quoted"], "\"a\"\"");
  EXPECT_EQ(fine["run"]["out"], "[= \xe4\xb8\xad");
  // The same characters anywhere else in a string, and in comments, are
  // read: toml++ never tests them there.
  const nlohmann::json text = read_settings_file(write("text.toml",
                                                       "# caf\xc3\xa9 \xe3\x81\x82\n"
                                                       "a = \"caf\xc3\xa9\"\nb = 'caf\xc3\xa9'\n"
                                                       "c = \"\"\"\\\n  caf\xc3\xa9\n\xe3\x81\x82\"\"\"\n"
                                                       "d = '''\\\n\xd0\x96'''\n"));
  EXPECT_EQ(text["a"], "caf\xc3\xa9");
  EXPECT_EQ(text["b"], "caf\xc3\xa9");
  EXPECT_EQ(text["c"], "caf\xc3\xa9\n\xe3\x81\x82");
  EXPECT_EQ(text["d"], "\\\n\xd0\x96");
}

TEST_F(SettingsFile, SyntaxErrorsSayWhereInPlainWords) {
  EXPECT_EQ(error_of_file("a.toml", "[schedule]\nsteps = = 3\n"),
            "a.toml:2:9: Error while parsing value: could not determine value type");
  EXPECT_EQ(error_of_file("b.toml", "[schedule]\nsteps = 1\nsteps = 2\n"),
            "b.toml:3:9: Error while parsing key-value pair: cannot redefine existing integer 'steps'");
  EXPECT_EQ(error_of_file("c.json", "{\"memory\": {\"offload\": \"on\",}}"),
            "c.json: not valid JSON at line 1, column 29: unexpected '}'; expected string literal "
            "(reading object key)");
  EXPECT_EQ(error_of_file("d.json", "{\"memory\":\n {\"offload\": tru}}"),
            "d.json: not valid JSON at line 2, column 17: invalid literal; last read: '\"offload\": tru}' "
            "(reading value)");
}

TEST_F(SettingsFile, DatesExtensionsAndMissingFilesAreNamed) {
  EXPECT_EQ(error_of_file("e.toml", "[run]\nwhen = 1979-05-27\n"),
            "e.toml:2:8: run.when is a date or time, which no setting is");
  EXPECT_EQ(error_of_file("f.yaml", "a: 1\n"), "f.yaml: a settings file is .toml or .json");
  EXPECT_EQ(error_of([&] { read_settings_file(file("absent.toml")); }), "absent.toml: cannot read it (no such file?)");
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
