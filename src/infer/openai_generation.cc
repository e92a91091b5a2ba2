#include "infer/openai_generation.h"

#include <random>

#include "base/status.h"
#include "infer/chat_prompt.h"

namespace spillway::infer {

PreparedRequest prepare_request(ApiRequest api, const ServedModel& model, const BatchEngine& engine) {
  const Tokenizer& tok = *model.tokenizer;
  PreparedRequest p;
  if (api.chat) {
    try {
      ChatPrompt chat = chat_prompt(tok, api.messages);
      p.prompts.push_back(std::move(chat.ids));
      p.stop_tokens = std::move(chat.stops);
    } catch (const Error& e) {
      throw ApiError(400, e.problem(), "messages");
    }
  } else {
    for (const std::string& text : api.text_prompts) {
      std::vector<int32_t> ids = tok.encode_text(text);
      if (ids.empty()) throw ApiError(400, "'prompt': the prompt encodes to no tokens", "prompt");
      p.prompts.push_back(std::move(ids));
    }
    for (const std::vector<int32_t>& ids : api.id_prompts) {
      for (int32_t id : ids) {
        if (id >= tok.vocab_size()) {
          throw ApiError(400,
                         "'prompt': token " + std::to_string(id) + " is outside the vocabulary of " +
                             std::to_string(tok.vocab_size()),
                         "prompt");
        }
      }
      p.prompts.push_back(ids);
    }
    p.stop_tokens = tok.roles().stops;
  }
  if (api.ignore_eos) p.stop_tokens.clear();
  // The longest run of tokens one request may have: the model's context, or
  // less when the cache cannot hold that much.
  const int64_t room = std::min(model.context, engine.max_request_tokens());
  int64_t longest = 0;
  for (const auto& ids : p.prompts) {
    longest = std::max<int64_t>(longest, static_cast<int64_t>(ids.size()));
    p.prompt_tokens += static_cast<int64_t>(ids.size());
  }
  const std::string what = api.chat ? "messages" : "prompt";
  auto too_long = [&](const std::string& message) {
    return ApiError(400, message, api.max_tokens ? "max_tokens" : what, "context_length_exceeded");
  };
  if (longest >= room) {
    throw ApiError(400,
                   "the " + what + " is " + std::to_string(longest) + " tokens; this server takes at most " +
                       std::to_string(room - 1) + " (the model's context is " + std::to_string(model.context) +
                       " tokens, the KV cache holds " + std::to_string(engine.max_request_tokens()) +
                       " for one request)",
                   what, "context_length_exceeded");
  }
  // Completions default to 16 new tokens as OpenAI's do; chat to the rest of the room.
  p.max_tokens = api.max_tokens.value_or(api.chat ? room - longest : std::min<int64_t>(16, room - longest));
  if (longest + p.max_tokens > model.context) {
    throw too_long("max_tokens " + std::to_string(p.max_tokens) + " and the " + what + "'s " + std::to_string(longest) +
                   " tokens make " + std::to_string(longest + p.max_tokens) + ", more than the model's context of " +
                   std::to_string(model.context) + " tokens; ask for at most " +
                   std::to_string(model.context - longest));
  }
  if (longest + p.max_tokens > room) {
    throw too_long("max_tokens " + std::to_string(p.max_tokens) + " and the " + what + "'s " + std::to_string(longest) +
                   " tokens make " + std::to_string(longest + p.max_tokens) + ", more than the " +
                   std::to_string(room) +
                   " tokens the KV cache holds for one request (--kv-cache-mem); ask for at most " +
                   std::to_string(room - longest));
  }
  p.api = std::move(api);
  return p;
}

RunningChoices::RunningChoices(BatchEngine& engine, const Tokenizer& tok, const PreparedRequest& r)
    : start_(std::chrono::steady_clock::now()) {
  const uint64_t base_seed = r.api.seed.value_or(std::random_device{}());
  const auto n = static_cast<size_t>(r.api.n);
  try {
    for (size_t i = 0; i < r.prompts.size() * n; ++i) {
      EngineRequest e;
      e.prompt = r.prompts[i / n];
      e.max_new_tokens = r.max_tokens;
      e.sampling = SamplingOptions{r.api.temperature, r.api.top_k, r.api.top_p, base_seed + i};
      e.stop_tokens = r.stop_tokens;
      e.vocab_limit = tok.vocab_size();
      Choice c;
      c.text = std::make_unique<TextStream>(tok, r.prompts[i / n], r.api.stop);
      c.stream = engine.submit(std::move(e));
      choices_.push_back(std::move(c));
    }
  } catch (const Error& e) {
    cancel();
    throw ApiError(400, e.problem(), "max_tokens", "context_length_exceeded");
  }
}

RunningChoices::~RunningChoices() { cancel(); }

void RunningChoices::cancel() {
  for (Choice& c : choices_) {
    if (!c.finished) c.stream->cancel();
  }
}

bool RunningChoices::done() const {
  for (const Choice& c : choices_) {
    if (!c.finished) return false;
  }
  return true;
}

int64_t RunningChoices::completion_tokens() const {
  int64_t total = 0;
  for (const Choice& c : choices_) total += c.text->tokens();
  return total;
}

std::vector<RunningChoices::Event> RunningChoices::poll(std::chrono::milliseconds timeout) {
  size_t open = 0;
  for (const Choice& c : choices_) open += c.finished ? 0 : 1;
  // One choice waits the whole time; several share it, each a slice.
  const auto slice = open > 1
                         ? std::chrono::milliseconds(std::max<int64_t>(1, timeout.count() / static_cast<int64_t>(open)))
                         : timeout;
  std::vector<Event> events;
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& c = choices_[i];
    if (c.finished) continue;
    RequestStream::Update u = c.stream->read(slice);
    if (u.finish == FinishReason::error) {
      cancel();
      throw ApiError(500, "generation failed: " + u.error, "", "", "server_error");
    }
    Event e{i, {}, std::nullopt};
    if (!u.tokens.empty()) {
      if (first_token_seconds_ < 0) {
        first_token_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      }
      e.text = c.text->add(u.tokens);
    }
    if (c.text->stopped()) {
      c.stream->cancel();
      e.finish_reason = "stop";
    } else if (u.finish == FinishReason::stop || u.finish == FinishReason::length) {
      e.text += c.text->finish();
      e.finish_reason = u.finish == FinishReason::stop ? "stop" : "length";
    } else if (u.finish == FinishReason::cancelled) {
      throw ApiError(503, "the server is shutting down", "", "", "server_error");
    }
    if (e.finish_reason) c.finished = true;
    if (!e.text.empty() || e.finish_reason) events.push_back(std::move(e));
  }
  return events;
}

}  // namespace spillway::infer
