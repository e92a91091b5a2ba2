#include "base/json_text.h"

#include <cstdio>

#include "base/status.h"

namespace spillway {

std::string json_parse_problem(const nlohmann::json::parse_error& e) {
  std::string_view what = e.what();
  // "[json.exception.parse_error.101] parse error at line 3, column 2: ..."
  if (size_t colon = what.find(": "); what.starts_with("[json.exception.") && colon != std::string_view::npos) {
    what.remove_prefix(colon + 2);
  } else if (size_t close = what.find("] "); close != std::string_view::npos) {
    what.remove_prefix(close + 2);
  }
  std::string problem(what);
  constexpr std::string_view kEmpty = "attempting to parse an empty input";
  if (problem.starts_with(kEmpty)) return "there is nothing in it";
  // "syntax error while parsing object key - unexpected '}'; expected string
  // literal" reads better with what went wrong first.
  constexpr std::string_view kParsing = "syntax error while parsing ";
  if (problem.starts_with(kParsing)) {
    problem = problem.substr(kParsing.size());
    if (size_t dash = problem.find(" - "); dash != std::string::npos) {
      problem = problem.substr(dash + 3) + " (reading " + problem.substr(0, dash) + ")";
    }
  }
  std::string out;
  for (unsigned char c : problem) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char hex[5];
      std::snprintf(hex, sizeof(hex), "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}

namespace {

// The line and column of byte `at` (0-based) of `text`.
std::string position(std::string_view text, size_t at) {
  int64_t line = 1, column = 1;
  for (size_t i = 0; i < at && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return detail::concat("line ", line, ", column ", column);
}

}  // namespace

nlohmann::json json_from_text(std::string_view text, std::string_view thing, std::string_view what) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) {
      throw Error(thing, std::string(what) + ": there is nothing in it");
    }
    // e.byte counts the bytes read, the one it failed at included (one past
    // the end when the text ran out); the position is of that byte.
    throw Error(thing, detail::concat(what, " at ", position(text, e.byte == 0 ? 0 : e.byte - 1), ": ",
                                      json_parse_problem(e)));
  } catch (const nlohmann::json::out_of_range& e) {
    // A number too large for a double (1e999) is refused after it is read,
    // with its text ("number overflow parsing '1e999'") but no position; the
    // position is of that text's first appearance, which is the number
    // unless a string before it holds the same characters.
    std::string_view message = e.what();
    const size_t open = message.find('\''), close = message.rfind('\'');
    if (open == std::string_view::npos || close <= open) throw Error(thing, std::string(what) + ": " + e.what());
    const std::string_view number = message.substr(open + 1, close - open - 1);
    const size_t at = text.find(number);
    throw Error(thing, detail::concat(what, at == std::string_view::npos ? "" : " at " + position(text, at),
                                      ": the number ", number, " is too large"));
  }
}

}  // namespace spillway
