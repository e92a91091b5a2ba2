// What --resume reads from a checkpoint besides the model: trainer_state.json
// (first input byte even) or optimizer.safetensors (odd), the latter for a
// small model whose moments it must hold, through train/checkpoint.h's
// readers.
#include <filesystem>

#include "fuzz/fuzz_input.h"
#include "model/llama_config.h"
#include "train/checkpoint.h"

namespace {

spillway::model::LlamaConfig small_model() {
  spillway::model::LlamaConfig c;
  c.vocab_size = 8;
  c.hidden_size = 8;
  c.intermediate_size = 16;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.max_position_embeddings = 16;
  c.tie_word_embeddings = true;
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace spillway;
  if (size == 0) return 0;
  const bool optimizer = (data[0] & 1) != 0;
  const std::string dir = fuzz::scratch_dir() + "/checkpoint";
  std::filesystem::create_directories(dir);
  std::filesystem::remove(dir + "/trainer_state.json");
  std::filesystem::remove(dir + "/optimizer.safetensors");
  const std::string name = optimizer ? "checkpoint/optimizer.safetensors" : "checkpoint/trainer_state.json";
  fuzz::write_scratch(name, fuzz::as_text(data + 1, size - 1));
  fuzz::expect_only_errors([&] {
    if (optimizer) train::load_optimizer(dir, small_model());
    else train::load_trainer_state(dir);
  });
  return 0;
}
