// Helpers for tests of run configurations: the commands that take one, and
// for any field a value that differs from a given one.
#pragma once

#include <string>
#include <type_traits>
#include <vector>

#include "base/bytes.h"
#include "train/run_config_fields.h"

namespace spillway::testing {

inline constexpr train::Command kRunCommands[] = {train::Command::train, train::Command::finetune,
                                                  train::Command::bench, train::Command::plan};

// A value of `field` unlike the one in `config`, as the texts a flag gives:
// the other switch state, the next enum name, a larger number, another text.
// The parallel degrees stay 1, the only value a run takes today.
inline std::vector<std::string> other_value(const train::Field& field, const train::RunConfig& config) {
  train::RunConfig copy = config;
  return std::visit(
      [&](auto ref) -> std::vector<std::string> {
        using T = decltype(ref);
        if constexpr (std::is_same_v<T, train::EnumRef>) {
          return {std::string(ref.names[(ref.get(ref.target) + 1) % ref.names.size()])};
        } else if constexpr (std::is_same_v<T, bool*>) {
          return {*ref ? "false" : "true"};
        } else if constexpr (std::is_same_v<T, double*>) {
          return {nlohmann::json(*ref * 2 + 0.25).dump()};
        } else if constexpr (std::is_same_v<T, std::string*>) {
          return {*ref + "-other"};
        } else if constexpr (std::is_same_v<T, std::vector<std::string>*>) {
          return {"a.txt", "b.txt"};
        } else {
          if (train::section_of(field.key) == "parallel") return {"1"};
          if (field.bytes) return {format_bytes_exact(*ref + (3ull << 30))};
          return {std::to_string(*ref + 3)};
        }
      },
      field.ref(copy));
}

}  // namespace spillway::testing
