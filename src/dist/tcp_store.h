// The rendezvous of a run's ranks: a key-value store served by rank 0 at
// MASTER_ADDR:MASTER_PORT over TCP, which every rank (rank 0 too) reaches as
// a client. Ranks publish their addresses and ids there (Gloo's, NCCL's) and
// read each other's; a get waits until its key is set, for at most the
// store's timeout, so a rank that never arrives ends the others with an
// error naming what they waited for instead of a hang.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device/communicator.h"

namespace spillway::dist {

class TcpStore final : public RendezvousStore {
 public:
  // `serve`: listen at `port` (on every address) and serve the store; every
  // instance connects to `host`:`port` as a client, retrying until the
  // timeout while the server comes up.
  TcpStore(std::string host, uint16_t port, bool serve, std::chrono::milliseconds timeout);
  ~TcpStore() override;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::vector<char>& value) override;
  std::vector<char> get(const std::string& key) override;
  // As get, waiting at most `wait` instead of the store's timeout.
  std::vector<char> get(const std::string& key, std::chrono::milliseconds wait);
  std::chrono::milliseconds timeout() const override { return timeout_; }
  // The port served (useful with port 0, which takes a free one).
  uint16_t port() const { return port_; }

 private:
  class Server;
  std::vector<char> request(char op, const std::string& key, const std::vector<char>& value,
                            std::chrono::milliseconds wait);

  std::string host_;
  uint16_t port_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<Server> server_;
  int fd_ = -1;
};

}  // namespace spillway::dist
