#include "infer/loaded_model.h"

#include "model/llama_weights_io.h"
#include "model/lora_io.h"
#include "model/tokenizer_vocab.h"
#include "train/checkpoint.h"

namespace spillway::infer {

LoadedModel load_model(const std::string& path, const std::string& adapter) {
  LoadedModel m;
  m.source = train::resolve_checkpoint(path);
  m.weights = model::load_llama(m.source);
  // Merged once here, an adapter costs nothing per token. A LoRA run's
  // checkpoint holds its base weights and its adapter side by side: it runs
  // as the tuned model.
  if (adapter.empty() && model::holds_peft_adapter(m.source)) {
    m.weights = model::merge_lora(m.weights, model::load_peft_adapter(m.source, m.weights.config()));
  }
  if (!adapter.empty()) m.weights = model::merge_lora(m.weights, model::load_peft_adapter(adapter, m.weights.config()));
  m.tokenizer = load_tokenizer(m.source);
  model::check_tokenizer_fits(*m.tokenizer, m.weights.config(), m.source);
  return m;
}

}  // namespace spillway::infer
