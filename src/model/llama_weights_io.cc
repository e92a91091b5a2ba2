#include "model/llama_weights_io.h"

#include <filesystem>
#include <vector>

#include "base/atomic_file.h"
#include "base/status.h"
#include "model/gguf.h"
#include "model/gguf_llama.h"
#include "model/llama_config_json.h"
#include "model/llama_weights_check.h"
#include "model/weight_directory.h"

namespace spillway::model {

namespace fs = std::filesystem;

LlamaWeights load_llama(const std::string& dir) {
  std::error_code ec;
  if (fs::is_regular_file(dir, ec) && is_gguf_file(dir)) return load_gguf_llama(dir);
  SPW_CHECK(fs::is_directory(dir), dir,
            "not a model directory (expected config.json and model.safetensors) nor a GGUF file");
  const std::string config_path = (fs::path(dir) / "config.json").string();
  LlamaConfig config = load_config(config_path);
  WeightDirectory files(dir);
  check_weight_names(files, config, config_path);  // before allocating what the config asks for
  LlamaWeights weights = LlamaWeights::zeros(config);
  for (NamedTensor& t : weights.tensors()) {
    files.read_tensor_as_f32(t.name, t.shape, std::span<float>(t.data));
  }
  check_tied_head(files, weights, config_path);
  return weights;
}

void save_llama(const std::string& dir, const LlamaWeights& weights, uint64_t max_shard_bytes, DType dtype) {
  SPW_CHECK(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16, dir, "weights cannot be written as ",
            dtype_name(dtype));
  fs::create_directories(dir);
  const std::string config_text = config_to_json(weights.config()).dump(2) + "\n";
  write_text_file_atomically((fs::path(dir) / "config.json").string(), config_text);
  WeightDirectoryWriter writer;
  // The writer references bytes until it writes, so rounded copies live here.
  std::vector<std::vector<uint16_t>> rounded;
  rounded.reserve(weights.tensors().size());
  for (const NamedTensor& t : weights.tensors()) {
    if (dtype == DType::f32) {
      writer.add(t.name, DType::f32, t.shape, t.data.data());
      continue;
    }
    std::vector<uint16_t>& half = rounded.emplace_back(t.data.size());
    for (size_t i = 0; i < t.data.size(); ++i) {
      half[i] = dtype == DType::bf16 ? to_bf16(t.data[i]).bits : to_f16(t.data[i]).bits;
    }
    writer.add(t.name, dtype, t.shape, half.data());
  }
  writer.write(dir, max_shard_bytes);
}

DType stored_dtype(const std::string& dir_or_gguf) {
  std::error_code ec;
  if (fs::is_regular_file(dir_or_gguf, ec) && is_gguf_file(dir_or_gguf)) {
    switch (GgufFile(dir_or_gguf).tensor("token_embd.weight").type) {
      case GgmlType::f32: return DType::f32;
      case GgmlType::f16: return DType::f16;
      default: return DType::bf16;
    }
  }
  return WeightDirectory(dir_or_gguf).at("model.embed_tokens.weight").tensor->dtype;
}

}  // namespace spillway::model
