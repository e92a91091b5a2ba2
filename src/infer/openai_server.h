// The OpenAI-compatible HTTP server over a BatchEngine (cpp-httplib):
//   POST /v1/chat/completions, POST /v1/completions   (streamed as
//        server-sent events ending with "data: [DONE]", or whole)
//   GET  /v1/models, /health, /metrics (Prometheus text)
// Errors are OpenAI's JSON error objects with their HTTP status. With an API
// key, /v1/ paths need "Authorization: Bearer KEY". A client that goes away
// has its requests cancelled, which frees their place in the batch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "infer/batch_engine.h"
#include "model/tokenizer.h"

namespace spillway::infer {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port
  std::string api_key;  // empty: none asked for
  std::string model_name;
  int64_t context = 0;  // the model's max_position_embeddings
  int threads = 0;      // connections served at once (0: 16); a waiting request holds one
  size_t max_body_bytes = 8u << 20;
};

class OpenAiServer {
 public:
  OpenAiServer(BatchEngine& engine, const Tokenizer& tokenizer, const ServerOptions& options);
  ~OpenAiServer();
  // Binds the port and returns it (the one chosen, with port 0). Throws
  // Error naming host:port when it cannot.
  int bind();
  // Serves until stop(); the port must be bound.
  void serve();
  void stop();  // from any thread

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace spillway::infer
