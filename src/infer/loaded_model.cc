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
  // Merged once here, the adapter costs nothing per token.
  if (!adapter.empty()) m.weights = model::merge_lora(m.weights, model::load_peft_adapter(adapter, m.weights.config()));
  m.tokenizer = load_tokenizer(m.source);
  model::check_tokenizer_fits(*m.tokenizer, m.weights.config(), m.source);
  return m;
}

}  // namespace spillway::infer
