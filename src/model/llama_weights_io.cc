#include "model/llama_weights_io.h"

#include <algorithm>
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

namespace {

WeightDirectoryWriter parameter_writer(const LlamaConfig& config, const ParameterReader& read, DType dtype) {
  WeightDirectoryWriter writer;
  const std::vector<ParameterSpec> specs = parameter_specs(config);
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto n = static_cast<size_t>(specs[i].shape.numel());
    writer.add(specs[i].name, dtype, specs[i].shape, [&read, i, n, dtype](std::span<std::byte> out) {
      if (dtype == DType::f32) {
        read(i, std::span<float>(reinterpret_cast<float*>(out.data()), n));
        return;
      }
      std::vector<float> wide(n);
      read(i, wide);
      auto* half = reinterpret_cast<uint16_t*>(out.data());
      for (size_t j = 0; j < n; ++j) half[j] = dtype == DType::bf16 ? to_bf16(wide[j]).bits : to_f16(wide[j]).bits;
    });
  }
  return writer;
}

}  // namespace

void save_llama(const std::string& dir, const LlamaConfig& config, const ParameterReader& read,
                uint64_t max_shard_bytes, DType dtype) {
  SPW_CHECK(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16, dir, "weights cannot be written as ",
            dtype_name(dtype));
  fs::create_directories(dir);
  const std::string config_text = config_to_json(config).dump(2) + "\n";
  write_text_file_atomically((fs::path(dir) / "config.json").string(), config_text);
  parameter_writer(config, read, dtype).write(dir, max_shard_bytes);
}

void walk_llama_reads(const LlamaConfig& config, const ParameterReader& read, uint64_t max_shard_bytes) {
  parameter_writer(config, read, DType::f32).walk(max_shard_bytes);
}

void save_llama(const std::string& dir, const LlamaWeights& weights, uint64_t max_shard_bytes, DType dtype) {
  save_llama(
      dir, weights.config(),
      [&weights](size_t i, std::span<float> out) {
        const std::vector<float>& data = weights.tensors()[i].data;
        std::copy(data.begin(), data.end(), out.begin());
      },
      max_shard_bytes, dtype);
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
