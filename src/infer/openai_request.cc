#include "infer/openai_request.h"

#include <cmath>
#include <set>
#include <sstream>

#include "base/json_text.h"
#include "base/status.h"

namespace spillway::infer {

using nlohmann::json;

json error_body(const ApiError& e) {
  return json{{"error",
               {{"message", e.what()},
                {"type", e.type},
                {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, "'" + param + "': " + message, param);
}

double number(const json& v, const std::string& name, double lo, double hi) {
  if (!v.is_number()) bad(name, "must be a number, got " + v.dump());
  const double x = v.get<double>();
  std::ostringstream range;
  range << "must be between " << lo << " and " << hi << ", got " << v.dump();
  if (!(x >= lo && x <= hi)) bad(name, range.str());
  return x;
}

int64_t integer(const json& v, const std::string& name, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) bad(name, "must be an integer, got " + v.dump());
  const std::string range =
      "must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " + v.dump();
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi)) bad(name, range);
  const auto x = v.get<int64_t>();
  if (x < lo || x > hi) bad(name, range);
  return x;
}

std::string message_text(const json& content, const std::string& name) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad(name, "must be a string or an array of text parts");
  std::string text;
  for (const json& part : content) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string()) {
      bad(name, "only text parts ({\"type\": \"text\", \"text\": ...}) are supported, got " + part.dump());
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

std::vector<ChatMessage> read_messages(const json& v) {
  if (!v.is_array() || v.empty()) bad("messages", "must be a non-empty array");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string name = "messages[" + std::to_string(i) + "]";
    const json& m = v[i];
    if (!m.is_object()) bad(name, "must be an object with 'role' and 'content'");
    for (const auto& [key, value] : m.items()) {
      if (key != "role" && key != "content" && key != "name") bad(name + "." + key, "is not supported");
    }
    if (!m.contains("role") || !m["role"].is_string()) bad(name + ".role", "must be a string");
    std::string role = m["role"].get<std::string>();
    if (role == "developer") role = "system";  // OpenAI's newer name for the system role
    if (role != "system" && role != "user" && role != "assistant") {
      bad(name + ".role", "must be 'system', 'developer', 'user' or 'assistant', got '" + role + "'");
    }
    if (!m.contains("content")) bad(name + ".content", "is missing");
    out.push_back({role, message_text(m["content"], name + ".content")});
  }
  return out;
}

void read_prompt(const json& v, ApiRequest& r) {
  auto ids = [](const json& a, const std::string& name) {
    std::vector<int32_t> out;
    for (const json& t : a) out.push_back(static_cast<int32_t>(integer(t, name, 0, INT32_MAX)));
    if (out.empty()) bad(name, "holds no tokens");
    return out;
  };
  if (v.is_string()) {
    r.text_prompts.push_back(v.get<std::string>());
  } else if (v.is_array() && !v.empty() && v[0].is_number_integer()) {
    r.id_prompts.push_back(ids(v, "prompt"));
  } else if (v.is_array() && !v.empty()) {
    if (static_cast<int64_t>(v.size()) > kMaxPrompts)
      bad("prompt", "holds more than " + std::to_string(kMaxPrompts) + " prompts");
    for (const json& p : v) {
      if (p.is_string()) {
        r.text_prompts.push_back(p.get<std::string>());
      } else if (p.is_array()) {
        r.id_prompts.push_back(ids(p, "prompt"));
      } else {
        bad("prompt", "must be a string, an array of strings, or token ids");
      }
    }
    if (!r.text_prompts.empty() && !r.id_prompts.empty()) bad("prompt", "mixes text and token ids");
  } else {
    bad("prompt", "must be a string, an array of strings, or token ids");
  }
}

// Fields OpenAI defines that spillway does not implement, taken only at the
// values that mean "off".
bool neutral(const std::string& key, const json& v) {
  if (key == "frequency_penalty" || key == "presence_penalty")
    return v.is_null() || (v.is_number() && v.get<double>() == 0);
  if (key == "logprobs" || key == "echo") return v.is_null() || v == false;
  if (key == "logit_bias" || key == "top_logprobs" || key == "suffix")
    return v.is_null() || (v.is_object() && v.empty());
  if (key == "best_of") return v.is_null() || v == 1;
  if (key == "response_format") return v.is_null() || v == json{{"type", "text"}};
  if (key == "user") return v.is_null() || v.is_string();
  return false;
}

}  // namespace

ApiRequest parse_api_request(const std::string& body, bool chat) {
  json j;
  try {
    // json_from_text, not json::parse: a number too large for a double
    // (1e999) is another library exception than a syntax error, and one
    // that escaped here was the client's fault answered as the server's 500.
    j = json_from_text(body, "request", "the body is not valid JSON");
  } catch (const Error& e) {
    throw ApiError(400, e.problem());
  }
  if (!j.is_object()) throw ApiError(400, "the body must be a JSON object");
  ApiRequest r;
  r.chat = chat;
  static const std::set<std::string> known_neutral = {
      "frequency_penalty", "presence_penalty", "logprobs", "echo", "logit_bias", "top_logprobs", "suffix",
      "best_of",           "response_format",  "user"};
  for (const auto& [key, v] : j.items()) {
    if (key == "model") {
      if (!v.is_string()) bad(key, "must be a string");
      r.model = v.get<std::string>();
    } else if (key == "messages" && chat) {
      r.messages = read_messages(v);
    } else if (key == "prompt" && !chat) {
      read_prompt(v, r);
    } else if (key == "max_tokens" || (key == "max_completion_tokens" && chat)) {
      if (!v.is_null()) r.max_tokens = integer(v, key, 1, INT32_MAX);
    } else if (key == "temperature") {
      if (!v.is_null()) r.temperature = number(v, key, 0, 2);
    } else if (key == "top_p") {
      if (!v.is_null()) r.top_p = number(v, key, 0, 1);
      if (r.top_p == 0) bad(key, "must be above 0");
    } else if (key == "top_k") {
      // Not OpenAI's; vLLM and llama.cpp take it, with -1 or 0 for "no limit".
      if (!v.is_null()) r.top_k = std::max<int64_t>(0, integer(v, key, -1, INT32_MAX));
    } else if (key == "seed") {
      if (!v.is_null()) r.seed = static_cast<uint64_t>(integer(v, key, INT64_MIN, INT64_MAX));
    } else if (key == "stop") {
      if (v.is_string()) {
        r.stop = {v.get<std::string>()};
      } else if (v.is_array()) {
        if (v.size() > kMaxStopStrings) bad(key, "holds more than " + std::to_string(kMaxStopStrings) + " strings");
        for (const json& s : v) {
          if (!s.is_string()) bad(key, "must be a string or an array of strings");
          r.stop.push_back(s.get<std::string>());
        }
      } else if (!v.is_null()) {
        bad(key, "must be a string or an array of strings");
      }
    } else if (key == "n") {
      if (!v.is_null()) r.n = integer(v, key, 1, kMaxChoices);
    } else if (key == "stream") {
      if (!v.is_boolean() && !v.is_null()) bad(key, "must be true or false");
      r.stream = v.is_boolean() && v.get<bool>();
    } else if (key == "ignore_eos") {
      if (!v.is_boolean()) bad(key, "must be true or false");
      r.ignore_eos = v.get<bool>();
    } else if (key == "stream_options") {
      if (v.is_null()) continue;
      if (!v.is_object()) bad(key, "must be an object");
      for (const auto& [option, value] : v.items()) {
        if (option != "include_usage") bad(key + "." + option, "is not supported");
        if (!value.is_boolean()) bad(key + ".include_usage", "must be true or false");
        r.include_usage = value.get<bool>();
      }
    } else if (known_neutral.count(key)) {
      if (!neutral(key, v)) bad(key, "is not supported by this server, except at its default (" + v.dump() + " given)");
    } else {
      throw ApiError(400, "unrecognized request argument supplied: " + key, key);
    }
  }
  if (chat && r.messages.empty()) bad("messages", "is required");
  if (!chat && r.text_prompts.empty() && r.id_prompts.empty()) bad("prompt", "is required");
  if (j.contains("stream_options") && !j["stream_options"].is_null() && !r.stream) {
    bad("stream_options", "is only allowed when 'stream' is true");
  }
  return r;
}

}  // namespace spillway::infer
