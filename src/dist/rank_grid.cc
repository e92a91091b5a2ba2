#include "dist/rank_grid.h"

#include "base/status.h"

namespace spillway::dist {

std::string dim_name(Dim dim) {
  static const char* const kNames[] = {"dp", "pp", "cp", "tp"};
  return kNames[static_cast<size_t>(dim)];
}

RankGrid::RankGrid(int dp, int pp, int cp, int tp, int world) : world_(world) {
  SPW_CHECK(world >= 1, "rank grid", "a world of ", world, " ranks");
  SPW_CHECK(pp >= 1 && cp >= 1 && tp >= 1 && dp >= 0, "--dp", "degrees must be at least 1 (dp may be 0: the rest), got dp ",
            dp, ", pp ", pp, ", cp ", cp, ", tp ", tp);
  const int others = pp * cp * tp;
  if (dp == 0) {
    SPW_CHECK(world % others == 0, "--dp", "the world of ", world, " ranks is not a multiple of pp x cp x tp = ",
              others);
    dp = world / others;
  }
  SPW_CHECK(static_cast<int64_t>(dp) * others == world, "--dp",
            "dp x pp x cp x tp = ", dp, " x ", pp, " x ", cp, " x ", tp, " = ", static_cast<int64_t>(dp) * others,
            ", but the run has ", world, " ranks");
  degree_ = {dp, pp, cp, tp};
}

// Rank = ((dp * pp_degree + pp) * cp_degree + cp) * tp_degree + tp.
Coordinates RankGrid::coordinates(int rank) const {
  SPW_CHECK(rank >= 0 && rank < world_, "rank grid", "rank ", rank, " is outside a world of ", world_);
  Coordinates c;
  for (int d = kDims - 1; d >= 0; --d) {
    c.at[static_cast<size_t>(d)] = rank % degree_[static_cast<size_t>(d)];
    rank /= degree_[static_cast<size_t>(d)];
  }
  return c;
}

int RankGrid::rank_of(const Coordinates& c) const {
  int rank = 0;
  for (int d = 0; d < kDims; ++d) rank = rank * degree_[static_cast<size_t>(d)] + c.at[static_cast<size_t>(d)];
  return rank;
}

std::vector<int> RankGrid::group(Dim d, int rank) const {
  Coordinates c = coordinates(rank);
  std::vector<int> ranks;
  for (int i = 0; i < degree(d); ++i) {
    c.at[static_cast<size_t>(d)] = i;
    ranks.push_back(rank_of(c));
  }
  return ranks;
}

int RankGrid::group_index(Dim d, int rank) const {
  Coordinates c = coordinates(rank);
  c.at[static_cast<size_t>(d)] = 0;
  // The group's first rank, ranked among the groups' first ranks.
  int index = 0, first = rank_of(c);
  for (int r = 0; r < first; ++r) index += coordinates(r)[d] == 0 ? 1 : 0;
  return index;
}

std::vector<int> RankGrid::replicas(int rank) const {
  Coordinates c = coordinates(rank);
  std::vector<int> ranks;
  for (int dp = 0; dp < degree(Dim::dp); ++dp) {
    for (int cp = 0; cp < degree(Dim::cp); ++cp) {
      c.at[static_cast<size_t>(Dim::dp)] = dp;
      c.at[static_cast<size_t>(Dim::cp)] = cp;
      ranks.push_back(rank_of(c));
    }
  }
  return ranks;
}

int RankGrid::replica_position(int rank) const {
  const Coordinates c = coordinates(rank);
  return c[Dim::dp] * degree(Dim::cp) + c[Dim::cp];
}

int RankGrid::replica_group_index(int rank) const {
  const Coordinates c = coordinates(rank);
  return c[Dim::pp] * degree(Dim::tp) + c[Dim::tp];
}

}  // namespace spillway::dist
