// Decoding speed of the GPU decoders on random weights of a model's shape
// (default LLaMA-3-8B): the batched, paged decoder (cuda_batch_decoder.h) at
// each batch size of --batches, every sequence at --context tokens of
// history, one token each per step; its time to first token for prompts of
// --prompts tokens; the continuous-batching engine (batch_engine.h, what
// `spillway serve` runs, without its HTTP) at each level of --streams
// concurrent streams of --engine-prompt-token prompts and --engine-tokens
// answers; and the batch-1 CudaDecoder (cuBLAS) beside it.
//
// One JSON line per measurement on stdout:
//   {"name": "batch_decoder", "batch": 8, "tok_s": ..., "ms_per_step": ...,
//    "bandwidth_gb_s": ..., ...}
// bandwidth_gb_s counts the bytes a step must read: the weights (the
// embedding's lookup aside) and every sequence's cached keys and values.
//
// The engine's lines give tok_s over the level's wall time, ms_per_step as
// the median gap between a stream's tokens (p99 and time to first token
// beside it), and bandwidth_gb_s as the weights read once per median gap.
//
//   batch_decode_cuda_bench [--config llama3-8b] [--batches 1,8,32]
//       [--context 512] [--steps 32] [--warmup 4] [--prompts 128,2048]
//       [--streams 1,16,64] [--engine-prompt-tokens 128] [--engine-tokens 256]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#ifdef SPILLWAY_HAS_CUDA

#include "base/status.h"
#include "device/cuda/cuda_device.h"
#include "infer/batch_decoder.h"
#include "infer/batch_engine.h"
#include "infer/cuda/cuda_batch_decoder.h"
#include "infer/cuda/cuda_decoder.h"
#include "model/llama_config.h"
#include "model/llama_config_json.h"
#include "model/llama_weights.h"

namespace spillway::infer {
namespace {

struct Args {
  std::string config = "llama3-8b";
  std::vector<int64_t> batches = {1, 8, 32};
  std::vector<int64_t> prompts = {128, 2048};
  std::vector<int64_t> streams = {1, 16, 64};
  int64_t context = 512, steps = 32, warmup = 4;
  int64_t engine_prompt_tokens = 128, engine_tokens = 256;
  bool tensor_cores = true;   // CudaBatchDecoderOptions::tensor_cores
  bool cuda_graphs = true;    // CudaBatchDecoderOptions::cuda_graphs
  bool fused_epilogues = true;  // CudaBatchDecoderOptions::fused_epilogues
};

std::vector<int64_t> numbers(const std::string& list) {
  std::vector<int64_t> out;
  for (size_t at = 0; at <= list.size();) {
    const size_t end = std::min(list.find(',', at), list.size());
    out.push_back(std::stoll(list.substr(at, end - at)));
    at = end + 1;
  }
  return out;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; i += 2) {
    SPW_CHECK(i + 1 < argc, "batch_decode_cuda_bench", argv[i], " needs a value");
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--config") a.config = value;
    else if (flag == "--batches") a.batches = numbers(value);
    else if (flag == "--prompts") a.prompts = numbers(value);
    else if (flag == "--context") a.context = std::stoll(value);
    else if (flag == "--steps") a.steps = std::stoll(value);
    else if (flag == "--warmup") a.warmup = std::stoll(value);
    else if (flag == "--streams") a.streams = numbers(value);
    else if (flag == "--engine-prompt-tokens") a.engine_prompt_tokens = std::stoll(value);
    else if (flag == "--engine-tokens") a.engine_tokens = std::stoll(value);
    else if (flag == "--tensor-cores") a.tensor_cores = value == "1";
    else if (flag == "--cuda-graphs") a.cuda_graphs = value == "1";
    else if (flag == "--fused-epilogues") a.fused_epilogues = value == "1";
    else SPW_CHECK(false, "batch_decode_cuda_bench", "unknown flag ", flag);
  }
  return a;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Token ids from a fixed stream, below the vocabulary.
std::vector<int32_t> tokens(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& v : t) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<int32_t>((seed >> 33) % static_cast<uint64_t>(vocab));
  }
  return t;
}

// A batch-1 line also carries the tokens/s as `decode_tok_s`, the field the
// results compare across systems (bench/torch_decode.py writes it too).
void print(const std::string& name, int64_t batch, double step_s, double bytes, const Args& a, const char* extra) {
  const double tok_s = static_cast<double>(batch) / step_s;
  char decode[48] = "";
  if (batch == 1) std::snprintf(decode, sizeof(decode), ", \"decode_tok_s\": %.1f", tok_s);
  std::printf("{\"name\": \"%s\", \"batch\": %lld, \"tok_s\": %.1f%s, \"ms_per_step\": %.3f, \"bandwidth_gb_s\": "
              "%.1f, \"context\": %lld, \"config\": \"%s\"%s}\n",
              name.c_str(), static_cast<long long>(batch), tok_s, decode, step_s * 1e3, bytes / step_s / 1e9,
              static_cast<long long>(a.context), a.config.c_str(), extra);
  std::fflush(stdout);
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p / 100 * static_cast<double>(v.size() - 1) + 0.5)];
}

// Each level of --streams: that many clients, each submitting one greedy
// request of engine_prompt_tokens and reading its engine_tokens as they come.
void measure_engine(std::unique_ptr<BatchDecoder> decoder, const Args& a, int64_t vocab, double weight_bytes,
                    int64_t most_streams) {
  EngineOptions options;
  options.max_sequences = most_streams;
  BatchEngine engine(std::move(decoder), options);
  using Clock = std::chrono::steady_clock;
  for (int64_t level : a.streams) {
    std::vector<std::vector<double>> gaps(static_cast<size_t>(level));
    std::vector<double> first(static_cast<size_t>(level));
    std::vector<int64_t> produced(static_cast<size_t>(level));
    std::vector<std::thread> clients;
    const auto started = Clock::now();
    for (int64_t i = 0; i < level; ++i) {
      clients.emplace_back([&, i] {
        EngineRequest r;
        r.prompt = tokens(a.engine_prompt_tokens, vocab, 1000 + static_cast<uint64_t>(i));
        r.max_new_tokens = a.engine_tokens;
        r.sampling.temperature = 0;
        const auto submitted = Clock::now();
        auto stream = engine.submit(std::move(r));
        auto last = submitted;
        for (;;) {
          const RequestStream::Update u = stream->read(std::chrono::milliseconds(1000));
          const auto now = Clock::now();
          if (!u.tokens.empty()) {
            const double since = std::chrono::duration<double>(now - last).count();
            if (produced[i] == 0) first[i] = since;
            else gaps[i].push_back(since);
            produced[i] += static_cast<int64_t>(u.tokens.size());
            last = now;
          }
          if (u.finish != FinishReason::running) break;
        }
      });
    }
    for (std::thread& t : clients) t.join();
    const double wall = std::chrono::duration<double>(Clock::now() - started).count();
    std::vector<double> all;
    int64_t total = 0;
    for (size_t i = 0; i < gaps.size(); ++i) {
      all.insert(all.end(), gaps[i].begin(), gaps[i].end());
      total += produced[i];
    }
    const double p50 = percentile(all, 50);
    std::printf("{\"name\": \"engine\", \"batch\": %lld, \"streams\": %lld, \"tok_s\": %.1f, "
                "\"ms_per_step\": %.3f, \"itl_p99_ms\": %.3f, \"ttft_p50_ms\": %.1f, \"bandwidth_gb_s\": %.1f, "
                "\"prompt_tokens\": %lld, \"max_tokens\": %lld, \"output_tokens\": %lld, \"config\": \"%s\"}\n",
                static_cast<long long>(level), static_cast<long long>(level), static_cast<double>(total) / wall,
                p50 * 1e3, percentile(all, 99) * 1e3, percentile(first, 50) * 1e3,
                p50 > 0 ? weight_bytes / p50 / 1e9 : 0.0, static_cast<long long>(a.engine_prompt_tokens),
                static_cast<long long>(a.engine_tokens), static_cast<long long>(total), a.config.c_str());
    std::fflush(stdout);
  }
}

int run(const Args& a) {
  SPW_CHECK(cuda_device_count() > 0, "batch_decode_cuda_bench", "no GPU is visible");
  const model::LlamaConfig c = model::resolve_config(a.config);
  auto started = std::chrono::steady_clock::now();
  const model::LlamaWeights w = model::LlamaWeights::random(c, 1);
  std::fprintf(stderr, "random weights of %s: %.1f s\n", a.config.c_str(), seconds_since(started));
  // Bytes a decode step reads: every weight but the embedding (unless it is
  // the lm_head too), in bf16.
  const double weight_bytes =
      2.0 * static_cast<double>(w.numel() - (c.tie_word_embeddings ? 0 : c.vocab_size * c.hidden_size));
  const double kv_token = static_cast<double>(kv_bytes_per_token(c, 2));
  int64_t most = 0, longest = 0;
  for (int64_t b : a.batches) most = std::max(most, b);
  for (int64_t p : a.prompts) longest = std::max(longest, p);
  const int64_t per_sequence = std::max(a.context + a.warmup + a.steps, longest) + 16;
  int64_t streams = 0;
  for (int64_t n : a.streams) streams = std::max(streams, n);
  // Room for every measurement's sequences at once, the engine's included.
  const int64_t cache_tokens =
      std::max(most * per_sequence, streams * (a.engine_prompt_tokens + a.engine_tokens + 16));
  const KvCacheOptions cache{static_cast<uint64_t>(kv_token) * static_cast<uint64_t>(cache_tokens), 16};

  {
    started = std::chrono::steady_clock::now();
    auto d = make_cuda_batch_decoder(
        w, cache,
        {.tensor_cores = a.tensor_cores, .cuda_graphs = a.cuda_graphs, .fused_epilogues = a.fused_epilogues});
    std::fprintf(stderr, "%s: made in %.1f s\n", d->description().c_str(), seconds_since(started));
    for (int64_t p : a.prompts) {
      const int64_t s = d->open();
      const std::vector<int32_t> prompt = tokens(p, c.vocab_size, 7);
      d->step(std::vector<SequenceChunk>{{s, prompt}});  // warm-up
      d->close(s);
      const int64_t t = d->open();
      started = std::chrono::steady_clock::now();
      d->step(std::vector<SequenceChunk>{{t, prompt}});
      const double ttft = seconds_since(started);
      d->close(t);
      std::printf("{\"name\": \"batch_decoder_prefill\", \"batch\": 1, \"prompt_tokens\": %lld, \"ttft_s\": %.4f, "
                  "\"prefill_tok_s\": %.1f, \"config\": \"%s\", \"tensor_cores\": %s}\n",
                  static_cast<long long>(p), ttft, static_cast<double>(p) / ttft, a.config.c_str(),
                  a.tensor_cores ? "true" : "false");
      std::fflush(stdout);
    }
    for (int64_t b : a.batches) {
      std::vector<int64_t> seqs;
      for (int64_t i = 0; i < b; ++i) {
        seqs.push_back(d->open());
        d->step(std::vector<SequenceChunk>{{seqs.back(), tokens(a.context, c.vocab_size, 100 + i)}});
      }
      std::vector<int32_t> next(static_cast<size_t>(b), 1);
      auto decode = [&] {
        std::vector<SequenceChunk> chunks;
        for (int64_t i = 0; i < b; ++i) chunks.push_back({seqs[i], {&next[i], 1}});
        d->step(chunks);
      };
      for (int64_t i = 0; i < a.warmup; ++i) decode();
      started = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < a.steps; ++i) decode();
      const double step_s = seconds_since(started) / static_cast<double>(a.steps);
      const double history = static_cast<double>(a.context + a.warmup) + static_cast<double>(a.steps) / 2;
      print("batch_decoder", b, step_s, weight_bytes + static_cast<double>(b) * history * kv_token, a,
            (std::string(", \"tensor_cores\": ") + (a.tensor_cores ? "true" : "false") + ", \"cuda_graphs\": " +
             (a.cuda_graphs ? "true" : "false") + ", \"fused_epilogues\": " + (a.fused_epilogues ? "true" : "false"))
                .c_str());
      for (int64_t s : seqs) d->close(s);
    }
    measure_engine(std::move(d), a, c.vocab_size, weight_bytes, streams);
  }
  {
    // The batch-1 decoder (cuBLAS matmuls), same weights, same history.
    auto d = make_cuda_decoder(w, a.context + a.warmup + a.steps + 1);
    d->forward_last(tokens(a.context, c.vocab_size, 100));
    const int32_t token = 1;
    for (int64_t i = 0; i < a.warmup; ++i) d->forward_last({&token, 1});
    started = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < a.steps; ++i) d->forward_last({&token, 1});
    const double step_s = seconds_since(started) / static_cast<double>(a.steps);
    const double history = static_cast<double>(a.context + a.warmup) + static_cast<double>(a.steps) / 2;
    print("cuda_decoder", 1, step_s, weight_bytes + history * kv_token, a, ", \"note\": \"batch-1 decoder, cuBLAS\"");
  }
  return 0;
}

}  // namespace
}  // namespace spillway::infer

int main(int argc, char** argv) {
  try {
    return spillway::infer::run(spillway::infer::parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}

#else

int main() {
  std::fprintf(stderr, "batch_decode_cuda_bench: this build has no CUDA\n");
  return 1;
}

#endif
