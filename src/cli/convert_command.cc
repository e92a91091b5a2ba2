#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "base/atomic_file.h"
#include "base/status.h"
#include "cli/commands.h"
#include "model/gguf.h"
#include "model/gguf_llama.h"
#include "model/llama_weights_io.h"
#include "train/checkpoint.h"

namespace spillway::cli {

namespace {

namespace fs = std::filesystem;

struct ConvertArgs {
  std::string from;
  std::string to;
};

std::string read_whole_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  SPW_CHECK(in.good(), path.string(), "cannot open");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

int run_convert(const ConvertArgs& a) {
  SPW_CHECK(fs::exists(a.from), a.from, "no such GGUF file or model folder");
  // Writing into a folder that already holds files could leave a tokenizer
  // or weight shard of another model beside the new one.
  SPW_CHECK(!fs::exists(a.to) || (fs::is_directory(a.to) && fs::is_empty(a.to)), a.to,
            "already exists and is not an empty folder; choose a new output folder");

  model::LlamaWeights weights;
  std::string tokenizer_text;
  std::string kind;
  if (fs::is_directory(a.from)) {
    const fs::path dir = train::resolve_checkpoint(a.from);
    weights = model::load_llama(dir.string());
    if (fs::exists(dir / "tokenizer.json")) tokenizer_text = read_whole_file(dir / "tokenizer.json");
    kind = "model folder " + dir.string();
  } else {
    GgufFile gguf(a.from);
    weights = model::load_gguf_llama(gguf);
    kind = "GGUF v" + std::to_string(gguf.version()) + " file " + a.from;
  }

  model::save_llama(a.to, weights);
  if (!tokenizer_text.empty()) write_text_file_atomically((fs::path(a.to) / "tokenizer.json").string(), tokenizer_text);

  const model::LlamaConfig& c = weights.config();
  std::printf("%s: %.1fM parameters (%lld layers, hidden %lld, vocab %lld) from %s%s\n", a.to.c_str(),
              static_cast<double>(weights.numel()) / 1e6, static_cast<long long>(c.num_hidden_layers),
              static_cast<long long>(c.hidden_size), static_cast<long long>(c.vocab_size), kind.c_str(),
              tokenizer_text.empty() ? ", no tokenizer" : ", with its tokenizer.json");
  return 0;
}

}  // namespace

Runner add_convert(CLI::App& app) {
  auto a = std::make_shared<ConvertArgs>();
  CLI::App* cmd = app.add_subcommand(
      "convert", "convert a llama.cpp GGUF file or a model folder into a Hugging Face model folder");
  cmd->add_option("--from", a->from, "a LLaMA .gguf file (F32, F16, BF16 or Q8_0 tensors), a model folder, or a run")
      ->required();
  cmd->add_option("--to", a->to, "output folder (config.json, model.safetensors, tokenizer.json)")->required();
  return [a] { return run_convert(*a); };
}

}  // namespace spillway::cli
