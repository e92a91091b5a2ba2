// Settings files. A TOML or JSON file (by its extension) is read into one
// JSON tree, so that a single reader checks keys and types for both; TOML is
// written from such a tree, in the tree's order.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace spillway {

// The settings in `path` (.toml or .json). A syntax error is
// Error("path:line:column", problem in words); a missing file, another
// extension, or a TOML date or time (no setting is one) name the path.
nlohmann::json read_settings_file(const std::string& path);

// `tree` (sections of values: text, numbers, booleans, lists) as TOML, after
// `comment` (each line prefixed with "# ").
std::string settings_toml(const nlohmann::ordered_json& tree, std::string_view comment);

}  // namespace spillway
