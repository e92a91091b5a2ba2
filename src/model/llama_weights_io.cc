#include "model/llama_weights_io.h"

#include <filesystem>

#include "base/atomic_file.h"
#include "base/status.h"
#include "model/llama_config_json.h"
#include "model/weight_directory.h"

namespace spillway::model {

namespace fs = std::filesystem;

LlamaWeights load_llama(const std::string& dir) {
  SPW_CHECK(fs::is_directory(dir), dir, "not a model directory (expected config.json and model.safetensors)");
  LlamaConfig config = load_config((fs::path(dir) / "config.json").string());
  LlamaWeights weights = LlamaWeights::zeros(config);
  WeightDirectory files(dir);
  for (NamedTensor& t : weights.tensors()) {
    files.read_tensor_as_f32(t.name, t.shape, std::span<float>(t.data));
  }
  return weights;
}

void save_llama(const std::string& dir, const LlamaWeights& weights, uint64_t max_shard_bytes) {
  fs::create_directories(dir);
  const std::string config_text = config_to_json(weights.config()).dump(2) + "\n";
  write_text_file_atomically((fs::path(dir) / "config.json").string(), config_text);
  WeightDirectoryWriter writer;
  for (const NamedTensor& t : weights.tensors()) writer.add(t.name, DType::f32, t.shape, t.data.data());
  writer.write(dir, max_shard_bytes);
}

}  // namespace spillway::model
