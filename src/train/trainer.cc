#include "train/trainer.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include "base/atomic_file.h"
#include "base/status.h"
#include "infer/generate.h"
#include "model/llama_config_json.h"
#include "model/llama_weights_io.h"
#include "model/tokenizer_json.h"
#include "train/batch_sampler.h"
#include "train/checkpoint.h"
#include "train/loss_plot.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"
#include "train/progress.h"
#include "train/engine.h"

namespace spillway::train {

namespace fs = std::filesystem;
using nlohmann::json;

json TrainOptions::schedule_json() const {
  return {{"steps", steps},   {"batch", batch},   {"seq", seq},
          {"grad_accum", grad_accum}, {"lr", lr}, {"min_lr", min_lr},
          {"warmup", warmup}, {"weight_decay", weight_decay}, {"grad_clip", grad_clip},
          {"eval_every", eval_every}, {"eval_batches", eval_batches},
          {"checkpoint_every", checkpoint_every}, {"seed", seed}};
}

void TrainOptions::apply_schedule_json(const json& j, const std::string& source) {
  try {
    steps = j.at("steps");
    batch = j.at("batch");
    seq = j.at("seq");
    grad_accum = j.at("grad_accum");
    lr = j.at("lr");
    min_lr = j.at("min_lr");
    warmup = j.at("warmup");
    weight_decay = j.at("weight_decay");
    grad_clip = j.at("grad_clip");
    eval_every = j.at("eval_every");
    eval_batches = j.at("eval_batches");
    checkpoint_every = j.at("checkpoint_every");
    seed = j.at("seed");
  } catch (const json::exception& e) {
    throw Error(source, std::string("trainer options are incomplete: ") + e.what());
  }
}

namespace {

void check_options(const TrainOptions& o) {
  SPW_CHECK(o.steps > 0, "--steps", "must be positive, got ", o.steps);
  SPW_CHECK(o.batch > 0, "--batch", "must be positive, got ", o.batch);
  SPW_CHECK(o.seq > 0, "--seq", "must be positive, got ", o.seq);
  SPW_CHECK(o.grad_accum > 0, "--grad-accum", "must be positive, got ", o.grad_accum);
  SPW_CHECK(o.lr > 0 && o.min_lr >= 0 && o.min_lr <= o.lr, "--lr", "need lr > 0 and 0 <= min-lr <= lr, got ",
            o.lr, " and ", o.min_lr);
  SPW_CHECK(o.warmup >= 0, "--warmup", "must be non-negative, got ", o.warmup);
  SPW_CHECK(o.eval_every >= 0 && o.checkpoint_every >= 0, "--eval-every", "intervals must be non-negative");
}

// Mean loss over the validation file's first `max_batches` batches,
// weighted by counted targets; a short last batch is padded with rows
// whose targets do not count.
double evaluate(Engine& engine, int64_t batch, int64_t seq, const TokenFile& val, int64_t max_batches) {
  SequentialBatches batches(val, batch, seq);
  TokenBatch b;
  double loss_sum = 0, counted = 0;
  std::vector<int32_t> inputs(static_cast<size_t>(batch * seq));
  std::vector<int32_t> targets(inputs.size());
  for (int64_t i = 0; i < max_batches && batches.next(b); ++i) {
    std::fill(inputs.begin(), inputs.end(), 0);
    std::fill(targets.begin(), targets.end(), -100);
    std::copy(b.inputs.begin(), b.inputs.end(), inputs.begin());
    std::copy(b.targets.begin(), b.targets.end(), targets.begin());
    const double n = static_cast<double>(b.targets.size());
    loss_sum += engine.eval_loss(inputs, targets) * n;
    counted += n;
  }
  return counted > 0 ? loss_sum / counted : NAN;
}

class JsonLog {
 public:
  explicit JsonLog(const fs::path& path) : out_(path, std::ios::app) {
    SPW_CHECK(out_.good(), path.string(), "cannot open the training log for writing");
  }
  void write(const json& line) {
    out_ << line.dump() << "\n";
    out_.flush();
  }

 private:
  std::ofstream out_;
};

std::string generate_sample(const model::LlamaWeights& weights, const BpeTokenizer& tok, const TrainOptions& o) {
  std::vector<int32_t> prompt = o.sample_prompt.empty() ? std::vector<int32_t>{tok.eos_id()}
                                                        : tok.encode(o.sample_prompt);
  infer::LlamaDecoder decoder(weights, static_cast<int64_t>(prompt.size()) + o.sample_tokens);
  infer::GenerateOptions g;
  g.max_new_tokens = o.sample_tokens;
  g.sampling.temperature = o.sample_temperature;
  g.sampling.top_k = o.sample_top_k;
  g.sampling.seed = o.seed;
  g.stop_token = tok.eos_id();
  auto ids = infer::generate(decoder, prompt, g);
  return o.sample_prompt + tok.decode(ids);
}

}  // namespace

TrainResult train_model(TrainOptions o) {
  const fs::path run(o.out_dir);
  model::LlamaWeights weights;
  AdamW optimizer;
  std::unique_ptr<BpeTokenizer> start_tokenizer;
  json state;
  int64_t start_step = 0;

  if (o.resume) {
    const std::string ckpt = resolve_checkpoint(o.out_dir);
    SPW_CHECK(ckpt != o.out_dir, o.out_dir, "has no checkpoint to resume from (no 'latest' file)");
    state = load_trainer_state(ckpt);
    const int64_t stop_after = o.stop_after;
    o.apply_schedule_json(state.at("options"), ckpt + "/trainer_state.json");
    o.stop_after = stop_after;
    weights = model::load_llama(ckpt);
    optimizer = load_optimizer(ckpt, weights.config());
    start_tokenizer = std::make_unique<BpeTokenizer>(load_tokenizer_json(ckpt + "/tokenizer.json"));
    start_step = state.at("step");
  } else if (!o.init_from.empty()) {
    const std::string ckpt = resolve_checkpoint(o.init_from);
    weights = model::load_llama(ckpt);
    start_tokenizer = std::make_unique<BpeTokenizer>(load_tokenizer_json(ckpt + "/tokenizer.json"));
  }
  check_options(o);
  // The config is checked before any data work, so a typo fails at once.
  std::optional<model::LlamaConfig> fresh_config;
  if (weights.tensors().empty()) fresh_config = model::resolve_config(o.config);

  Dataset data = prepare_dataset(o.data, o.out_dir, start_tokenizer.get(), o.quiet);
  if (fresh_config) {
    fresh_config->vocab_size = data.tokenizer->vocab_size();
    weights = model::LlamaWeights::random(*fresh_config, o.seed);
  }
  const model::LlamaConfig& config = weights.config();
  SPW_CHECK(config.vocab_size >= data.train->vocab_size(), data.train->path(), "token ids reach ",
            data.train->vocab_size(), " but the model's vocabulary has ", config.vocab_size);
  // With bf16 moments the GPU engine keeps its own; fp32 ones are made only
  // when a checkpoint needs them.
  if (optimizer.m.tensors().empty() && !o.bf16_moments) optimizer = AdamW(config);
  optimizer.weight_decay = o.weight_decay;

  BatchSampler sampler(*data.train, o.batch, o.seq, o.seed);
  if (o.resume) {
    const json& s = state.at("sampler");
    sampler.restore(SamplerState{s.at("seed"), s.at("draws"), s.at("tokens_consumed")});
  }
  LossCurves curves;
  char title[96];
  std::snprintf(title, sizeof title, "spillway: %.1fM-parameter LLaMA", static_cast<double>(model::parameter_count(config)) / 1e6);
  curves.title = title;
  if (o.resume) {
    for (const auto& p : state.value("train_curve", json::array())) curves.train.emplace_back(p[0], p[1]);
    for (const auto& p : state.value("validation_curve", json::array())) curves.validation.emplace_back(p[0], p[1]);
  }

  EngineOptions engine_options;
  engine_options.batch = o.batch;
  engine_options.seq = o.seq;
  engine_options.grad_clip = o.grad_clip;
  engine_options.device = o.device;
  engine_options.device_memory = o.device_memory;
  engine_options.host_memory = o.host_memory;
  engine_options.offload = o.offload;
  engine_options.micro_batches = o.grad_accum;
  engine_options.bf16_moments = o.bf16_moments;
  engine_options.cuda_graph = o.cuda_graph;
  std::unique_ptr<Engine> engine = make_engine(weights, optimizer, engine_options);
  const LrSchedule schedule{o.lr, o.min_lr, o.warmup, o.steps};
  const int64_t end_step = o.stop_after >= 0 ? std::min(o.steps, o.stop_after) : o.steps;
  const int64_t tokens_per_step = o.batch * o.seq * o.grad_accum;

  fs::create_directories(run);
  JsonLog log(run / "train_log.jsonl");
  Progress progress(o.steps, o.quiet ? nullptr : stdout);
  if (!o.quiet) {
    std::printf("device: %s\n", engine->description().c_str());
    std::printf("model: %s parameters (%lld layers, width %lld, vocab %lld); %lld tokens per step; "
                "unigram entropy of the data %.3f nats\n",
                std::to_string(model::parameter_count(config)).c_str(), static_cast<long long>(config.num_hidden_layers),
                static_cast<long long>(config.hidden_size), static_cast<long long>(config.vocab_size),
                static_cast<long long>(tokens_per_step), data.unigram_entropy);
  }
  log.write({{"event", "start"}, {"step", start_step}, {"parameters", model::parameter_count(config)},
             {"options", o.schedule_json()}, {"unigram_entropy", data.unigram_entropy}});

  auto save = [&](int64_t steps_done) {
    engine->sync_to_host();
    SamplerState s = sampler.state();
    json st = {{"options", o.schedule_json()},
               {"sampler", {{"seed", s.seed}, {"draws", s.draws}, {"tokens_consumed", s.tokens_consumed}}},
               {"train_curve", json::array()},
               {"validation_curve", json::array()}};
    for (auto [x, y] : curves.train) st["train_curve"].push_back({x, y});
    for (auto [x, y] : curves.validation) st["validation_curve"].push_back({x, y});
    std::string dir = save_checkpoint(o.out_dir, steps_done, weights, optimizer, *data.tokenizer, st);
    log.write({{"event", "checkpoint"}, {"step", steps_done}, {"path", dir}});
    return dir;
  };

  TrainResult result;
  result.unigram_entropy = data.unigram_entropy;
  const size_t micro_tokens = static_cast<size_t>(o.batch * o.seq);
  std::vector<int32_t> inputs(micro_tokens * static_cast<size_t>(o.grad_accum)), targets(inputs.size());
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t step = start_step; step < end_step; ++step) {
    for (int64_t micro = 0; micro < o.grad_accum; ++micro) {
      sampler.next(std::span<int32_t>(inputs).subspan(micro * micro_tokens, micro_tokens),
                   std::span<int32_t>(targets).subspan(micro * micro_tokens, micro_tokens));
    }
    const double lr = schedule.at(step);
    const StepStats stats = engine->train_step(inputs, targets, o.grad_accum, lr);
    const double loss = stats.loss, norm = stats.grad_norm;
    SPW_CHECK(std::isfinite(loss), "training", "loss became ", loss, " at step ", step + 1,
              " (try a lower --lr)");
    progress.step(step, loss, lr, tokens_per_step);
    curves.train.emplace_back(static_cast<double>(step + 1), loss);
    result.train_loss = loss;
    log.write({{"step", step + 1}, {"loss", loss}, {"lr", lr}, {"grad_norm", norm},
               {"tokens", (step + 1) * tokens_per_step}, {"epoch", sampler.epochs()},
               {"tok_per_s", progress.tokens_per_second()},
               {"elapsed_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()}});
    const bool last = step + 1 == end_step;
    if ((o.eval_every > 0 && (step + 1) % o.eval_every == 0) || last) {
      double val = evaluate(*engine, o.batch, o.seq, *data.validation, o.eval_batches);
      curves.validation.emplace_back(static_cast<double>(step + 1), val);
      result.validation_loss = val;
      char line[160];
      std::snprintf(line, sizeof line, "step %lld: validation loss %.4f (train %.4f, epoch %.2f)",
                    static_cast<long long>(step + 1), val, loss, sampler.epochs());
      progress.note(line);
      log.write({{"event", "eval"}, {"step", step + 1}, {"val_loss", val}});
    }
    if ((o.checkpoint_every > 0 && (step + 1) % o.checkpoint_every == 0) || last) {
      result.checkpoint = save(step + 1);
    }
  }
  progress.finish();
  result.steps_done = end_step;
  result.tokens_per_second = progress.tokens_per_second();
  if (result.checkpoint.empty() && start_step == end_step) result.checkpoint = resolve_checkpoint(o.out_dir);

  const std::string svg = loss_plot_svg(curves);
  write_text_file_atomically((run / "loss.svg").string(), svg);
  engine->sync_to_host();
  result.peak_device_bytes = engine->peak_device_bytes();
  if (o.sample_tokens > 0 && end_step == o.steps) {
    result.sample = generate_sample(weights, *data.tokenizer, o);
    log.write({{"event", "sample"}, {"text", result.sample}});
  }
  log.write({{"event", "end"}, {"step", end_step}, {"train_loss", result.train_loss},
             {"val_loss", result.validation_loss}, {"tok_per_s", result.tokens_per_second}});
  return result;
}

}  // namespace spillway::train
