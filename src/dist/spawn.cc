#include "dist/spawn.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"

extern char** environ;

namespace spillway::dist {

namespace {

std::vector<pid_t> g_ranks;

void forward_term(int) {
  for (pid_t p : g_ranks) ::kill(p, SIGTERM);
}

// A port nothing listens on now, for the ranks' rendezvous.
uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  SPW_CHECK(fd >= 0, "--nproc-per-node", "cannot open a socket to find a free port");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  ::close(fd);
  SPW_CHECK(ok, "--nproc-per-node", "cannot find a free port on 127.0.0.1 for the ranks to meet");
  return ntohs(addr.sin_port);
}

std::vector<std::string> own_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t at = 0; at < all.size();) {
    const size_t end = all.find('\0', at);
    args.push_back(all.substr(at, end - at));
    at = end == std::string::npos ? all.size() : end + 1;
  }
  return args;
}

std::string how_it_ended(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

bool is_stopped_exit(int status) {
  return WIFEXITED(status) && (WEXITSTATUS(status) == 128 + SIGINT || WEXITSTATUS(status) == 128 + SIGTERM);
}

}  // namespace

int run_local_ranks(int n) {
  SPW_CHECK(n >= 1, "--nproc-per-node", "must be at least 1, got ", n);
  const std::vector<std::string> args = own_command_line();
  SPW_CHECK(!args.empty(), "--nproc-per-node", "cannot read this process's command line");
  const std::string port = std::to_string(free_port());
  std::fflush(stdout);
  std::fflush(stderr);
  struct sigaction term {};
  term.sa_handler = forward_term;
  ::sigaction(SIGTERM, &term, nullptr);
  ::signal(SIGINT, SIG_IGN);  // the terminal sends it to the ranks themselves
  for (int r = 0; r < n; ++r) {
    const pid_t pid = ::fork();
    SPW_CHECK(pid >= 0, "--nproc-per-node", "cannot start rank ", r);
    if (pid == 0) {
      ::signal(SIGINT, SIG_DFL);
      const std::string rank = std::to_string(r), world = std::to_string(n);
      ::setenv("RANK", rank.c_str(), 1);
      ::setenv("LOCAL_RANK", rank.c_str(), 1);
      ::setenv("WORLD_SIZE", world.c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", world.c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", port.c_str(), 1);
      std::vector<char*> argv;
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execve("/proc/self/exe", argv.data(), environ);
      std::fprintf(stderr, "spillway: rank %d: cannot start: exec failed\n", r);
      ::_exit(127);
    }
    g_ranks.push_back(pid);
  }
  int exit_code = 0, stopped_code = 0;
  std::vector<bool> alive(g_ranks.size(), true);
  size_t left = g_ranks.size();
  std::chrono::steady_clock::time_point kill_at{};
  while (left > 0) {
    int status = 0;
    const bool stopping = exit_code != 0;
    const pid_t done = ::waitpid(-1, &status, stopping ? WNOHANG : 0);
    if (done < 0 && errno == EINTR) continue;
    if (done < 0) break;
    if (done == 0) {  // stopping, and some rank has not ended yet
      if (std::chrono::steady_clock::now() >= kill_at) {
        for (size_t r = 0; r < g_ranks.size(); ++r) {
          if (alive[r]) ::kill(g_ranks[r], SIGKILL);
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    size_t rank = 0;
    while (rank < g_ranks.size() && g_ranks[rank] != done) ++rank;
    if (rank == g_ranks.size()) continue;
    alive[rank] = false;
    --left;
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (ok || stopping) continue;
    // A rank that a signal stopped after its checkpoint (see train_model)
    // exits with 128 + the signal, as do the others: the run's own code.
    if (is_stopped_exit(status)) {
      if (stopped_code == 0 || rank == 0) stopped_code = WEXITSTATUS(status);
      continue;
    }
    exit_code = 1;
    std::fprintf(stderr, "spillway: rank %zu: ended with %s; stopping the other ranks\n", rank,
                 how_it_ended(status).c_str());
    for (size_t r = 0; r < g_ranks.size(); ++r) {
      if (alive[r]) ::kill(g_ranks[r], SIGTERM);
    }
    kill_at = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  }
  return exit_code != 0 ? exit_code : stopped_code;
}

}  // namespace spillway::dist
