// `spillway convert` through the command line: GGUF and model folders in,
// a Hugging Face folder out that loads back to the same weights; a GGUF it
// writes is a model finetune, eval and generate take directly.
#include <gtest/gtest.h>

#include "e2e/e2e_util.h"
#include "model/gguf_llama.h"
#include "model/llama_config_json.h"
#include "model/llama_weights_io.h"
#include "model/tokenizer.h"

namespace spillway::e2e {
namespace {

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

// A minimal F32 LLaMA GGUF holding `w`'s values as they are (the layout
// details are model/gguf_test's business; here only the plumbing matters).
std::string f32_llama_gguf(const model::LlamaWeights& w) {
  const model::LlamaConfig& c = w.config();
  std::string kv;
  int kv_count = 0;
  auto u32 = [&](const std::string& key, int64_t v) {
    put_string(kv, key);
    put<uint32_t>(kv, 4);
    put<uint32_t>(kv, static_cast<uint32_t>(v));
    ++kv_count;
  };
  auto f32 = [&](const std::string& key, double v) {
    put_string(kv, key);
    put<uint32_t>(kv, 6);
    put<float>(kv, static_cast<float>(v));
    ++kv_count;
  };
  put_string(kv, "general.architecture");
  put<uint32_t>(kv, 8);
  put_string(kv, "llama");
  ++kv_count;
  u32("llama.context_length", c.max_position_embeddings);
  u32("llama.embedding_length", c.hidden_size);
  u32("llama.block_count", c.num_hidden_layers);
  u32("llama.feed_forward_length", c.intermediate_size);
  u32("llama.attention.head_count", c.num_attention_heads);
  u32("llama.attention.head_count_kv", c.num_key_value_heads);
  f32("llama.rope.freq_base", c.rope_theta);
  f32("llama.attention.layer_norm_rms_epsilon", c.rms_norm_eps);

  std::string out = "GGUF";
  put<uint32_t>(out, 3);
  put<uint64_t>(out, w.tensors().size());
  put<uint64_t>(out, static_cast<uint64_t>(kv_count));
  out += kv;
  uint64_t offset = 0;
  for (const auto& t : w.tensors()) {
    put_string(out, model::gguf_tensor_name(t.name));
    put<uint32_t>(out, static_cast<uint32_t>(t.shape.rank()));
    for (int d = t.shape.rank() - 1; d >= 0; --d) put<uint64_t>(out, static_cast<uint64_t>(t.shape[d]));
    put<uint32_t>(out, 0);
    put<uint64_t>(out, offset);
    offset += (t.data.size() * 4 + 31) / 32 * 32;
  }
  out.resize((out.size() + 31) / 32 * 32, '\0');
  for (const auto& t : w.tensors()) {
    out.append(reinterpret_cast<const char*>(t.data.data()), t.data.size() * 4);
    out.resize((out.size() + 31) / 32 * 32, '\0');
  }
  return out;
}

model::LlamaConfig micro() {
  return model::config_from_json(nlohmann::json::parse(micro_config_json()), "micro");
}

void expect_same_weights(const model::LlamaWeights& a, const model::LlamaWeights& b) {
  EXPECT_EQ(model::config_to_json(a.config()), model::config_to_json(b.config()));
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (size_t k = 0; k < a.tensors().size(); ++k) {
    EXPECT_EQ(a.tensors()[k].data, b.tensors()[k].data) << a.tensors()[k].name;
  }
}

TEST(Convert, GgufFileBecomesAHuggingFaceFolder) {
  ScratchDir dir("convert_gguf");
  model::LlamaWeights w = model::LlamaWeights::random(micro(), 5, 0.1);
  write_file(dir / "m.gguf", f32_llama_gguf(w));
  CommandResult r = run_spillway("convert --from " + (dir / "m.gguf") + " --to " + (dir / "hf"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("GGUF v3"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(dir.path() / "hf" / "config.json"));
  EXPECT_TRUE(fs::exists(dir.path() / "hf" / "model.safetensors"));
  expect_same_weights(model::load_llama(dir / "hf"), model::load_gguf_llama(dir / "m.gguf"));
}

TEST(Convert, FolderAndRunFolderCopyWeightsAndTokenizer) {
  ScratchDir dir("convert_folder");
  model::LlamaWeights w = model::LlamaWeights::random(micro(), 6, 0.1);
  model::save_llama(dir / "run/step-0000002", w);
  write_file(dir / "run/step-0000002/tokenizer.json", "{\"stand-in\": true}\n");
  write_file(dir / "run/latest", "step-0000002\n");
  CommandResult r = run_spillway("convert --from " + (dir / "run") + " --to " + (dir / "out"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  expect_same_weights(model::load_llama(dir / "out"), w);
  EXPECT_EQ(read_file(dir / "out/tokenizer.json"), "{\"stand-in\": true}\n");

  // A non-empty destination is refused rather than mixed with the new files.
  r = run_spillway("convert --from " + (dir / "run") + " --to " + (dir / "out"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("already exists and is not an empty folder"), std::string::npos) << r.out;
}

TEST(Convert, BadGgufIsOneErrorLineNamingTheFile) {
  ScratchDir dir("convert_bad");
  model::LlamaWeights w = model::LlamaWeights::random(micro(), 7, 0.1);
  std::string bytes = f32_llama_gguf(w);
  write_file(dir / "cut.gguf", bytes.substr(0, bytes.size() - 100));
  CommandResult r = run_spillway("convert --from " + (dir / "cut.gguf") + " --to " + (dir / "out"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("spillway: " + (dir / "cut.gguf") + ": tensor '"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("past the end"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir.path() / "out" / "model.safetensors"));

  write_file(dir / "text.gguf", "hello, not a model");
  r = run_spillway("convert --from " + (dir / "text.gguf") + " --to " + (dir / "out"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("text.gguf: not a GGUF file"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace spillway::e2e

namespace spillway::e2e {
namespace {

// A GGUF file is a model for finetune, eval and generate as it stands:
// a run's checkpoint written as F32 GGUF fine-tunes into a run that keeps
// the tokenizer, and evaluates to the checkpoint's loss exactly.
TEST(Convert, AGgufFileIsFineTunedEvaluatedAndGeneratedFromDirectly) {
  ScratchDir dir("convert_gguf_model");
  write_file(dir / "corpus.txt", make_corpus(200, 9));
  write_file(dir / "micro.json", micro_config_json());
  const std::string data = " --data " + (dir / "corpus.txt") + " --separator % ";
  CommandResult r = run_spillway("train --config " + (dir / "micro.json") + data +
                                 "--vocab 300 --steps 2 --batch 2 --seq 16 --sample-tokens 0 --quiet -o " + (dir / "run"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = run_spillway("convert --from " + (dir / "run") + " --to " + (dir / "m.gguf") + " --type f32");
  ASSERT_EQ(r.exit_code, 0) << r.out;

  r = run_spillway("finetune -m " + (dir / "m.gguf") + data +
                   "--steps 2 --batch 2 --seq 16 --sample-tokens 0 --quiet -o " + (dir / "ft"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(fs::exists(dir / "ft/step-0000002/model.safetensors"));
  const std::unique_ptr<Tokenizer> carried = load_tokenizer(dir / "ft/step-0000002");
  const std::unique_ptr<Tokenizer> trained = load_tokenizer(dir / "run/step-0000002");
  const std::string text = read_file(dir / "corpus.txt").substr(0, 2000);
  EXPECT_EQ(carried->vocab_size(), trained->vocab_size());
  EXPECT_EQ(carried->encode_text(text), trained->encode_text(text));
  EXPECT_EQ(carried->eos_id(), trained->eos_id());

  const std::string eval = " --data " + (dir / "corpus.txt") + " --json --device cpu";
  const CommandResult from_gguf = run_spillway("eval -m " + (dir / "m.gguf") + eval);
  const CommandResult from_run = run_spillway("eval -m " + (dir / "run") + eval);
  ASSERT_EQ(from_gguf.exit_code, 0) << from_gguf.out;
  ASSERT_EQ(from_run.exit_code, 0) << from_run.out;
  EXPECT_EQ(from_gguf.out, from_run.out);

  r = run_spillway("generate -m " + (dir / "m.gguf") + " -p 'the cat' -n 4 --temperature 0 --device cpu");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(r.out.starts_with("the cat")) << r.out;
}

}  // namespace
}  // namespace spillway::e2e
