#include "dist/tcp_store.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "base/status.h"

namespace spillway::dist {

namespace {

constexpr char kSet = 'S', kGet = 'G', kFound = 'K', kTimedOut = 'T';

std::string where(const std::string& host, uint16_t port) { return host + ":" + std::to_string(port); }

// Whole messages over a stream socket; false when the peer is gone.
bool send_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t sent = ::send(fd, p, n, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) return false;
    p += sent;
    n -= static_cast<size_t>(sent);
  }
  return true;
}

bool recv_all(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t got = ::recv(fd, p, n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

bool send_bytes(int fd, const std::string& s) {
  const auto n = static_cast<uint32_t>(s.size());
  return send_all(fd, &n, 4) && send_all(fd, s.data(), s.size());
}

bool recv_bytes(int fd, std::string& s) {
  uint32_t n = 0;
  if (!recv_all(fd, &n, 4)) return false;
  s.resize(n);
  return recv_all(fd, s.data(), n);
}

}  // namespace

// Serves the store from threads of the serving rank's process: one accepts,
// one answers each connected rank.
class TcpStore::Server {
 public:
  Server(uint16_t port, const std::string& where) {
    fd_ = ::socket(AF_INET6, SOCK_STREAM, 0);
    const bool v6 = fd_ >= 0;
    if (!v6) fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    SPW_CHECK(fd_ >= 0, "rendezvous " + where, "cannot open a socket: ", std::strerror(errno));
    const int one = 1, zero = 0;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int bound;
    if (v6) {
      ::setsockopt(fd_, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      sockaddr_in6 addr{};
      addr.sin6_family = AF_INET6;
      addr.sin6_addr = in6addr_any;
      addr.sin6_port = htons(port);
      bound = ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    } else {
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_ANY);
      addr.sin_port = htons(port);
      bound = ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    }
    if (bound != 0 || ::listen(fd_, 128) != 0) {
      const std::string reason = std::strerror(errno);
      ::close(fd_);
      throw Error("rendezvous " + where, "cannot listen there (" + reason + "): is MASTER_PORT taken?");
    }
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                             : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    accepting_ = std::thread([this] { accept_loop(); });
  }

  ~Server() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      for (int c : clients_) ::shutdown(c, SHUT_RDWR);
    }
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    changed_.notify_all();
    accepting_.join();
    for (auto& t : answering_) t.join();
    for (int c : clients_) ::close(c);
  }

  uint16_t port() const { return port_; }

 private:
  void accept_loop() {
    for (;;) {
      const int c = ::accept(fd_, nullptr, nullptr);
      std::lock_guard lock(mutex_);
      if (stopping_) {
        if (c >= 0) ::close(c);
        return;
      }
      if (c < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;
      }
      clients_.push_back(c);
      answering_.emplace_back([this, c] { answer(c); });
    }
  }

  // Requests of one rank until it hangs up.
  void answer(int c) {
    for (;;) {
      char op = 0;
      std::string key, value;
      if (!recv_all(c, &op, 1) || !recv_bytes(c, key)) return;
      if (op == kSet) {
        if (!recv_bytes(c, value)) return;
        {
          std::lock_guard lock(mutex_);
          data_[key] = std::move(value);
        }
        changed_.notify_all();
        if (!send_all(c, &kFound, 1)) return;
        continue;
      }
      uint32_t wait_ms = 0;
      if (op != kGet || !recv_all(c, &wait_ms, 4)) return;
      std::unique_lock lock(mutex_);
      const bool found = changed_.wait_for(lock, std::chrono::milliseconds(wait_ms),
                                           [&] { return stopping_ || data_.count(key) > 0; }) &&
                         data_.count(key) > 0;
      if (found) value = data_[key];
      lock.unlock();
      const char status = found ? kFound : kTimedOut;
      if (!send_all(c, &status, 1) || (found && !send_bytes(c, value))) return;
    }
  }

  int fd_ = -1;
  uint16_t port_ = 0;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> data_;
  bool stopping_ = false;
  std::vector<int> clients_;
  std::thread accepting_;
  std::vector<std::thread> answering_;
};

TcpStore::TcpStore(std::string host, uint16_t port, bool serve, std::chrono::milliseconds timeout)
    : host_(std::move(host)), port_(port), timeout_(timeout) {
  if (serve) {
    server_ = std::make_unique<Server>(port, where(host_, port));
    port_ = server_->port();
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port_);
  const int rc = ::getaddrinfo(host_.c_str(), service.c_str(), &hints, &found);
  SPW_CHECK(rc == 0, "rendezvous " + where(host_, port_), "cannot resolve MASTER_ADDR: ", ::gai_strerror(rc));
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  std::string last_error;
  while (fd_ < 0) {
    for (addrinfo* a = found; a && fd_ < 0; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        fd_ = fd;
        break;
      }
      last_error = std::strerror(errno);
      ::close(fd);
    }
    if (fd_ >= 0 || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::freeaddrinfo(found);
  if (fd_ < 0) {
    server_.reset();
    throw Error("rendezvous " + where(host_, port_),
                "no rank 0 answered within " + std::to_string(timeout_.count() / 1000) + " s (" + last_error + ")");
  }
  const int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
  server_.reset();
}

std::vector<char> TcpStore::request(char op, const std::string& key, const std::vector<char>& value,
                                    std::chrono::milliseconds wait) {
  const std::string at = "rendezvous " + where(host_, port_);
  bool sent = send_all(fd_, &op, 1) && send_bytes(fd_, key);
  if (op == kSet) {
    sent = sent && send_bytes(fd_, std::string(value.begin(), value.end()));
  } else {
    const auto wait_ms = static_cast<uint32_t>(std::min<int64_t>(wait.count(), UINT32_MAX));
    sent = sent && send_all(fd_, &wait_ms, 4);
  }
  char status = 0;
  SPW_CHECK(sent && recv_all(fd_, &status, 1), at, "the store closed (did rank 0 end?)");
  SPW_CHECK(status == kFound, at, "'", key, "' was not set within ", wait.count() / 1000,
            " s: a rank did not arrive");
  if (op == kSet) return {};
  std::string got;
  SPW_CHECK(recv_bytes(fd_, got), at, "the store closed (did rank 0 end?)");
  return {got.begin(), got.end()};
}

void TcpStore::set(const std::string& key, const std::vector<char>& value) { request(kSet, key, value, timeout_); }

std::vector<char> TcpStore::get(const std::string& key) { return request(kGet, key, {}, timeout_); }

std::vector<char> TcpStore::get(const std::string& key, std::chrono::milliseconds wait) {
  return request(kGet, key, {}, wait);
}

}  // namespace spillway::dist
