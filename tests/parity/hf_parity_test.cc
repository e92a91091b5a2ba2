// spillway against Hugging Face transformers and tokenizers, through the
// fixtures tests/parity/make_fixtures.py wrote (committed beside this file):
// two tiny random LlamaForCausalLM checkpoints with transformers' logits,
// loss, gradients, one torch.optim.AdamW step and a greedy generation, and a
// byte-level BPE tokenizer.json with its encodings of 2000 strings.
//
// The model references are transformers run in float64 (see the script), so
// the float32 checks measure spillway's own rounding; the float64 run of the
// same graph shows what is left once that rounding is gone.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "base/status.h"
#include "device/cpu/cpu_device.h"
#include "exec/executor.h"
#include "graph/autodiff.h"
#include "infer/generate.h"
#include "infer/llama_decoder.h"
#include "model/llama_graph.h"
#include "model/llama_weights_io.h"
#include "model/safetensors.h"
#include "model/tokenizer_json.h"
#include "testing/numeric.h"
#include "train/optimizer.h"
#include "train/train_step.h"

namespace spillway {
namespace {

namespace fs = std::filesystem;

const fs::path kFixtures = fs::path(__FILE__).parent_path() / "fixtures";

// The script's batch and its AdamW hyper-parameters.
constexpr int64_t kBatch = 2, kSeq = 24;
constexpr double kLr = 1e-2;

// What the script stored for one model, converted to the types the checks use.
struct Expected {
  explicit Expected(const fs::path& folder) : file((folder / "expected.safetensors").string()) {}

  std::vector<double> floats(const std::string& name) const {
    const SafetensorsTensor& t = file.tensor(name);
    std::vector<float> f(static_cast<size_t>(t.shape.numel()));
    file.read_tensor_as_f32(name, std::span<float>(f));
    return std::vector<double>(f.begin(), f.end());
  }
  std::vector<int32_t> ints(const std::string& name) const {
    const SafetensorsTensor& t = file.tensor(name);
    SPW_CHECK(t.dtype == DType::i32, file.path(), name, " is not int32");
    std::vector<int32_t> v(static_cast<size_t>(t.shape.numel()));
    std::memcpy(v.data(), t.bytes.data(), v.size() * sizeof(int32_t));
    return v;
  }

  SafetensorsFile file;
};

class HfModelParity : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    folder_ = kFixtures / GetParam();
    weights_ = model::load_llama(folder_.string());
    expected_ = std::make_unique<Expected>(folder_);
    tokens_ = expected_->ints("tokens");
    targets_ = expected_->ints("targets");
    ASSERT_EQ(tokens_.size(), static_cast<size_t>(kBatch * kSeq));
  }

  // spillway's float32 training step: loss and every parameter's gradient.
  model::LlamaWeights float32_gradients(double* loss) {
    auto space = make_host_heap_space("parity:f32", MemorySpace::kUnlimited);
    train::TrainStep step(weights_.config(), kBatch, kSeq, *space);
    *loss = step.run(weights_, tokens_, targets_);
    model::LlamaWeights grads = model::LlamaWeights::zeros(weights_.config());
    step.write_gradients(grads, 1.0f, false);
    return grads;
  }

  fs::path folder_;
  model::LlamaWeights weights_;
  std::unique_ptr<Expected> expected_;
  std::vector<int32_t> tokens_, targets_;
};

std::vector<double> widen(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

TEST_P(HfModelParity, Float32LogitsAndLoss) {
  auto space = make_host_heap_space("parity:f32", MemorySpace::kUnlimited);
  train::TrainStep forward(weights_.config(), kBatch, kSeq, *space, /*with_backward=*/false);
  const double loss = forward.run(weights_, tokens_, targets_);
  const std::vector<float> logits(forward.logits().begin(), forward.logits().end());

  const double logits_error = testing::rel_error(logits, expected_->floats("logits"));
  const double want_loss = std::stod(expected_->file.metadata().at("loss_float64"));
  const double loss_error = std::abs(loss - want_loss) / want_loss;
  std::cout << GetParam() << " f32: logits rel error " << logits_error << ", loss rel error " << loss_error
            << "\n";
  EXPECT_LT(logits_error, 1e-5);
  EXPECT_LT(loss_error, 1e-5) << "loss " << loss << ", transformers " << want_loss;
}

TEST_P(HfModelParity, Float32GradientOfEveryParameter) {
  double loss = 0;
  const model::LlamaWeights grads = float32_gradients(&loss);
  const double want_loss = std::stod(expected_->file.metadata().at("loss_float64"));
  EXPECT_LT(std::abs(loss - want_loss) / want_loss, 1e-5) << "training step's loss " << loss;
  double worst = 0;
  std::string worst_name;
  for (const model::NamedTensor& g : grads.tensors()) {
    const double err = testing::rel_error(g.data, expected_->floats("grad." + g.name));
    EXPECT_LT(err, 1e-5) << g.name;
    if (err > worst) {
      worst = err;
      worst_name = g.name;
    }
  }
  // transformers stores one gradient per parameter it has: the tied model
  // has no lm_head, and its embedding gradient is the sum of both uses.
  size_t stored = 0;
  for (const SafetensorsTensor& t : expected_->file.tensors()) stored += t.name.rfind("grad.", 0) == 0;
  EXPECT_EQ(stored, grads.tensors().size());
  std::cout << GetParam() << " f32: worst gradient rel error " << worst << " (" << worst_name << ")\n";
}

// The same graph in float64: with spillway's rounding gone, what remains is
// the reference's own (transformers rounds a few intermediates to float32
// even in float64, and the fixture stores float32: 2e-7 on logits, 4e-7 on
// gradients), so a real difference in the model could not hide under 1e-5.
TEST_P(HfModelParity, Float64GraphMatchesToTheReferencesPrecision) {
  graph::Graph g;
  graph::Builder b(g, DType::f64);
  model::LlamaGraph m = model::build_llama(b, weights_.config(), kBatch, kSeq);
  g.mark_output(m.loss);
  g.mark_output(m.logits);
  graph::Gradients grads = graph::append_backward(b, m.loss, m.parameters);
  auto space = make_host_heap_space("parity:f64", MemorySpace::kUnlimited);
  exec::CpuExecutor exec(g, *space);
  std::vector<std::vector<double>> params;
  for (const model::NamedTensor& t : weights_.tensors()) params.push_back(widen(t.data));
  exec.bind(m.tokens, std::span<int32_t>(tokens_));
  exec.bind(m.targets, std::span<int32_t>(targets_));
  for (size_t i = 0; i < params.size(); ++i) exec.bind(m.parameters[i], std::span<double>(params[i]));
  exec.run();

  std::span<const double> logits = exec.read<double>(m.logits);
  const double logits_error =
      testing::rel_error(std::vector<double>(logits.begin(), logits.end()), expected_->floats("logits"));
  const double want_loss = std::stod(expected_->file.metadata().at("loss_float64"));
  const double loss_error = std::abs(exec.read<double>(m.loss)[0] - want_loss) / want_loss;
  double worst = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    std::span<const double> gi = exec.read<double>(grads[m.parameters[i]]);
    const std::string& name = weights_.tensors()[i].name;
    const double err =
        testing::rel_error(std::vector<double>(gi.begin(), gi.end()), expected_->floats("grad." + name));
    EXPECT_LT(err, 2e-6) << name;
    worst = std::max(worst, err);
  }
  std::cout << GetParam() << " f64: logits rel error " << logits_error << ", loss rel error " << loss_error
            << ", worst gradient rel error " << worst << "\n";
  EXPECT_LT(logits_error, 1e-6);
  EXPECT_LT(loss_error, 1e-6);
}

// Decay only on matrices, torch.optim.AdamW's arithmetic, no clipping.
void adamw_step(model::LlamaWeights& params, const model::LlamaWeights& grads) {
  train::AdamW opt(params.config());
  opt.beta1 = 0.9;
  opt.beta2 = 0.95;
  opt.eps = 1e-8;
  opt.weight_decay = 0.1;
  opt.step(params, grads, kLr);
}

// End to end: spillway's own gradients through spillway's AdamW.
TEST_P(HfModelParity, OneAdamWStepFromOwnGradients) {
  double loss = 0;
  model::LlamaWeights grads = float32_gradients(&loss);
  // A clip at 0 is "off"; the norm it reports is transformers' too.
  const double norm = train::clip_grad_norm(grads, 0.0);
  double want_sq = 0;
  for (const model::NamedTensor& g : grads.tensors()) {
    for (double x : expected_->floats("grad." + g.name)) want_sq += x * x;
  }
  EXPECT_NEAR(norm, std::sqrt(want_sq), 1e-5 * std::sqrt(want_sq));

  adamw_step(weights_, grads);
  double worst = 0;
  for (const model::NamedTensor& p : weights_.tensors()) {
    const double err = testing::rel_error(p.data, expected_->floats("after_adamw." + p.name));
    EXPECT_LT(err, 1e-5) << p.name;
    worst = std::max(worst, err);
  }
  std::cout << GetParam() << " AdamW from spillway's gradients: worst parameter rel error " << worst << "\n";
}

// The optimizer alone: transformers' gradients through spillway's AdamW.
TEST_P(HfModelParity, OneAdamWStepFromTransformersGradients) {
  model::LlamaWeights grads = model::LlamaWeights::zeros(weights_.config());
  for (model::NamedTensor& g : grads.tensors()) {
    const std::vector<double> want = expected_->floats("grad." + g.name);
    g.data.assign(want.begin(), want.end());
  }
  adamw_step(weights_, grads);
  double worst = 0;
  for (const model::NamedTensor& p : weights_.tensors()) {
    const double err = testing::rel_error(p.data, expected_->floats("after_adamw." + p.name));
    EXPECT_LT(err, 1e-6) << p.name;
    worst = std::max(worst, err);
  }
  std::cout << GetParam() << " AdamW from transformers' gradients: worst parameter rel error " << worst << "\n";
}

TEST_P(HfModelParity, GreedyGenerationIsTokenForToken) {
  const std::vector<int32_t> prompt = expected_->ints("prompt");
  const std::vector<int32_t> want = expected_->ints("generated");
  infer::LlamaDecoder decoder(weights_, static_cast<int64_t>(prompt.size() + want.size()));
  infer::GenerateOptions options;
  options.max_new_tokens = static_cast<int64_t>(want.size());
  options.sampling.temperature = 0;  // greedy
  EXPECT_EQ(infer::generate(decoder, prompt, options), want);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfModelParity,
                         ::testing::Values("llama_gqa_llama3_rope", "llama_tied_default_rope"));

// --- tokenizer ---------------------------------------------------------------

std::string escaped(const std::string& text) {
  std::ostringstream out;
  for (unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out << c;
    } else {
      out << "\\x" << "0123456789abcdef"[c >> 4] << "0123456789abcdef"[c & 15];
    }
  }
  return out.str();
}

TEST(HfTokenizerParity, EncodesAndDecodesEveryStringAsTokenizersDoes) {
  const BpeTokenizer tok = load_tokenizer_json((kFixtures / "tokenizer" / "tokenizer.json").string());
  std::ifstream in(kFixtures / "tokenizer" / "cases.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json fixture = nlohmann::json::parse(in);
  const nlohmann::json& cases = fixture.at("cases");
  ASSERT_EQ(cases.size(), 2000u);
  EXPECT_EQ(tok.vocab_size(), fixture.at("about").at("vocab_size").get<int32_t>());

  int failures = 0, with_specials = 0;
  for (const nlohmann::json& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    const auto ids = c.at("ids").get<std::vector<int32_t>>();
    const auto ids_plain = c.at("ids_special_as_text").get<std::vector<int32_t>>();
    with_specials += ids != ids_plain;
    const std::vector<int32_t> got = tok.encode(text, /*allow_special=*/true);
    const std::vector<int32_t> got_plain = tok.encode(text, /*allow_special=*/false);
    const bool ok = got == ids && got_plain == ids_plain && tok.decode(ids) == text && tok.decode(ids_plain) == text;
    if (!ok && ++failures <= 10) {
      ADD_FAILURE() << "text \"" << escaped(text) << "\": specials " << ::testing::PrintToString(got)
                    << " want " << ::testing::PrintToString(ids) << "; as text "
                    << ::testing::PrintToString(got_plain) << " want " << ::testing::PrintToString(ids_plain);
    }
  }
  EXPECT_EQ(failures, 0) << "of " << cases.size() << " strings";
  EXPECT_GT(with_specials, 0) << "the fixture should exercise special tokens";
}

// --- the other direction: a checkpoint spillway writes ----------------------

// Writes, for an untied and a tied model, a folder with save_llama's
// config.json and model.safetensors and a logits.safetensors (tokens [2, 17]
// and spillway's float32 logits) that make_fixtures.py
// --check-spillway-checkpoint compares transformers against. The folders go
// to $SPILLWAY_PARITY_CHECKPOINT_DIR when it is set, else to a temporary
// folder that is removed; either way spillway must read back what it wrote.
TEST(SpillwayCheckpointForTransformers, WritesModelAndLogits) {
  const char* env = std::getenv("SPILLWAY_PARITY_CHECKPOINT_DIR");
  const bool keep = env != nullptr && *env != '\0';
  const fs::path root =
      keep ? fs::path(env) : fs::temp_directory_path() / ("spillway_parity_" + std::to_string(::getpid()));
  constexpr int64_t batch = 2, seq = 17;

  for (const bool tied : {false, true}) {
    model::LlamaConfig c;
    c.vocab_size = 97;
    c.hidden_size = 48;
    c.intermediate_size = 80;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = tied ? 4 : 2;
    c.max_position_embeddings = 64;
    c.rms_norm_eps = 1e-5;
    c.tie_word_embeddings = tied;
    c.rope_theta = tied ? 10000.0 : 500000.0;
    c.rope_scaling.llama3 = !tied;
    c.rope_scaling.original_max_position_embeddings = 8;
    model::LlamaWeights weights = model::LlamaWeights::random(c, tied ? 21 : 20, 0.1);
    uint64_t seed = 300;
    for (model::NamedTensor& t : weights.tensors()) {
      if (t.shape.rank() != 1) continue;
      const auto gains = testing::random_vector(t.shape.numel(), seed++, 0.8, 1.2);
      t.data.assign(gains.begin(), gains.end());
    }
    std::vector<int32_t> tokens(static_cast<size_t>(batch * seq));
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 37 + 11) % c.vocab_size);

    auto space = make_host_heap_space("parity:f32", MemorySpace::kUnlimited);
    train::TrainStep forward(c, batch, seq, *space, /*with_backward=*/false);
    forward.run(weights, tokens, tokens);
    const std::vector<float> logits(forward.logits().begin(), forward.logits().end());

    const fs::path dir = root / (tied ? "tied" : "untied");
    model::save_llama(dir.string(), weights);
    SafetensorsWriter writer;
    writer.add("tokens", DType::i32, Shape{batch, seq}, tokens.data());
    writer.add("logits", DType::f32, Shape{batch, seq, c.vocab_size}, logits.data());
    writer.write((dir / "logits.safetensors").string());

    const model::LlamaWeights reread = model::load_llama(dir.string());
    ASSERT_EQ(reread.tensors().size(), weights.tensors().size());
    for (size_t i = 0; i < weights.tensors().size(); ++i) {
      EXPECT_EQ(reread.tensors()[i].data, weights.tensors()[i].data) << weights.tensors()[i].name;
    }
    EXPECT_EQ(reread.config().tie_word_embeddings, tied);
    EXPECT_EQ(reread.config().rope_scaling.llama3, !tied);
  }
  if (keep) {
    std::cout << "wrote " << (root / "untied") << " and " << (root / "tied") << "; check them with\n"
              << "  python tests/parity/make_fixtures.py --check-spillway-checkpoint " << (root / "untied").string()
              << " " << (root / "tied").string() << "\n";
  } else {
    fs::remove_all(root);
  }
}

}  // namespace
}  // namespace spillway
