// `spillway serve`: the OpenAI-compatible HTTP server over the batch engine.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "base/bytes.h"
#include "base/status.h"
#include "cli/commands.h"
#include "cli/model_flags.h"
#include "cli/stop_signals.h"
#include "infer/batch_decoder.h"
#include "infer/batch_engine.h"
#include "infer/decoder.h"
#include "infer/loaded_model.h"
#include "infer/openai_server.h"
#include "model/llama_weights_io.h"
#include "model/tokenizer.h"
#include "model/tokenizer_vocab.h"
#include "train/checkpoint.h"

namespace spillway::cli {

namespace {

struct ServeArgs {
  std::string model;
  std::string adapter;
  std::string model_name;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;
  int64_t parallel = 16;
  std::string kv_cache_mem = "auto";
  int64_t kv_block = 16;
  int64_t prefill_chunk = 256;
  ModelRunFlags run;
};

// The name clients see in /v1/models: the folder's or file's name.
std::string default_model_name(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  std::string name = p.substr(p.find_last_of('/') + 1);
  if (name.size() > 5 && name.ends_with(".gguf")) name.resize(name.size() - 5);
  return name.empty() ? "model" : name;
}

int run_serve(const ServeArgs& a) {
  a.run.apply();
  // SIGINT and SIGTERM stop the server from a thread of their own (below).
  StopSignals stop_signals;

  // A LoRA run's checkpoint, or the model with --adapter, serves merged.
  infer::LoadedModel loaded = infer::load_model(a.model, a.adapter);
  model::LlamaWeights& weights = loaded.weights;
  std::unique_ptr<Tokenizer>& tokenizer = loaded.tokenizer;
  const model::LlamaConfig& c = weights.config();

  infer::KvCacheOptions cache;
  cache.block_tokens = a.kv_block;
  if (a.kv_cache_mem == "auto") {
    // Room for --parallel requests of the model's whole context, in the
    // cache's dtype: on the GPU (bf16) within what the weights and the
    // activations leave of the device, on the CPU (float32) within 2 GiB.
    const bool gpu = infer::device_is_cuda(a.run.device);
    const uint64_t whole = infer::kv_bytes_per_token(c, gpu ? 2 : sizeof(float)) *
                           static_cast<uint64_t>(a.parallel * c.max_position_embeddings);
    cache.budget_bytes = gpu ? whole : std::min<uint64_t>(whole, 2ull << 30);
    cache.fit_device = gpu;
  } else {
    cache.budget_bytes = parse_bytes(a.kv_cache_mem, "--kv-cache-mem");
  }
  infer::EngineOptions engine_options;
  engine_options.max_sequences = a.parallel;
  engine_options.prefill_tokens = a.prefill_chunk;
  infer::BatchEngine engine(infer::make_batch_decoder(weights, cache, a.run.device), engine_options);

  infer::ServerOptions options;
  options.host = a.host;
  options.port = a.port;
  options.api_key = a.api_key;
  options.model_name = a.model_name.empty() ? default_model_name(a.model) : a.model_name;
  options.context = c.max_position_embeddings;
  options.threads = static_cast<int>(std::max<int64_t>(16, a.parallel + 8));
  infer::OpenAiServer server(engine, *tokenizer, options);
  const int port = server.bind();
  std::printf("spillway serve: %s on http://%s:%d (%s; up to %lld requests at once, %lld tokens each at most)\n",
              options.model_name.c_str(), a.host.c_str(), port, engine.description().c_str(),
              static_cast<long long>(a.parallel),
              static_cast<long long>(std::min(engine.max_request_tokens(), options.context)));
  std::fflush(stdout);
  std::thread signals([&] {
    stop_signals.wait();
    server.stop();
  });
  server.serve();
  // serve() also returns when listening fails; wake the signal thread then.
  stop_signals.wake();
  signals.join();
  std::printf("spillway serve: stopped\n");
  return 0;
}

}  // namespace

Runner add_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "serve a model over an OpenAI-compatible HTTP API");
  cmd->add_option("-m,--model", a->model, "model folder, run folder or GGUF file")->required();
  cmd->add_option("--adapter", a->adapter,
                  "a LoRA adapter folder as PEFT saves one (adapter_config.json, adapter_model.safetensors), merged "
                  "into the model's weights");
  cmd->add_option("--host", a->host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", a->port, "port to listen on (0: any free one)")->capture_default_str();
  cmd->add_option("--api-key", a->api_key, "key clients must send as 'Authorization: Bearer KEY' (default: none)")
      ->envname("SPILLWAY_API_KEY");
  cmd->add_option("--model-name", a->model_name, "the model's id in the API (default: the folder's or file's name)");
  cmd->add_option("--parallel", a->parallel, "requests decoded together at most (the batch)")->capture_default_str();
  cmd->add_option("--kv-cache-mem", a->kv_cache_mem,
                  "memory for the KV cache, e.g. 512MiB (auto: --parallel full contexts, within what the GPU has left "
                  "beside the model, or 2GiB on the CPU)")
      ->capture_default_str();
  cmd->add_option("--kv-block", a->kv_block, "tokens per KV cache block")->capture_default_str();
  cmd->add_option("--prefill-chunk", a->prefill_chunk, "prompt tokens one batch step takes at most")
      ->capture_default_str();
  a->run.add_to(cmd);
  return [a] { return run_serve(*a); };
}

}  // namespace spillway::cli
