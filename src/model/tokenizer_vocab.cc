#include "model/tokenizer_vocab.h"

#include "base/status.h"

namespace spillway::model {

void check_tokenizer_fits(const Tokenizer& tokenizer, const LlamaConfig& config, const std::string& source) {
  SPW_CHECK(tokenizer.vocab_size() <= config.vocab_size, source, "the tokenizer has ", tokenizer.vocab_size(),
            " tokens but the model's vocab_size is ", config.vocab_size);
}

}  // namespace spillway::model
