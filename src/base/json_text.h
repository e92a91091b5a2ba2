// Reading text as JSON with an error a user can act on: the file, the line
// and column, and what was wrong in plain words, instead of nlohmann's
// "[json.exception.parse_error.101] parse error at ..." text.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace spillway {

// `text` parsed as JSON. On failure throws Error(thing, "<what> at line L,
// column C: <problem>"), `thing` usually the file's path and `what` the
// part of it that is JSON ("header is not valid JSON" for a safetensors
// header; the whole file by default).
nlohmann::json json_from_text(std::string_view text, std::string_view thing,
                              std::string_view what = "not valid JSON");

// The problem of a parse error in plain words, without nlohmann's prefix and
// position; bytes outside printable ASCII are written \xNN so that the error
// stays one readable line.
std::string json_parse_problem(const nlohmann::json::parse_error& e);

}  // namespace spillway
