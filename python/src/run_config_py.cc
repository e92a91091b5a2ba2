// spillway.RunConfig: the one typed run configuration (train/run_config.h)
// that `spillway train`, `finetune`, `bench` and `plan` resolve, read and
// set through the same field table (train/run_config_fields.h) as files and
// flags, so a value is checked and an error worded as a file's would be.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <string>

#include "base/config_file.h"
#include "base/status.h"
#include "python/src/bindings.h"
#include "python/src/json_py.h"
#include "train/run_config_fields.h"

namespace nb = nanobind;

namespace spillway::python {

namespace {

// What errors about values given in Python name, as a file's name its path.
constexpr std::string_view kThing = "RunConfig";

train::Command parse_command(const std::string& name) {
  for (train::Command c : {train::Command::train, train::Command::finetune, train::Command::bench,
                           train::Command::plan}) {
    if (train::command_name(c) == name) return c;
  }
  throw Error("command", "'" + name + "' is not one of train, finetune, bench, plan");
}

// The field a setting names: its dotted key ("schedule.steps"), or its bare
// name where one section alone has it ("steps").
const train::Field& field_named(std::string_view name, train::Command command) {
  const train::Field* found = train::find_field(name);
  if (!found) {
    for (const train::Field& f : train::run_config_fields()) {
      if (train::name_of(f.key) != name) continue;
      SPW_CHECK(found == nullptr, kThing, name, " is both ", found->key, " and ", f.key,
                "; give the section (", train::section_of(f.key), "={...})");
      found = &f;
    }
  }
  SPW_CHECK(found != nullptr, kThing, "unknown setting ", name, " (docs/run_config.md lists them)");
  SPW_CHECK(train::uses(*found, command), kThing, found->key, " is not a setting of ",
            train::command_name(command));
  return *found;
}

void set_value(RunConfigObject& self, const train::Field& f, nb::handle value) {
  train::set_field_json(f, self.config, from_python(value, f.key), kThing);
  train::check_field_range(f, self.config, kThing, true);
}

void init(RunConfigObject* self, nb::handle file, const std::string& command, nb::kwargs settings) {
  const train::Command c = parse_command(command);
  train::RunSources sources;
  if (!file.is_none()) sources.file = path_text(file);
  // Defaults, the file and the environment, as the command line resolves
  // them; the keyword settings then stand where its flags do.
  new (self) RunConfigObject{train::resolve_run_config(c, sources), c};
  for (auto [key, value] : settings) {
    const std::string name = nb::cast<std::string>(key);
    if (nb::isinstance<nb::dict>(value)) {  // a section: schedule={"steps": 10}
      for (auto [k, v] : nb::borrow<nb::dict>(value)) {
        set_value(*self, field_named(name + "." + nb::cast<std::string>(k), c), v);
      }
    } else {
      set_value(*self, field_named(name, c), value);
    }
  }
}

nb::list field_table() {
  nb::list out;
  for (const train::Field& f : train::run_config_fields()) {
    nb::list commands;
    for (train::Command c : {train::Command::train, train::Command::finetune, train::Command::bench,
                             train::Command::plan}) {
      if (train::uses(f, c)) commands.append(nb::str(std::string(train::command_name(c)).c_str()));
    }
    nb::dict d;
    d["key"] = std::string(f.key);
    d["flag"] = std::string(f.flag);
    d["help"] = std::string(f.help);
    d["expected"] = train::expected_text(f);
    d["commands"] = commands;
    out.append(d);
  }
  return out;
}

}  // namespace

void bind_run_config(nb::module_& m) {
  nb::class_<RunConfigObject>(m, "RunConfig",
                              "The typed configuration of a run: what `spillway train run.toml --flag ...` "
                              "resolves (docs/run_config.md).")
      .def("__init__", &init, nb::arg("file") = nb::none(), nb::kw_only(), nb::arg("command") = "train",
           nb::arg("settings"),
           "Defaults of `command` (train, finetune, bench or plan), then the run file (.toml or .json), then "
           "the environment variables the command line reads, then the settings given here: a section as a "
           "dict (schedule={'steps': 10}) or a setting by its name where that is unique (steps=10).")
      .def_prop_ro("command", [](const RunConfigObject& self) {
             return std::string(train::command_name(self.command));
           },
                   "The command whose defaults and settings this has.")
      .def("get", [](const RunConfigObject& self, const std::string& key) {
             return to_python(train::field_json(field_named(key, self.command), self.config));
           }, nb::arg("key"), "A setting's value by its dotted key ('schedule.steps') or unique name.")
      .def("set", [](RunConfigObject& self, const std::string& key, nb::handle value) {
             set_value(self, field_named(key, self.command), value);
           }, nb::arg("key"), nb::arg("value"),
           "Sets a setting by its dotted key or unique name; checked as a run file's value is.")
      .def("to_dict", [](const RunConfigObject& self) {
             return to_python(train::run_config_json(self.config, self.command));
           }, "The settings of its command, by section.")
      .def("to_toml", [](const RunConfigObject& self) {
             return settings_toml(train::run_config_json(self.config, self.command),
                                  "A spillway run configuration (docs/run_config.md).");
           }, "The settings as a run file that `spillway <command> FILE` reads back.")
      .def("check", [](const RunConfigObject& self) { train::check_run_config(self.config, self.command); },
           "Raises spillway.Error naming the setting when one is out of range.")
      .def_static("fields", &field_table,
                  "Every setting: its key, flag, help, the values it takes and the commands that use it.");
}

}  // namespace spillway::python
