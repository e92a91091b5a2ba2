// Run configuration files: the first input byte picks TOML or JSON and the
// command whose defaults they go over; the rest is the file. The settings
// are then range-checked as a run would.
#include "fuzz/fuzz_input.h"
#include "train/run_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace spillway;
  if (size == 0) return 0;
  static constexpr train::Command kCommands[] = {train::Command::train, train::Command::finetune,
                                                 train::Command::bench, train::Command::plan};
  const train::Command command = kCommands[(data[0] >> 1) % 4];
  const std::string path = fuzz::write_scratch((data[0] & 1) ? "run.toml" : "run.json", fuzz::as_text(data + 1, size - 1));
  fuzz::expect_only_errors([&] {
    train::RunSources sources;
    sources.file = path;
    sources.getenv = [](const char*) -> const char* { return nullptr; };
    const train::RunConfig config = train::resolve_run_config(command, sources);
    train::check_run_config(config, command);
  });
  return 0;
}
