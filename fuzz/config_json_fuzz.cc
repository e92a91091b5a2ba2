// A model's config.json: the JSON, every field's type and range, and the
// parameter count computed from the sizes it accepted.
#include "base/json_text.h"
#include "fuzz/fuzz_input.h"
#include "model/llama_config_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace spillway;
  fuzz::expect_only_errors([&] {
    const model::LlamaConfig c =
        model::config_from_json(json_from_text(fuzz::as_text(data, size), "config.json"), "config.json");
    model::parameter_count(c);
    model::training_flops_per_token(c, 4096);
  });
  return 0;
}
