#include "model/qlora_stream.h"

#include <exception>
#include <filesystem>
#include <memory>
#include <utility>
#include <vector>

#include "base/status.h"
#include "model/gguf.h"
#include "model/gguf_llama.h"
#include "model/llama_config_json.h"
#include "model/llama_weights_check.h"
#include "model/llama_weights_io.h"
#include "model/weight_directory.h"

namespace spillway::model {

namespace fs = std::filesystem;

namespace {

// The holder the tensors arrive in, and by tensor (checkpoint order) its
// place among the quantized ones, or -1 for a tensor kept as float32.
struct Arrivals {
  StreamedBase base;
  std::vector<int> slot;
};

Arrivals start(const LlamaConfig& config, const LoraConfig& lora, LoraBase storage) {
  Arrivals a{{LlamaWeights::without_values(config), {}}, {}};
  QuantizedBase& q = a.base.quantized;
  q.storage = storage;
  q.names = quantized_weight_names(config, lora, storage);
  q.tensors.resize(q.names.size());
  std::vector<NamedTensor>& tensors = a.base.weights.tensors();
  a.slot.assign(tensors.size(), -1);
  for (size_t s = 0; s < q.names.size(); ++s) {
    a.slot[static_cast<size_t>(&a.base.weights.at(q.names[s]) - tensors.data())] = static_cast<int>(s);
  }
  return a;
}

// Tensor `i`'s values, just made: kept, or quantized and let go of.
void arrive(Arrivals& a, size_t i, std::vector<float> values) {
  NamedTensor& t = a.base.weights.tensors()[i];
  if (a.slot[i] < 0) {
    t.data = std::move(values);
    return;
  }
  const bool dq = a.base.quantized.storage == LoraBase::nf4_double;
  a.base.quantized.tensors[static_cast<size_t>(a.slot[i])] = ops::nf4_quantize(values, dq, t.name.c_str());
}

std::vector<Shape> shapes_of(const LlamaWeights& w) {
  std::vector<Shape> shapes;
  for (const NamedTensor& t : w.tensors()) shapes.push_back(t.shape);
  return shapes;
}

}  // namespace

StreamedBase random_quantized_base(const LlamaConfig& config, uint64_t seed, const LoraConfig& lora,
                                   LoraBase storage, double std) {
  Arrivals a = start(config, lora, storage);
  const auto count = static_cast<int64_t>(a.slot.size());
  // Each tensor draws from its own stream, so threads may take them in any
  // order, each holding one tensor's float32 at a time. An exception may
  // not leave an OpenMP region: the first is kept and thrown after it.
  std::exception_ptr failed;
#pragma omp parallel for schedule(dynamic)
  for (int64_t i = 0; i < count; ++i) {
    try {
      const Shape& shape = a.base.weights.tensors()[static_cast<size_t>(i)].shape;
      std::vector<float> values(static_cast<size_t>(shape.numel()));
      random_parameter(shape, static_cast<size_t>(i), seed, std, values);
      arrive(a, static_cast<size_t>(i), std::move(values));
    } catch (...) {
#pragma omp critical(spw_random_quantized_base)
      if (!failed) failed = std::current_exception();
    }
  }
  if (failed) std::rethrow_exception(failed);
  a.base.quantized.original = [shapes = shapes_of(a.base.weights), seed, std](size_t i, std::span<float> out) {
    random_parameter(shapes.at(i), i, seed, std, out);
  };
  return std::move(a.base);
}

namespace {

// Each tensor read by `read_one(i, out)`, `merged`'s adapters folded in
// where given, arriving in turn; the base's `original` reads it again.
template <typename ReadOne>
StreamedBase read_quantized(Arrivals a, const LlamaConfig& config, const LoraWeights* merged, ReadOne read_one) {
  std::shared_ptr<const LoraWeights> adapters = merged ? std::make_shared<LoraWeights>(*merged) : nullptr;
  auto read = [read_one, adapters, specs = parameter_specs(config)](size_t i, std::span<float> out) {
    if (!adapters) return read_one(i, out);
    const ParameterSpec& s = specs.at(i);
    NamedTensor t{s.name, s.shape, std::vector<float>(out.size())};
    read_one(i, t.data);
    merge_lora_into(t, *adapters);
    std::copy(t.data.begin(), t.data.end(), out.begin());
  };
  for (size_t i = 0; i < a.slot.size(); ++i) {
    std::vector<float> values(static_cast<size_t>(a.base.weights.tensors()[i].shape.numel()));
    read(i, values);
    arrive(a, i, std::move(values));
  }
  a.base.quantized.original = std::move(read);
  return std::move(a.base);
}

}  // namespace

StreamedBase load_quantized_base(const std::string& dir, const LoraConfig& lora, LoraBase storage,
                                 const LoraWeights* merged) {
  std::error_code ec;
  if (fs::is_regular_file(dir, ec) && is_gguf_file(dir)) {
    // The file stays mapped while the base lives, as a folder's does.
    auto file = std::make_shared<const GgufFile>(dir);
    const LlamaConfig config = gguf_llama_config(*file);
    check_gguf_llama_tensors(*file, config);
    return read_quantized(start(config, lora, storage), config, merged,
                          [file, config, specs = parameter_specs(config)](size_t i, std::span<float> out) {
                            read_gguf_llama_tensor(*file, config, specs.at(i).name, out);
                          });
  }
  // As load_llama reads a folder, one tensor at a time.
  SPW_CHECK(fs::is_directory(dir), dir,
            "not a model directory (expected config.json and model.safetensors) nor a GGUF file");
  const std::string config_path = (fs::path(dir) / "config.json").string();
  const LlamaConfig config = load_config(config_path);
  auto files = std::make_shared<const WeightDirectory>(dir);
  check_weight_names(*files, config, config_path);
  StreamedBase base = read_quantized(start(config, lora, storage), config, merged,
                                     [files, specs = parameter_specs(config)](size_t i, std::span<float> out) {
                                       const ParameterSpec& s = specs.at(i);
                                       files->read_tensor_as_f32(s.name, s.shape, out);
                                     });
  check_tied_head(*files, base.weights, config_path);
  return base;
}

}  // namespace spillway::model
