#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "base/status.h"
#include "cli/commands.h"
#include "model/gguf.h"
#include "model/gguf_llama.h"
#include "model/llama_weights_io.h"
#include "model/lora.h"
#include "model/lora_io.h"
#include "model/tokenizer.h"
#include "model/tokenizer_files.h"
#include "model/tokenizer_vocab.h"
#include "train/checkpoint.h"

namespace spillway::cli {

namespace {

namespace fs = std::filesystem;

struct ConvertArgs {
  std::string from;
  std::string to;
  std::string type = "auto";
  std::string adapter;
};

// The files of a model folder that hold its tokenizer and say how to use it:
// copied as they are from folder to folder.
constexpr const char* kTokenizerFiles[] = {"tokenizer.json", "tokenizer.model", "tokenizer_config.json",
                                           "special_tokens_map.json", "generation_config.json"};

// A folder holds a tokenizer, or a GGUF file carries one.
bool has_tokenizer(const std::string& source) {
  if (fs::is_directory(source)) return fs::exists(fs::path(source) / "tokenizer.json") || fs::exists(fs::path(source) / "tokenizer.model");
  return GgufFile(source).find("tokenizer.ggml.model") != nullptr;
}

GgmlType gguf_type(const std::string& type, DType stored) {
  if (type == "f32") return GgmlType::f32;
  if (type == "f16") return GgmlType::f16;
  if (type == "bf16") return GgmlType::bf16;
  if (type == "q8_0") return GgmlType::q8_0;
  return stored == DType::f32 ? GgmlType::f32 : stored == DType::f16 ? GgmlType::f16 : GgmlType::bf16;
}

DType folder_dtype(const std::string& type, DType stored) {
  if (type == "f32") return DType::f32;
  if (type == "f16") return DType::f16;
  if (type == "bf16") return DType::bf16;
  SPW_CHECK(type == "auto", "--type", type, " is a GGUF type; a model folder holds f32, f16 or bf16");
  return stored;
}

int run_convert(const ConvertArgs& a) {
  SPW_CHECK(fs::exists(a.from), a.from, "no such GGUF file or model folder");
  const bool to_gguf = fs::path(a.to).extension() == ".gguf";
  // Writing into a folder that already holds files could leave a tokenizer
  // or weight shard of another model beside the new one.
  SPW_CHECK(!fs::exists(a.to) || (!to_gguf && fs::is_directory(a.to) && fs::is_empty(a.to)), a.to,
            to_gguf ? "already exists; choose a new output file" : "already exists and is not an empty folder; choose a new output folder");
  const std::string source = train::resolve_checkpoint(a.from);
  const bool from_folder = fs::is_directory(source);
  const std::string kind =
      from_folder ? "model folder " + source : "GGUF v" + std::to_string(GgufFile(source).version()) + " file " + source;
  const DType stored = model::stored_dtype(source);
  model::LlamaWeights weights = model::load_llama(source);
  // An adapter (given, or a LoRA run's own beside its weights) is merged:
  // the output is the tuned model as a plain one.
  const std::string adapter = !a.adapter.empty()                                     ? a.adapter
                              : from_folder && model::holds_peft_adapter(source) ? source
                                                                                   : std::string();
  if (!adapter.empty()) weights = model::merge_lora(weights, model::load_peft_adapter(adapter, weights.config()));
  const bool tokenizer_there = has_tokenizer(source);
  // A folder's tokenizer files are copied; a GGUF's tokenizer, or one going
  // into a GGUF, is read.
  std::unique_ptr<Tokenizer> tokenizer = tokenizer_there && (to_gguf || !from_folder) ? load_tokenizer(source) : nullptr;
  if (tokenizer) model::check_tokenizer_fits(*tokenizer, weights.config(), source);

  std::string written;
  if (to_gguf) {
    const GgmlType type = gguf_type(a.type, stored);
    model::save_gguf_llama(a.to, weights, tokenizer.get(), type, fs::path(source).stem().string());
    written = "GGUF " + std::string(ggml_type_name(static_cast<uint32_t>(type)));
  } else {
    const DType dtype = folder_dtype(a.type, stored);
    // Everything goes into a temporary folder renamed into place at the end,
    // so a failure leaves no half-written model.
    const fs::path temp = fs::path(a.to).string() + ".tmp." + std::to_string(::getpid());
    fs::remove_all(temp);
    try {
      model::save_llama(temp.string(), weights, 5'000'000'000, dtype);
      if (tokenizer) save_tokenizer_files(*tokenizer, temp.string());
      for (const char* name : kTokenizerFiles) {
        if (from_folder && fs::exists(fs::path(source) / name)) fs::copy_file(fs::path(source) / name, temp / name);
      }
      if (fs::exists(a.to)) fs::remove(a.to);
      fs::rename(temp, a.to);
    } catch (...) {
      std::error_code ignored;
      fs::remove_all(temp, ignored);
      throw;
    }
    written = "a model folder in " + std::string(dtype_name(dtype));
  }
  const model::LlamaConfig& c = weights.config();
  std::printf("%s: %.1fM parameters (%lld layers, hidden %lld, vocab %lld) from %s as %s, %s\n", a.to.c_str(),
              static_cast<double>(weights.numel()) / 1e6, static_cast<long long>(c.num_hidden_layers),
              static_cast<long long>(c.hidden_size), static_cast<long long>(c.vocab_size), kind.c_str(),
              written.c_str(), tokenizer_there ? "with its tokenizer" : "no tokenizer (the source has none)");
  return 0;
}

}  // namespace

Runner add_convert(CLI::App& app) {
  auto a = std::make_shared<ConvertArgs>();
  CLI::App* cmd = app.add_subcommand(
      "convert", "convert between a llama.cpp GGUF file and a Hugging Face model folder, tokenizer included");
  cmd->add_option("--from", a->from, "a LLaMA .gguf file (F32, F16, BF16, Q8_0 or Q4_1), a model folder, or a run")
      ->required();
  cmd->add_option("-o,--to", a->to,
                  "output: a file ending in .gguf, or else a model folder (config.json, model.safetensors, "
                  "tokenizer files)")
      ->required();
  cmd->add_option("--type", a->type,
                  "weights as auto (the source's precision: f32, f16 or bf16; bf16 for a quantized source), f32, "
                  "f16, bf16, or q8_0 (GGUF only)")
      ->check(CLI::IsMember({"auto", "f32", "f16", "bf16", "q8_0"}))
      ->capture_default_str();
  cmd->add_option("--adapter", a->adapter,
                  "a LoRA adapter folder as PEFT saves one, merged into the weights (a LoRA run's checkpoint merges "
                  "its own)");
  return [a] { return run_convert(*a); };
}

}  // namespace spillway::cli
