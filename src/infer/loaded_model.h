// A model read for running it: its weights and its tokenizer, from a model
// folder, a run folder (its latest checkpoint) or a GGUF file. What
// `spillway generate` and `eval` read and Python's `Model.load` holds.
#pragma once

#include <memory>
#include <string>

#include "model/llama_weights.h"
#include "model/tokenizer.h"

namespace spillway::infer {

struct LoadedModel {
  std::string source;  // the folder or file read (a run folder's checkpoint)
  model::LlamaWeights weights;
  std::unique_ptr<Tokenizer> tokenizer;
};

// Errors name the path and what is wrong: missing, corrupt, or a tokenizer
// with ids the model's vocabulary lacks. `adapter`, when given, is a PEFT
// LoRA adapter folder (model/lora_io.h) merged into the weights; without
// one, an adapter in the model folder itself (a LoRA run's checkpoint) is.
LoadedModel load_model(const std::string& path, const std::string& adapter = {});

}  // namespace spillway::infer
