#include "model/lora.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "base/status.h"
#include "graph/builder.h"
#include "model/llama_graph.h"

namespace spillway::model {

bool LoraConfig::targets_projection(std::string_view projection) const {
  return std::find(targets.begin(), targets.end(), projection) != targets.end();
}

std::vector<std::string> parse_lora_targets(std::string_view list, std::string_view what) {
  std::vector<bool> chosen(kLoraProjections.size(), false);
  size_t at = 0;
  while (at <= list.size()) {
    const size_t comma = std::min(list.find(',', at), list.size());
    std::string_view name = list.substr(at, comma - at);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    at = comma + 1;
    if (name.empty()) continue;
    if (name == "all") {
      std::fill(chosen.begin(), chosen.end(), true);
      continue;
    }
    const auto it = std::find_if(kLoraProjections.begin(), kLoraProjections.end(), [&](std::string_view p) {
      return p == name || p.substr(0, p.size() - 5) == name;  // "q" for "q_proj"
    });
    SPW_CHECK(it != kLoraProjections.end(), what, "'", name,
              "' is not a projection LoRA can adapt: q, k, v, o, gate, up, down (or all)");
    chosen[static_cast<size_t>(it - kLoraProjections.begin())] = true;
  }
  std::vector<std::string> targets;
  for (size_t i = 0; i < chosen.size(); ++i) {
    if (chosen[i]) targets.emplace_back(kLoraProjections[i]);
  }
  SPW_CHECK(!targets.empty(), what, "names no projection; give some of q, k, v, o, gate, up, down (or all)");
  return targets;
}

void check_lora_config(const LoraConfig& lora, std::string_view what) {
  SPW_CHECK(lora.rank > 0 && lora.rank <= 65536, what, "rank ", lora.rank, " must be 1 to 65536");
  SPW_CHECK(std::isfinite(lora.alpha) && lora.alpha > 0, what, "alpha ", lora.alpha, " must be a positive number");
  SPW_CHECK(std::isfinite(lora.dropout) && lora.dropout >= 0 && lora.dropout < 1, what, "dropout ", lora.dropout,
            " must be at least 0 and below 1");
  SPW_CHECK(!lora.targets.empty(), what, "targets no projection");
  for (const std::string& t : lora.targets) {
    SPW_CHECK(std::find(kLoraProjections.begin(), kLoraProjections.end(), t) != kLoraProjections.end(), what,
              "target '", t, "' is not one of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj");
  }
}

std::vector<ParameterSpec> lora_specs(const LlamaConfig& config, const LoraConfig& lora) {
  graph::Graph g;
  graph::Builder b(g, DType::f32);
  const LlamaGraph m = build_llama(b, config, 1, 1, {.lora = &lora});
  std::vector<ParameterSpec> specs;
  for (graph::Value a : m.adapters) specs.push_back({g.value(a).name, g.value(a).shape});
  return specs;
}

LoraWeights LoraWeights::zeros(const LlamaConfig& config, const LoraConfig& lora) {
  LoraWeights w;
  w.lora_ = lora;
  for (ParameterSpec& s : lora_specs(config, lora)) {
    const auto n = static_cast<size_t>(s.shape.numel());
    w.tensors_.push_back({std::move(s.name), std::move(s.shape), std::vector<float>(n, 0.0f)});
  }
  return w;
}

LoraWeights LoraWeights::init(const LlamaConfig& config, const LoraConfig& lora, uint64_t seed) {
  LoraWeights w = zeros(config, lora);
  for (size_t i = 0; i < w.tensors_.size(); ++i) {
    NamedTensor& t = w.tensors_[i];
    if (t.name.ends_with(".lora_B.weight")) continue;  // B starts at zero: the adapter adds nothing yet
    const double bound = 1.0 / std::sqrt(static_cast<double>(t.shape[1]));
    std::mt19937_64 rng(seed * 1000003ull + i);
    std::uniform_real_distribution<double> uniform(-bound, bound);
    for (float& x : t.data) x = static_cast<float>(uniform(rng));
  }
  return w;
}

const NamedTensor& LoraWeights::at(std::string_view name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return t;
  }
  throw Error(std::string(name), "no such LoRA adapter tensor");
}

int64_t LoraWeights::numel() const {
  int64_t n = 0;
  for (const auto& t : tensors_) n += t.shape.numel();
  return n;
}

namespace {

// W += scaling * B A, summed in double.
void fold_adapter(NamedTensor& w, const NamedTensor& a, const NamedTensor& up, double scaling) {
  const std::string module = a.name.substr(0, a.name.size() - std::string_view(".lora_A.weight").size());
  const int64_t out = w.shape[0], in = w.shape[1], r = a.shape[0];
  SPW_CHECK(up.name == module + ".lora_B.weight" && a.shape[1] == in && up.shape[0] == out && up.shape[1] == r,
            a.name, "does not pair with ", up.name, " over ", w.name);
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t j = 0; j < in; ++j) {
      double sum = 0;
      for (int64_t k = 0; k < r; ++k) {
        sum += static_cast<double>(up.data[static_cast<size_t>(o * r + k)]) * a.data[static_cast<size_t>(k * in + j)];
      }
      w.data[static_cast<size_t>(o * in + j)] += static_cast<float>(scaling * sum);
    }
  }
}

}  // namespace

LlamaWeights merge_lora(const LlamaWeights& base, const LoraWeights& adapters) {
  LlamaWeights merged = base;
  const auto& t = adapters.tensors();
  for (size_t i = 0; i + 1 < t.size(); i += 2) {
    const std::string module = t[i].name.substr(0, t[i].name.size() - std::string_view(".lora_A.weight").size());
    fold_adapter(merged.at(module + ".weight"), t[i], t[i + 1], adapters.lora().scaling());
  }
  return merged;
}

void merge_lora_into(NamedTensor& w, const LoraWeights& adapters) {
  constexpr std::string_view kWeight = ".weight";
  if (!w.name.ends_with(kWeight)) return;
  const std::string a_name = w.name.substr(0, w.name.size() - kWeight.size()) + ".lora_A.weight";
  const auto& t = adapters.tensors();
  for (size_t i = 0; i + 1 < t.size(); i += 2) {
    if (t[i].name == a_name) return fold_adapter(w, t[i], t[i + 1], adapters.lora().scaling());
  }
}

}  // namespace spillway::model
