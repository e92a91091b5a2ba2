#include "base/config_file.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "base/json_text.h"
#include "base/regular_file.h"
#include "base/status.h"
#include "base/toml_guard.h"
#include "base/toml_parser.h"

namespace spillway {

namespace {

using nlohmann::json;

std::string where(const std::string& path, int64_t line, int64_t column) {
  return path + ":" + std::to_string(line) + ":" + std::to_string(column);
}

// `key`: the dotted key of `node`, for the error of a value JSON cannot hold.
json from_toml(const toml::node& node, const std::string& path, const std::string& key) {
  if (const toml::table* t = node.as_table()) {
    json out = json::object();
    for (const auto& [name, value] : *t) {
      out[std::string(name.str())] = from_toml(value, path, (key.empty() ? "" : key + ".") + std::string(name.str()));
    }
    return out;
  }
  if (const toml::array* a = node.as_array()) {
    json out = json::array();
    for (const toml::node& value : *a) out.push_back(from_toml(value, path, key));
    return out;
  }
  if (const auto* s = node.as_string()) return s->get();
  if (const auto* i = node.as_integer()) return i->get();
  if (const auto* f = node.as_floating_point()) return f->get();
  if (const auto* b = node.as_boolean()) return b->get();
  const toml::source_position at = node.source().begin;
  throw Error(where(path, at.line, at.column), key + " is a date or time, which no setting is");
}

json read_toml(const std::string& path, const std::string& text) {
  check_toml_text(path, text);
  try {
    return from_toml(toml::parse(std::string_view(text), std::string_view(path)), path, "");
  } catch (const toml::parse_error& e) {
    const toml::source_position at = e.source().begin;
    throw Error(where(path, at.line, at.column), std::string(e.description()));
  } catch (const TomlCheckFailed& e) {
    throw Error(path, std::string("not valid TOML: ") + e.what() + "; write the file as JSON if it is valid");
  }
}

json read_json(const std::string& path, const std::string& text) { return json_from_text(text, path); }

// One value: text as toml++ quotes it; numbers and booleans as JSON spells
// them, which TOML reads the same (and numbers in their shortest exact form).
void write_value(std::ostream& out, const nlohmann::ordered_json& v) {
  if (v.is_string()) {
    out << toml::value<std::string>(v.get<std::string>());
  } else if (v.is_array()) {
    out << "[";
    for (size_t i = 0; i < v.size(); ++i) {
      out << (i ? ", " : "");
      write_value(out, v[i]);
    }
    out << "]";
  } else if (v.is_boolean() || v.is_number_integer() || (v.is_number_float() && std::isfinite(v.get<double>()))) {
    out << v.dump();
  } else {
    throw Error("settings", "cannot write " + v.dump() + " as TOML");
  }
}

}  // namespace

json read_settings_file(const std::string& path) {
  const bool is_toml = path.ends_with(".toml"), is_json = path.ends_with(".json");
  SPW_CHECK(is_toml || is_json, path, "a settings file is .toml or .json");
  const std::string odd = non_regular_kind(path);
  SPW_CHECK(odd.empty(), path, "is ", odd, ", not a settings file");
  std::ifstream in(path, std::ios::binary);
  SPW_CHECK(in.good(), path, "cannot read it (no such file?)");
  std::stringstream text;
  text << in.rdbuf();
  return is_toml ? read_toml(path, text.str()) : read_json(path, text.str());
}

std::string settings_toml(const nlohmann::ordered_json& tree, std::string_view comment) {
  std::ostringstream out;
  std::istringstream lines{std::string(comment)};
  for (std::string line; std::getline(lines, line);) out << "# " << line << "\n";
  for (const auto& [section, settings] : tree.items()) {
    out << "\n[" << section << "]\n";
    for (const auto& [name, value] : settings.items()) {
      out << name << " = ";
      write_value(out, value);
      out << "\n";
    }
  }
  return out.str();
}

}  // namespace spillway
