#include "infer/openai_server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <map>
#include <mutex>
#include <sstream>

#include "base/status.h"
#include "infer/openai_generation.h"
#include "infer/peer_socket.h"
#include "infer/server_metrics.h"

namespace spillway::infer {

using nlohmann::json;
using namespace std::chrono_literals;

namespace {

// Text from a model may hold bytes that are not UTF-8 (a byte token alone):
// they go out as U+FFFD rather than failing the response.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(dump(error_body(e)), "application/json");
}

json usage_of(int64_t prompt, int64_t completion) {
  return json{{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
}

// How often a waiting request looks for progress and for its client.
constexpr auto kPollInterval = 100ms;

}  // namespace

struct OpenAiServer::Impl {
  BatchEngine& engine;
  const Tokenizer& tokenizer;
  ServerOptions options;
  ServedModel model;
  httplib::Server http;
  ServerMetrics metrics;
  std::atomic<uint64_t> next_id{1};
  const int64_t started = static_cast<int64_t>(std::time(nullptr));
  int port = -1;

  Impl(BatchEngine& e, const Tokenizer& t, const ServerOptions& o) : engine(e), tokenizer(t), options(o) {
    model.tokenizer = &tokenizer;
    model.context = options.context;
  }

  std::string new_id(bool chat) {
    std::ostringstream s;
    s << (chat ? "chatcmpl-" : "cmpl-") << std::hex << started << '-' << next_id++;
    return s.str();
  }

  json choice_json(bool chat, size_t index, const std::string& text, const std::string& finish) const {
    json c{{"index", index}, {"logprobs", nullptr}, {"finish_reason", finish}};
    if (chat) {
      c["message"] = {{"role", "assistant"}, {"content", text}};
    } else {
      c["text"] = text;
    }
    return c;
  }

  json chunk_json(bool chat, const std::string& id, int64_t created, size_t index, const std::string& text,
                  const std::optional<std::string>& finish, bool first) const {
    json c{{"index", index}, {"logprobs", nullptr}, {"finish_reason", finish ? json(*finish) : json(nullptr)}};
    if (chat) {
      json delta = json::object();
      if (first) delta["role"] = "assistant";
      if (first || !text.empty()) delta["content"] = text;
      c["delta"] = delta;
    } else {
      c["text"] = text;
    }
    return json{{"id", id},
                {"object", chat ? "chat.completion.chunk" : "text_completion"},
                {"created", created},
                {"model", options.model_name},
                {"choices", json::array({c})}};
  }

  void generate(const httplib::Request& req, httplib::Response& res, bool chat) {
    std::shared_ptr<RunningChoices> running;
    std::shared_ptr<PreparedRequest> p;
    try {
      p = std::make_shared<PreparedRequest>(prepare_request(parse_api_request(req.body, chat), model, engine));
      running = std::make_shared<RunningChoices>(engine, tokenizer, *p);
    } catch (const ApiError& e) {
      send_error(res, e);
      return;
    }
    const std::string id = new_id(chat);
    const auto created = static_cast<int64_t>(std::time(nullptr));
    const int client = peer_socket(req.remote_addr, req.remote_port);
    if (!p->api.stream) {
      std::vector<std::string> texts(running->size()), finishes(running->size());
      try {
        while (!running->done()) {
          for (RunningChoices::Event& e : running->poll(kPollInterval)) {
            texts[e.index] += e.text;
            if (e.finish_reason) finishes[e.index] = *e.finish_reason;
          }
          if (!running->done() && client >= 0 && peer_closed(client)) {
            running->cancel();
            metrics.count_disconnect();
            res.status = 499;  // nobody is left to read an answer
            return;
          }
        }
      } catch (const ApiError& e) {
        send_error(res, e);
        return;
      }
      metrics.record_request(p->prompt_tokens, running->completion_tokens(), running->first_token_seconds());
      json choices = json::array();
      for (size_t i = 0; i < texts.size(); ++i) choices.push_back(choice_json(chat, i, texts[i], finishes[i]));
      const json body{{"id", id},           {"object", chat ? "chat.completion" : "text_completion"},
                      {"created", created}, {"model", options.model_name},
                      {"choices", choices}, {"usage", usage_of(p->prompt_tokens, running->completion_tokens())}};
      res.set_content(dump(body), "application/json");
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [this, running, p, id, created, chat, client](
                                                              size_t, httplib::DataSink& sink) {
      auto send = [&](const std::string& data) {
        const std::string event = "data: " + data + "\n\n";
        return sink.write(event.data(), event.size());
      };
      bool ok = true;
      if (chat) {  // each choice opens with the assistant's role
        for (size_t i = 0; i < running->size() && ok; ++i)
          ok = send(dump(chunk_json(true, id, created, i, "", {}, true)));
      }
      try {
        while (ok && !running->done()) {
          const std::vector<RunningChoices::Event> events = running->poll(kPollInterval);
          for (const RunningChoices::Event& e : events) {
            if (!ok) break;
            if (!e.text.empty()) ok = send(dump(chunk_json(chat, id, created, e.index, e.text, {}, false)));
            if (ok && e.finish_reason)
              ok = send(dump(chunk_json(chat, id, created, e.index, "", e.finish_reason, false)));
          }
          if (ok && events.empty() && client >= 0 && peer_closed(client)) ok = false;
        }
      } catch (const ApiError& e) {
        ok = ok && send(dump(error_body(e)));
      } catch (const std::exception& e) {
        // This runs after the handler, outside cpp-httplib's exception
        // handler: nothing may escape into its worker thread.
        ok = ok &&
             send(dump(error_body(ApiError(500, std::string("internal error: ") + e.what(), "", "", "server_error"))));
      }
      if (!ok) {
        running->cancel();
        metrics.count_disconnect();
        return false;
      }
      metrics.record_request(p->prompt_tokens, running->completion_tokens(), running->first_token_seconds());
      if (p->api.include_usage) {
        const json last{{"id", id},
                        {"object", chat ? "chat.completion.chunk" : "text_completion"},
                        {"created", created},
                        {"model", options.model_name},
                        {"choices", json::array()},
                        {"usage", usage_of(p->prompt_tokens, running->completion_tokens())}};
        send(dump(last));
      }
      send("[DONE]");
      sink.done();
      return true;
    });
  }

  void routes() {
    const int threads = options.threads > 0 ? options.threads : 16;
    http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    http.set_payload_max_length(options.max_body_bytes);
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (options.api_key.empty() || req.path.rfind("/v1/", 0) != 0) return httplib::Server::HandlerResponse::Unhandled;
      if (req.get_header_value("Authorization") == "Bearer " + options.api_key) {
        return httplib::Server::HandlerResponse::Unhandled;
      }
      send_error(res,
                 ApiError(401, "missing or wrong API key: send 'Authorization: Bearer KEY'", "", "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    });
    http.Post("/v1/chat/completions",
              [this](const httplib::Request& q, httplib::Response& r) { generate(q, r, true); });
    http.Post("/v1/completions", [this](const httplib::Request& q, httplib::Response& r) { generate(q, r, false); });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      const json m{{"id", options.model_name},
                   {"object", "model"},
                   {"created", started},
                   {"owned_by", "spillway"},
                   {"max_model_len", options.context}};
      res.set_content(dump(json{{"object", "list"}, {"data", json::array({m})}}), "application/json");
    });
    http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"status":"ok"})", "application/json");
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics.prometheus_text(engine.stats(), engine.description()), "text/plain; version=0.0.4");
    });
    http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      if (res.status == 404) {
        send_error(res, ApiError(404, "no route for " + req.method + " " + req.path, "", "not_found"));
      } else if (res.status == 413) {
        send_error(res, ApiError(413, "the request body is larger than this server takes", "", "payload_too_large"));
      } else {
        send_error(res,
                   ApiError(res.status, "the request could not be served (HTTP " + std::to_string(res.status) + ")"));
      }
    });
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "unknown error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      send_error(res, ApiError(500, "internal error: " + what, "", "", "server_error"));
    });
    http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      metrics.count_response(req.path, res.status);
    });
  }
};

OpenAiServer::OpenAiServer(BatchEngine& engine, const Tokenizer& tokenizer, const ServerOptions& options)
    : impl_(std::make_unique<Impl>(engine, tokenizer, options)) {
  impl_->routes();
}

OpenAiServer::~OpenAiServer() = default;

int OpenAiServer::bind() {
  Impl& s = *impl_;
  s.port = s.options.port == 0 ? s.http.bind_to_any_port(s.options.host)
                               : (s.http.bind_to_port(s.options.host, s.options.port) ? s.options.port : -1);
  SPW_CHECK(s.port > 0, s.options.host + ":" + std::to_string(s.options.port),
            "cannot listen there (in use, or not an address of this machine)");
  return s.port;
}

void OpenAiServer::serve() { impl_->http.listen_after_bind(); }

void OpenAiServer::stop() { impl_->http.stop(); }

}  // namespace spillway::infer
