#include "train/shard_layout.h"

#include <algorithm>

#include "base/status.h"

namespace spillway::train {

ShardLayout::ShardLayout(std::vector<Region> regions, int ranks, int rank)
    : regions_(std::move(regions)), ranks_(ranks), rank_(rank) {
  SPW_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "shard layout", "rank ", rank, " of ", ranks);
  const auto n = static_cast<uint64_t>(ranks);
  uint64_t expected = regions_.empty() ? 0 : regions_.front().first;
  for (Region& r : regions_) {
    SPW_CHECK(r.first == expected && r.elements % n == 0, "shard layout",
              "regions must follow each other and split evenly over ", ranks, " ranks");
    r.piece = r.elements / n;
    r.share_at = share_;
    share_ += r.piece;
    expected = r.first + r.elements;
  }
}

uint64_t ShardLayout::padded(uint64_t elements, int ranks, uint64_t align) {
  const uint64_t unit = align * static_cast<uint64_t>(ranks);
  return (elements + unit - 1) / unit * unit;
}

void ShardLayout::for_each_owner(
    uint64_t first, uint64_t n, const std::function<void(int, uint64_t, uint64_t, uint64_t)>& f) const {
  const uint64_t end = first + n;
  // The first region that ends past `first`.
  auto it = std::upper_bound(regions_.begin(), regions_.end(), first,
                             [](uint64_t at, const Region& r) { return at < r.first + r.elements; });
  for (; it != regions_.end() && it->first < end; ++it) {
    for (int owner = 0; owner < ranks_; ++owner) {
      const uint64_t lo = it->first + it->piece * static_cast<uint64_t>(owner), hi = lo + it->piece;
      const uint64_t a = std::max(first, lo), b = std::min(end, hi);
      if (a < b) f(owner, a - first, b - a, it->share_at + (a - lo));
    }
  }
}

void ShardLayout::for_each_mine(uint64_t first, uint64_t n,
                                const std::function<void(uint64_t, uint64_t, uint64_t)>& f) const {
  for_each_owner(first, n, [&](int owner, uint64_t skip, uint64_t count, uint64_t at) {
    if (owner == rank_) f(skip, count, at);
  });
}

uint64_t ShardLayout::share_below(uint64_t end) const {
  uint64_t below = 0;
  for (const Region& r : regions_) {
    const uint64_t lo = r.first + r.piece * static_cast<uint64_t>(rank_);
    if (end > lo) below += std::min(end - lo, r.piece);
  }
  return below;
}

StateLayout lay_out_state(const std::vector<std::vector<int>>& parts, const std::vector<int64_t>& numel,
                          const std::vector<bool>& decayed, const std::vector<int>& region_key, int ranks, int rank,
                          uint64_t align) {
  SPW_CHECK(region_key.empty() || region_key.size() == parts.size(), "state layout", region_key.size(),
            " region keys for ", parts.size(), " stacks");
  std::vector<size_t> order;
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t j = 0; j < parts.size(); ++j) {
      if (decayed[static_cast<size_t>(parts[j].front())] == (pass == 0)) order.push_back(j);
    }
  }
  auto key = [&](size_t j) { return region_key.empty() ? 0 : region_key[j]; };
  StateLayout out;
  out.tensor_at.assign(numel.size(), 0);
  out.stack_at.assign(parts.size(), 0);
  std::vector<ShardLayout::Region> regions;
  uint64_t cursor = 0;
  auto close_region = [&] {
    if (regions.empty()) return;
    ShardLayout::Region& r = regions.back();
    r.elements = ShardLayout::padded(cursor - r.first, ranks, align);
    cursor = r.first + r.elements;
  };
  bool decayed_seen = false;
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t j = order[k];
    cursor = (cursor + align - 1) / align * align;
    if (k == 0 || key(j) != key(order[k - 1])) {
      close_region();
      regions.push_back({.first = cursor});
    }
    const bool decay = decayed[static_cast<size_t>(parts[j].front())];
    if (!decay && !decayed_seen) {
      out.decayed_elements = cursor;
      decayed_seen = true;
    }
    out.stack_at[j] = cursor;
    for (int t : parts[j]) {
      out.tensor_at[static_cast<size_t>(t)] = cursor;
      cursor += static_cast<uint64_t>(numel[static_cast<size_t>(t)]);
    }
  }
  close_region();
  out.elements = cursor;
  if (!decayed_seen) out.decayed_elements = cursor;
  out.shards = ShardLayout(std::move(regions), ranks, rank);
  return out;
}

std::vector<int> layer_region_keys(const std::vector<std::string>& names, const std::vector<bool>& decayed) {
  const std::string prefix = "model.layers.";
  std::vector<int> keys;
  for (size_t j = 0; j < names.size(); ++j) {
    if (!decayed[j]) {
      keys.push_back(-1);
    } else if (names[j].rfind(prefix, 0) == 0) {
      keys.push_back(std::stoi(names[j].substr(prefix.size())));
    } else {
      keys.push_back(-2 - static_cast<int>(j));  // a region of its own
    }
  }
  return keys;
}

}  // namespace spillway::train
