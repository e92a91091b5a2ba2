#include "cli/run_flags.h"

#include "base/status.h"

namespace spillway::cli {

RunFlags::RunFlags(CLI::App* cmd, train::Command command, std::vector<ChoiceWord> words)
    : command_(command), words_(std::move(words)) {
  cmd->add_option("run_file", sources_.file,
                  "a run configuration (.toml or .json, docs/run_config.md); flags override what it sets")
      ->type_name("FILE");
  const train::RunConfig defaults = train::default_run_config(command);
  for (const train::Field& f : train::run_config_fields()) {
    if (train::uses(f, command)) add_flag(cmd, f, defaults);
  }
}

const ChoiceWord* RunFlags::word_of(std::string_view key) const {
  for (const ChoiceWord& w : words_) {
    if (w.key == key) return &w;
  }
  return nullptr;
}

void RunFlags::add_flag(CLI::App* cmd, const train::Field& field, const train::RunConfig& defaults) {
  const std::string key(field.key), group(train::section_of(field.key));
  const std::string names = field.aliases.empty() ? std::string(field.flag)
                                                  : std::string(field.aliases) + "," + std::string(field.flag);
  std::string help(field.help);
  if (train::is_switch(field)) {
    // Two flags, so that --help shows each by its own name. A negation the
    // table names is a flag people use (--nondeterministic) and is listed;
    // the generated --no-<name> ones are documented once, in the docs.
    const std::string negation = train::negation_flag(field);
    if (field_text(field, defaults) == "true") help += " (the default)";
    cmd->add_flag_callback(
           names, [this, key] { sources_.flags.push_back({key, {"true"}}); }, help)
        ->group(group);
    cmd->add_flag_callback(
           negation, [this, key] { sources_.flags.push_back({key, {"false"}}); },
           field.negation.empty() ? "" : "the opposite of " + std::string(field.flag))
        ->group(field.negation.empty() ? "" : group);
    return;
  }
  const ChoiceWord* word = word_of(field.key);
  if (word) help += "; or " + std::string(word->word) + ": " + std::string(word->help);
  if (!field.env.empty()) help += " [env: " + std::string(field.env) + "]";
  CLI::Option* option;
  if (std::holds_alternative<std::vector<std::string>*>(field.ref(const_cast<train::RunConfig&>(defaults)))) {
    option = cmd->add_option_function<std::vector<std::string>>(
        names, [this, key](const std::vector<std::string>& v) { sources_.flags.push_back({key, v}); },
        help);
  } else {
    option = cmd->add_option_function<std::string>(
        names,
        [this, key, word](const std::string& v) {
          if (word && v == word->word) {
            chosen_.insert(key);
          } else {
            sources_.flags.push_back({key, {v}});
          }
        },
        help);
  }
  option->type_name(train::value_type_name(field) + (word ? "|" + std::string(word->word) : ""));
  option->group(group);
  if (const std::string d = field_text(field, defaults); !d.empty()) option->default_str(d);
}

train::RunConfig RunFlags::resolve() const {
  try {
    return train::resolve_run_config(command_, sources_);
  } catch (const Error& e) {
    // A bad value of a flag that also takes a choice word lists that word too.
    for (const ChoiceWord& w : words_) {
      const train::Field* f = train::find_field(w.key);
      if (f && e.thing() == f->flag) throw Error(e.thing(), e.problem() + " (or " + std::string(w.word) + ")");
    }
    throw;
  }
}

}  // namespace spillway::cli
