// The ranks of one run, met: the rendezvous store rank 0 serves, the rank
// grid, and a communicator for each dimension of the grid whose degree is
// more than one, among the ranks of this rank's group along it (Gloo on the
// CPU, NCCL on GPUs).
#pragma once

#include <array>
#include <chrono>
#include <memory>
#include <string>

#include "device/communicator.h"
#include "dist/launch_env.h"
#include "dist/rank_grid.h"

namespace spillway::dist {

class TcpStore;

class World {
 public:
  // Meets the other ranks of `env` (at most `timeout` for each wait) and
  // checks that they all run this binary with the same `fingerprint` (the
  // resolved run configuration): Error naming the first rank that differs.
  // `gpu_ordinal` >= 0 makes NCCL communicators on that GPU, else Gloo ones.
  World(const LaunchEnv& env, const RankGrid& grid, int gpu_ordinal, const std::string& fingerprint,
        std::chrono::milliseconds timeout);
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  int rank() const { return rank_; }
  int size() const { return grid_.world(); }
  const RankGrid& grid() const { return grid_; }
  // This rank's communicator along `d`; null where the degree is 1.
  Communicator* group(Dim d) const { return groups_[static_cast<size_t>(d)].get(); }
  // This rank's communicator among RankGrid::replicas (dp x cp): the dp or
  // cp group's where the other's degree is 1; null where both are 1.
  Communicator* replicas() const {
    if (replicas_) return replicas_.get();
    return grid_.degree(Dim::cp) > 1 ? group(Dim::cp) : group(Dim::dp);
  }
  // Returns once every rank of the world has called it, waiting at most
  // `wait` (rank 0 preparing what the others then read can take long; a
  // rank 0 that ends ends the wait at once, with an error).
  void barrier(std::chrono::milliseconds wait);

 private:
  int rank_;
  RankGrid grid_;
  std::unique_ptr<TcpStore> store_;
  int barriers_ = 0;
  std::array<std::unique_ptr<Communicator>, kDims> groups_;
  std::unique_ptr<Communicator> replicas_;  // made only where cp > 1 and dp > 1
};

// FNV-1a over the bytes of this process's executable: what tells two
// builds apart.
uint64_t executable_fingerprint();

}  // namespace spillway::dist
