#include "python/src/json_py.h"

#include <nanobind/stl/string.h>

#include "base/status.h"

namespace nb = nanobind;

namespace spillway::python {

namespace {

template <typename Json>
nb::object json_to_python(const Json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::null: return nb::none();
    case nlohmann::json::value_t::boolean: return nb::bool_(value.template get<bool>());
    case nlohmann::json::value_t::number_integer: return nb::int_(value.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return nb::steal(PyLong_FromUnsignedLongLong(value.template get<uint64_t>()));
    case nlohmann::json::value_t::number_float: return nb::float_(value.template get<double>());
    case nlohmann::json::value_t::string: return nb::str(value.template get_ref<const std::string&>().c_str());
    case nlohmann::json::value_t::array: {
      nb::list list;
      for (const Json& v : value) list.append(json_to_python(v));
      return list;
    }
    case nlohmann::json::value_t::object: {
      nb::dict dict;
      for (const auto& [k, v] : value.items()) dict[nb::str(k.c_str())] = json_to_python(v);
      return dict;
    }
    default: return nb::none();
  }
}

}  // namespace

nb::object to_python(const nlohmann::json& value) { return json_to_python(value); }
nb::object to_python(const nlohmann::ordered_json& value) { return json_to_python(value); }

std::string path_text(nb::handle path) {
  return nb::cast<std::string>(nb::module_::import_("os").attr("fspath")(path));
}

nlohmann::json from_python(nb::handle value, std::string_view what) {
  if (value.is_none()) return nullptr;
  // bool before int: Python's True is an int too.
  if (nb::isinstance<nb::bool_>(value)) return nb::cast<bool>(value);
  if (nb::isinstance<nb::int_>(value)) {
    try {
      return nb::cast<int64_t>(value);
    } catch (const nb::cast_error&) {
      throw Error(what, nb::cast<std::string>(nb::str(value)) + " is out of range");
    }
  }
  if (nb::isinstance<nb::float_>(value)) return nb::cast<double>(value);
  if (nb::isinstance<nb::str>(value)) return nb::cast<std::string>(value);
  if (nb::hasattr(value, "__fspath__")) return nb::cast<std::string>(nb::str(value.attr("__fspath__")()));
  if (nb::isinstance<nb::dict>(value)) {
    nlohmann::json object = nlohmann::json::object();
    for (auto [k, v] : nb::borrow<nb::dict>(value)) {
      const std::string key = nb::cast<std::string>(nb::str(k));
      object[key] = from_python(v, std::string(what) + "." + key);
    }
    return object;
  }
  if (nb::isinstance<nb::list>(value) || nb::isinstance<nb::tuple>(value)) {
    nlohmann::json array = nlohmann::json::array();
    for (nb::handle v : value) array.push_back(from_python(v, what));
    return array;
  }
  throw Error(what, "a " + nb::cast<std::string>(nb::str(value.type().attr("__name__"))) +
                        " is not a setting's value (text, a number, true or false, or a list of text)");
}

}  // namespace spillway::python
