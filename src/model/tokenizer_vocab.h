// A tokenizer and a model's vocabulary, checked against each other when
// both are loaded. A tokenizer may have fewer ids than the model's
// vocab_size (models pad their embeddings to a round number of rows; the
// padding rows are never sampled, infer/generate.h), but not more: its ids
// past the embedding would index past it mid-run.
#pragma once

#include <string>

#include "model/llama_config.h"
#include "model/tokenizer.h"

namespace spillway::model {

// Error on `source` (the model folder, run or GGUF file) naming both sizes
// when the tokenizer has more ids than config.vocab_size.
void check_tokenizer_fits(const Tokenizer& tokenizer, const LlamaConfig& config, const std::string& source);

}  // namespace spillway::model
