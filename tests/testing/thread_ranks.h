// The ranks of one run as threads of the test process, each meeting the
// others through its own store client and communicators (Gloo on the CPU,
// NCCL with gpus): what the layout tests run a rank graph on.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "dist/launch_env.h"
#include "dist/rank_grid.h"
#include "dist/tcp_store.h"
#include "dist/world.h"

namespace spillway::testing {

// body(world, rank) on `grid.world()` threads; each rank's error ("" where
// none). With `gpus`, rank r's communicators are NCCL's on GPU r.
inline std::vector<std::string> run_thread_ranks(const dist::RankGrid& grid,
                                                 const std::function<void(dist::World&, int)>& body,
                                                 bool gpus = false) {
  const int n = grid.world();
  const uint16_t port = dist::TcpStore("127.0.0.1", 0, true, std::chrono::seconds(1)).port();
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        dist::LaunchEnv env;
        env.rank = rank;
        env.world = n;
        env.master_port = port;
        env.launcher = "test";
        dist::World world(env, grid, gpus ? rank : -1, "same", std::chrono::seconds(60));
        body(world, rank);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(rank)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace spillway::testing
