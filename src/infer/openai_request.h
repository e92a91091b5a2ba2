// The bodies of OpenAI's /v1/completions and /v1/chat/completions requests,
// read and checked: what spillway serves of them, and an ApiError (the HTTP
// status, OpenAI's error type and the parameter at fault) for anything it
// cannot honour. Fields spillway does not know are refused rather than
// ignored, so that a client never believes a setting took effect when it did
// not; the ones it knows but does not implement are accepted only at their
// neutral values (frequency_penalty 0, logprobs false, ...).
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/chat_template.h"

namespace spillway::infer {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = {}, std::string code = {},
           std::string type = "invalid_request_error")
      : std::runtime_error(message), status(status), param(std::move(param)), code(std::move(code)),
        type(std::move(type)) {}
  int status;
  std::string param, code, type;
};

// {"error": {"message", "type", "param", "code"}}, absent param and code as null.
nlohmann::json error_body(const ApiError& e);

struct ApiRequest {
  bool chat = false;
  std::string model;
  std::vector<ChatMessage> messages;           // chat
  std::vector<std::string> text_prompts;       // completions: prompts as text...
  std::vector<std::vector<int32_t>> id_prompts;  // ...or as token ids
  std::optional<int64_t> max_tokens;           // absent: the endpoint's default
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t top_k = 0;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  int64_t n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // Not OpenAI's (vLLM's): generate past the end-of-text and end-of-turn
  // tokens, to max_tokens; for benchmarks that need answers of one length.
  bool ignore_eos = false;
};

// Limits that keep one request from taking the server over.
inline constexpr int64_t kMaxChoices = 16;     // n
inline constexpr int64_t kMaxPrompts = 16;     // prompts in one completions request
inline constexpr size_t kMaxStopStrings = 4;   // as OpenAI's API allows

// Parses `body`; throws ApiError(400, ...) naming the field at fault.
ApiRequest parse_api_request(const std::string& body, bool chat);

}  // namespace spillway::infer
