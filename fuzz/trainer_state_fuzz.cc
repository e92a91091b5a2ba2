// What --resume reads from a checkpoint besides the model: trainer_state.json
// (first input byte even) or optimizer.safetensors (odd), the latter for a
// small model whose moments it must hold. The trainer state goes the whole
// way train_model takes it: train/checkpoint.h's reader, then every field
// read and range-checked, the checkpointed options restored over a run's
// defaults and the sampler's position checked against them (bit 1 of the
// first byte: a token file's windows, whose every token counts; else bit
// 2: packed instruction examples; else examples one a row), since a
// state that passes the reader but hangs or overflows later is the bug the
// issue found.
#include <filesystem>

#include "fuzz/fuzz_input.h"
#include "model/llama_config.h"
#include "train/checkpoint.h"
#include "train/run_config.h"
#include "train/run_config_fields.h"
#include "train/trainer_state.h"

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
  // How the sampler drew its rows: token windows, instruction examples one
  // a row, or packed.
  const train::SampledRows sampled = (data[0] & 2) != 0   ? train::SampledRows::windows
                                     : (data[0] & 4) != 0 ? train::SampledRows::packed
                                                          : train::SampledRows::examples;
  const std::string dir = fuzz::scratch_dir() + "/checkpoint";
  std::filesystem::create_directories(dir);
  std::filesystem::remove(dir + "/trainer_state.json");
  std::filesystem::remove(dir + "/optimizer.safetensors");
  const std::string name = optimizer ? "checkpoint/optimizer.safetensors" : "checkpoint/trainer_state.json";
  const std::string path = fuzz::write_scratch(name, fuzz::as_text(data + 1, size - 1));
  fuzz::expect_only_errors([&] {
    if (optimizer) {
      train::load_optimizer(dir, small_model());
      return;
    }
    const train::TrainerState state = train::read_trainer_state(train::load_trainer_state(dir), path);
    train::RunConfig config;
    train::restore_checkpointed(config, state.options, path);
    // The optimizer's count as the state implies it: the check of the
    // sampler's position is what this reaches for.
    train::check_trainer_state(state, config.schedule, state.step - state.skipped_steps, sampled, path);
  });
  return 0;
}
