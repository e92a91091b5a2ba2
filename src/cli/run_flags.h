// The command line of a run configuration: every field a command uses
// becomes a flag generated from the field table (train/run_config_fields.h),
// and an optional positional argument names a run file (.toml or .json).
//
// Flags only collect text while CLI11 parses. Resolving (defaults < file <
// environment < flags) and every check happen in resolve(), which a command
// calls when it runs, inside main's one-line error handling: so --help reads
// no file and no environment variable, and a malformed value is an error
// only for the command that uses it.
#pragma once

#include <CLI/CLI.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "train/run_config.h"
#include "train/run_config_fields.h"

namespace spillway::cli {

// A word that a command's flag takes besides the values of its field, for
// something the command itself chooses (`plan --batch auto`).
struct ChoiceWord {
  std::string_view key;   // "schedule.batch"
  std::string_view word;  // "auto"
  std::string_view help;  // appended to the flag's help
};

class RunFlags {
 public:
  // Registers the flags on `cmd`; the object must outlive its parsing.
  RunFlags(CLI::App* cmd, train::Command command, std::vector<ChoiceWord> words = {});
  RunFlags(const RunFlags&) = delete;
  RunFlags& operator=(const RunFlags&) = delete;

  // The configuration the command line asks for; Error naming the file and
  // key, the variable or the flag of a bad value.
  train::RunConfig resolve() const;
  // Whether the flag of `key` was given as its choice word.
  bool chose(std::string_view key) const { return chosen_.count(key) > 0; }

 private:
  void add_flag(CLI::App* cmd, const train::Field& field, const train::RunConfig& defaults);
  const ChoiceWord* word_of(std::string_view key) const;

  train::Command command_;
  std::vector<ChoiceWord> words_;
  train::RunSources sources_;
  std::set<std::string, std::less<>> chosen_;
};

}  // namespace spillway::cli
