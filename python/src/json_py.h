// Values between Python and the JSON trees the library reads settings and
// writes records in: dicts, lists, text, numbers, booleans and None; a path
// (os.PathLike) becomes its text.
#pragma once

#include <nanobind/nanobind.h>
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace spillway::python {

nanobind::object to_python(const nlohmann::json& value);
nanobind::object to_python(const nlohmann::ordered_json& value);  // keys in their order
// A path given as text or os.PathLike, as text.
std::string path_text(nanobind::handle path);

// Error naming `what` for a value no setting can hold (a set, an object).
nlohmann::json from_python(nanobind::handle value, std::string_view what);

}  // namespace spillway::python
