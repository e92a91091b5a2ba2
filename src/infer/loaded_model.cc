#include "infer/loaded_model.h"

#include "model/llama_weights_io.h"
#include "model/tokenizer_vocab.h"
#include "train/checkpoint.h"

namespace spillway::infer {

LoadedModel load_model(const std::string& path) {
  LoadedModel m;
  m.source = train::resolve_checkpoint(path);
  m.weights = model::load_llama(m.source);
  m.tokenizer = load_tokenizer(m.source);
  model::check_tokenizer_fits(*m.tokenizer, m.weights.config(), m.source);
  return m;
}

}  // namespace spillway::infer
