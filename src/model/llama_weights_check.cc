#include "model/llama_weights_check.h"

#include <algorithm>
#include <charconv>
#include <optional>
#include <set>
#include <vector>

#include "base/status.h"

namespace spillway::model {

namespace {

constexpr std::string_view kLayerPrefix = "model.layers.";
constexpr std::string_view kHead = "lm_head.weight";
constexpr std::string_view kEmbed = "model.embed_tokens.weight";

// The N of "model.layers.N.<anything>", if the name has that form.
std::optional<int64_t> layer_index(std::string_view name) {
  if (!name.starts_with(kLayerPrefix)) return std::nullopt;
  const std::string_view rest = name.substr(kLayerPrefix.size());
  int64_t n = -1;
  auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), n);
  if (ec != std::errc() || end == rest.data() || end == rest.data() + rest.size() || *end != '.') return std::nullopt;
  return n;
}

}  // namespace

bool is_ignorable_tensor(std::string_view name) { return name.ends_with("rotary_emb.inv_freq"); }

void check_weight_names(const WeightDirectory& files, const LlamaConfig& config, const std::string& config_path) {
  const std::vector<std::string> names = files.names();
  int64_t layers = 0;
  for (const std::string& name : names) {
    if (auto i = layer_index(name)) layers = std::max(layers, *i + 1);
  }
  // Fewer layers in the config would run a truncated model without a word;
  // more would fail later on the first missing tensor, less clearly.
  SPW_CHECK(layers == config.num_hidden_layers, config_path, "num_hidden_layers is ", config.num_hidden_layers,
            " but the weights in ", files.path(), " hold ", layers, " layers");
  std::set<std::string, std::less<>> expected;
  for (const ParameterSpec& p : parameter_specs(config)) expected.insert(p.name);
  for (const std::string& name : names) {
    if (expected.contains(name) || is_ignorable_tensor(name)) continue;
    if (name == kHead && config.tie_word_embeddings) continue;  // compared with the embedding once read
    throw Error(files.at(name).file->path(),
                "tensor '" + name + "' is not part of the model " + config_path + " describes");
  }
}

void check_tied_head(const WeightDirectory& files, const LlamaWeights& weights, const std::string& config_path) {
  if (!weights.config().tie_word_embeddings) return;
  const WeightEntry* head = files.find(kHead);
  if (head == nullptr) return;
  const NamedTensor& embed = weights.at(kEmbed);
  std::vector<float> data(embed.data.size());
  head->file->read_tensor_as_f32(kHead, embed.shape, data);
  SPW_CHECK(data == embed.data, head->file->path(), "tensor '", kHead, "' differs from '", kEmbed, "' but ",
            config_path, " ties them (tie_word_embeddings: true), which would discard it");
}

}  // namespace spillway::model
