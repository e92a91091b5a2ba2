// The rank grid of a run: degrees of data, pipeline, context and tensor
// parallelism, dp x pp x cp x tp = the world, tensor parallelism innermost
// (its ranks are neighbours, on one host's fastest links). One object owns
// the map from a rank to its coordinates and the groups of ranks that
// communicate along each dimension.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace spillway::dist {

enum class Dim : uint8_t { dp, pp, cp, tp };
inline constexpr int kDims = 4;
std::string dim_name(Dim dim);  // "dp", "pp", ...

struct Coordinates {
  std::array<int, kDims> at{};
  int operator[](Dim d) const { return at[static_cast<size_t>(d)]; }
};

class RankGrid {
 public:
  // A degree of 0 for dp takes what the others leave of the world. Error
  // naming the degrees and the world when their product is not the world.
  RankGrid(int dp, int pp, int cp, int tp, int world);

  int world() const { return world_; }
  int degree(Dim d) const { return degree_[static_cast<size_t>(d)]; }
  Coordinates coordinates(int rank) const;
  int rank_of(const Coordinates& c) const;
  // The ranks whose coordinates equal `rank`'s but along `d`, in order of
  // that coordinate: `rank`'s group for collectives along `d`.
  std::vector<int> group(Dim d, int rank) const;
  // Which group along `d` `rank` is in (0 .. world / degree(d) - 1): the key
  // its group's communicator is made under.
  int group_index(Dim d, int rank) const;
  // The ranks whose coordinates equal `rank`'s along pp and tp, in order of
  // (dp, cp): those holding the same part of the model's state (context
  // parallelism replicates the weights, as data parallelism does), among
  // which its gradients are summed and its state may be sharded.
  std::vector<int> replicas(int rank) const;
  int replica_position(int rank) const;  // `rank`'s place in replicas(rank)
  int replica_group_index(int rank) const;  // which such group: pp x tp of them

 private:
  std::array<int, kDims> degree_{};
  int world_ = 1;
};

}  // namespace spillway::dist
