// The table of run settings: for each field of RunConfig its dotted key (the
// section and name in a config file), its command-line flag, help, type,
// the commands that use it, the default where a command starts elsewhere
// than RunConfig's initializer, its environment variable, its range, and
// whether a resumed run takes it from the checkpoint. Files, flags (see
// cli/run_flags.h), the environment, the written configuration of a run and
// resuming all read this table and nothing else.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/run_config.h"

namespace spillway::train {

using Commands = uint8_t;  // a set of Command, one bit each
constexpr Commands command_bit(Command c) { return static_cast<Commands>(1u << static_cast<unsigned>(c)); }

// An enum field seen through its name table.
struct EnumRef {
  std::span<const std::string_view> names;
  std::string_view noun;
  size_t (*get)(const void* target);
  void (*set)(void* target, size_t index);
  void* target;
};

// Where a field lives in one RunConfig, by type.
using FieldRef = std::variant<bool*, int*, int64_t*, uint64_t*, double*, std::string*, std::vector<std::string>*,
                              EnumRef>;

struct Field {
  std::string_view key = {};   // "memory.device_mem"
  std::string_view flag = {};  // "--device-mem"
  // More names of the flag, comma-separated ("-o", "--save-every"): short
  // forms and the names Hugging Face or llama.cpp users reach for.
  std::string_view aliases = {};
  // A switch's flag that sets it false; empty: "--no-" + the flag's name.
  std::string_view negation = {};
  std::string_view help = {};
  Commands commands = 0;
  FieldRef (*ref)(RunConfig& config) = nullptr;
  bool bytes = false;  // an integer of bytes, written "24GiB" (base/bytes.h)
  int64_t min = std::numeric_limits<int64_t>::min();  // integers: the least value allowed
  // Integers: the most allowed (base/limits.h): far above any real run, and
  // low enough that the sizes computed from it cannot overflow.
  int64_t max = std::numeric_limits<int64_t>::max();
  // A resumed run takes it from the checkpoint, so a resume cannot silently
  // change the training (the schedule and the optimizer).
  bool checkpointed = false;
  std::string_view env = {};  // an environment variable that sets it, below flags
  // Defaults, as a flag would give them, of the commands that do not start
  // from RunConfig's initializer.
  std::string_view finetune_default = {}, bench_default = {}, plan_default = {};
};

std::span<const Field> run_config_fields();
std::string_view section_of(std::string_view key);  // "memory" of "memory.device_mem"
std::string_view name_of(std::string_view key);     // "device_mem" of "memory.device_mem"
const Field* find_field(std::string_view key);  // nullptr when there is none
inline bool uses(const Field& field, Command command) { return (field.commands & command_bit(command)) != 0; }
bool is_switch(const Field& field);            // a bool: given as a flag without a value
std::string negation_flag(const Field& field);  // switches only
// The default text of `command`, as a flag would give it; empty: RunConfig's.
std::string_view command_default(const Field& field, Command command);
// What a value must look like: "a whole number", "one of auto, on, off".
std::string expected_text(const Field& field);
// What --help calls a value: "INT", "BYTES", "auto|on|off|stream"; empty for a switch.
std::string value_type_name(const Field& field);

// Sets a field from text given on the command line or in the environment:
// one text, or one per element of a list. Error(what, problem) names the
// flag or variable.
void set_field_text(const Field& field, RunConfig& config, std::span<const std::string> texts,
                    std::string_view what);
// Sets a field from a parsed file's value; Error(file, "<key> is <value>; <expectation>").
void set_field_json(const Field& field, RunConfig& config, const nlohmann::json& value, std::string_view file);
nlohmann::json field_json(const Field& field, const RunConfig& config);
std::string field_text(const Field& field, const RunConfig& config);  // as a flag would give it
// Error when an integer field is outside [min, max], naming `what`: a flag,
// a variable, or (`in_file`) the file that set it.
void check_field_range(const Field& field, const RunConfig& config, std::string_view what, bool in_file = false);

// The fields `command` uses, nested by section ({"memory": {"offload": "auto"}})
// in the table's order.
nlohmann::ordered_json run_config_json(const RunConfig& config, Command command);
// Sets the fields `command` uses from a file's tree of sections. Keys of
// another command are skipped (one file can describe a run for train and
// bench); a key no command knows is an error. `set_key` (when given) hears
// every key set, for naming it in later errors.
void apply_run_config_json(RunConfig& config, Command command, const nlohmann::json& tree, std::string_view file,
                           const std::function<void(const Field&)>& set_key = {});

// What a checkpoint keeps of the configuration: the checkpointed fields.
nlohmann::json checkpointed_json(const RunConfig& config);
// Takes the checkpointed fields back from what checkpointed_json wrote
// (`source` names its file in errors). Checkpoints from before the field
// table held them flat ({"steps": 600, "lr": 0.002}), and a field added
// since is absent: its run used RunConfig's initializer.
void restore_checkpointed(RunConfig& config, const nlohmann::json& saved, std::string_view source);

}  // namespace spillway::train
