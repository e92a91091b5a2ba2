#include "infer/batch_engine.h"

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace spillway::infer {

RequestStream::Update RequestStream::read(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, timeout, [&] { return !pending_.empty() || finish_ != FinishReason::running; });
  Update u;
  u.tokens.swap(pending_);
  u.finish = finish_;
  u.error = error_;
  return u;
}

void RequestStream::push(int32_t token) {
  {
    std::lock_guard lock(mutex_);
    pending_.push_back(token);
  }
  changed_.notify_all();
}

void RequestStream::finish(FinishReason reason, std::string error) {
  {
    std::lock_guard lock(mutex_);
    finish_ = reason;
    error_ = std::move(error);
  }
  changed_.notify_all();
}

BatchEngine::BatchEngine(std::unique_ptr<BatchDecoder> decoder, const EngineOptions& options)
    : decoder_(std::move(decoder)), options_(options), description_(decoder_->description()) {
  SPW_CHECK(options.max_sequences > 0, "--parallel", "must be positive, got ", options.max_sequences);
  SPW_CHECK(options.prefill_tokens > 0, "--prefill-chunk", "must be positive, got ", options.prefill_tokens);
  stats_.blocks_total = decoder_->blocks().num_blocks();
  stats_.block_tokens = decoder_->blocks().block_tokens();
  thread_ = std::thread([this] { loop(); });
}

BatchEngine::~BatchEngine() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_.notify_all();
  thread_.join();
}

int64_t BatchEngine::max_request_tokens() const {
  return decoder_->blocks().num_blocks() * decoder_->blocks().block_tokens();
}

std::shared_ptr<RequestStream> BatchEngine::submit(EngineRequest request) {
  SPW_CHECK(!request.prompt.empty(), "request", "the prompt holds no tokens");
  SPW_CHECK(request.max_new_tokens >= 1, "request", "max_new_tokens must be at least 1, got ",
            request.max_new_tokens);
  const auto prompt = static_cast<int64_t>(request.prompt.size());
  const int64_t total = prompt + request.max_new_tokens;
  const PagedKvBlocks& b = decoder_->blocks();
  SPW_CHECK(b.blocks_for(total) <= b.num_blocks(), "request",
            "its ", prompt, " prompt tokens and up to ", request.max_new_tokens, " new ones need ",
            b.blocks_for(total), " blocks of ", b.block_tokens(), " tokens in the KV cache, which holds ",
            b.num_blocks(), " blocks (", max_request_tokens(), " tokens) in all");
  TokenSampler sampler(request.sampling);  // checks top_p and top_k
  auto active = std::make_unique<Active>(Active{std::move(request), std::make_shared<RequestStream>(), sampler});
  std::shared_ptr<RequestStream> stream = active->stream;
  {
    std::lock_guard lock(mutex_);
    waiting_.push_back(std::move(active));
    stats_.waiting = static_cast<int64_t>(waiting_.size());
  }
  work_.notify_all();
  return stream;
}

EngineStats BatchEngine::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void BatchEngine::admit() {
  std::lock_guard lock(mutex_);
  std::erase_if(waiting_, [&](const std::unique_ptr<Active>& a) {
    if (!a->stream->cancelled()) return false;
    a->stream->finish(FinishReason::cancelled);
    ++stats_.cancelled;
    return true;
  });
  // First come, first served: a request that does not fit yet holds back
  // the ones behind it, so that a long one is never starved by short ones.
  while (!waiting_.empty() && static_cast<int64_t>(running_.size()) < options_.max_sequences) {
    Active& a = *waiting_.front();
    const int64_t total = static_cast<int64_t>(a.request.prompt.size()) + a.request.max_new_tokens;
    if (decoder_->blocks().blocks_for(total) > decoder_->blocks().free_blocks()) break;
    a.sequence = decoder_->open();
    decoder_->reserve(a.sequence, total);
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  stats_.waiting = static_cast<int64_t>(waiting_.size());
  stats_.running = static_cast<int64_t>(running_.size());
}

void BatchEngine::retire(Active& a, FinishReason reason, const std::string& error) {
  decoder_->close(a.sequence);
  a.sequence = -1;
  finished_.push_back({a.stream, reason, error});
  std::lock_guard lock(mutex_);
  switch (reason) {
    case FinishReason::stop: ++stats_.finished_stop; break;
    case FinishReason::length: ++stats_.finished_length; break;
    case FinishReason::cancelled: ++stats_.cancelled; break;
    case FinishReason::error: ++stats_.failed; break;
    case FinishReason::running: break;
  }
}

void BatchEngine::publish_finishes() {
  for (Finished& f : finished_) f.stream->finish(f.reason, std::move(f.error));
  finished_.clear();
}

bool BatchEngine::step() {
  for (auto& a : running_) {
    if (a->stream->cancelled()) retire(*a, FinishReason::cancelled);
  }
  std::erase_if(running_, [](const std::unique_ptr<Active>& a) { return a->sequence < 0; });
  if (running_.empty()) return false;

  std::vector<SequenceChunk> chunks;
  std::vector<Active*> owners;
  for (auto& a : running_) {
    if (a->fed == static_cast<int64_t>(a->request.prompt.size())) {
      chunks.push_back({a->sequence, std::span<const int32_t>(&a->next_input, 1)});
      owners.push_back(a.get());
    }
  }
  int64_t budget = options_.prefill_tokens, prompt_rows = 0;
  for (auto& a : running_) {
    const auto prompt = static_cast<int64_t>(a->request.prompt.size());
    if (a->fed == prompt || budget == 0) continue;
    const int64_t take = std::min(budget, prompt - a->fed);
    chunks.push_back({a->sequence, std::span<const int32_t>(a->request.prompt).subspan(static_cast<size_t>(a->fed),
                                                                                      static_cast<size_t>(take))});
    owners.push_back(a.get());
    budget -= take;
    prompt_rows += take;
  }

  std::span<const float> logits;
  try {
    logits = decoder_->step_view(chunks);
  } catch (const std::exception& e) {
    for (Active* a : owners) retire(*a, FinishReason::error, e.what());
    std::erase_if(running_, [](const std::unique_ptr<Active>& a) { return a->sequence < 0; });
    return true;
  }
  const int64_t vocab = decoder_->vocab();
  // Every row that ends a prompt or decodes draws its token, each request
  // with its own sampler: in parallel, the same tokens as one by one.
  std::vector<int32_t> tokens(owners.size(), -1);
  std::vector<std::string> failures(owners.size());
  for (size_t i = 0; i < owners.size(); ++i) {
    Active& a = *owners[i];
    if (a.fed < static_cast<int64_t>(a.request.prompt.size())) a.fed += static_cast<int64_t>(chunks[i].tokens.size());
  }
  const auto rows = static_cast<int64_t>(owners.size());
#pragma omp parallel for schedule(dynamic) if (rows > 1)
  for (int64_t i = 0; i < rows; ++i) {
    Active& a = *owners[static_cast<size_t>(i)];
    if (a.fed < static_cast<int64_t>(a.request.prompt.size())) continue;  // the prompt's last piece draws
    const int64_t drawable = a.request.vocab_limit > 0 ? std::min(vocab, a.request.vocab_limit) : vocab;
    try {
      tokens[static_cast<size_t>(i)] = a.sampler.next(
          logits.subspan(static_cast<size_t>(i * vocab), static_cast<size_t>(drawable)));
    } catch (const std::exception& e) {
      failures[static_cast<size_t>(i)] = e.what();
    }
  }
  int64_t drawn = 0;
  for (size_t i = 0; i < owners.size(); ++i) {
    Active& a = *owners[i];
    if (!failures[i].empty()) {
      retire(a, FinishReason::error, failures[i]);
      continue;
    }
    const int32_t token = tokens[i];
    if (token < 0) continue;
    if (std::find(a.request.stop_tokens.begin(), a.request.stop_tokens.end(), token) != a.request.stop_tokens.end()) {
      retire(a, FinishReason::stop);
      continue;
    }
    a.stream->push(token);
    ++drawn;
    if (++a.generated == a.request.max_new_tokens) {
      retire(a, FinishReason::length);
      continue;
    }
    a.next_input = token;
  }
  std::erase_if(running_, [](const std::unique_ptr<Active>& a) { return a->sequence < 0; });
  std::lock_guard lock(mutex_);
  stats_.prompt_tokens += prompt_rows;
  stats_.generated_tokens += drawn;
  ++stats_.steps;
  return true;
}

void BatchEngine::loop() {
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      work_.wait(lock, [&] { return stopping_ || !waiting_.empty() || !running_.empty(); });
      if (stopping_) break;
    }
    admit();
    const bool ran = step();
    {
      std::lock_guard lock(mutex_);
      stats_.running = static_cast<int64_t>(running_.size());
      stats_.blocks_used = decoder_->blocks().used_blocks();
    }
    // A client told its request is done finds the stats saying so.
    publish_finishes();
    // Nothing could run (every waiting request cancelled meanwhile): wait for news.
    if (!ran) {
      std::unique_lock lock(mutex_);
      work_.wait_for(lock, std::chrono::milliseconds(50));
    }
  }
  for (auto& a : running_) retire(*a, FinishReason::cancelled);
  running_.clear();
  publish_finishes();
  std::lock_guard lock(mutex_);
  for (auto& a : waiting_) a->stream->finish(FinishReason::cancelled);
  waiting_.clear();
}

}  // namespace spillway::infer
