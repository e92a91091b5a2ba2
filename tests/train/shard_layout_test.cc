// The state's layout split over ranks: every element owned by exactly one
// rank, the shares rebuilding the layout, ZeRO-1's one region the
// contiguous split the GPU engine has always used, and regions by layer
// that split evenly into NCCL's blocks.
#include "train/shard_layout.h"

#include <gtest/gtest.h>

#include <numeric>

#include "base/status.h"
#include "model/llama_config_json.h"
#include "model/llama_weights.h"

namespace spillway::train {
namespace {

struct Stacks {
  std::vector<std::vector<int>> parts;
  std::vector<int64_t> numel;
  std::vector<bool> decayed;  // by tensor
  std::vector<std::string> names;
};

// LLaMA's tensors, one stack each, as the separate-projection graph has them.
Stacks llama_stacks(const model::LlamaConfig& c) {
  Stacks s;
  int t = 0;
  for (const auto& spec : model::parameter_specs(c)) {
    s.parts.push_back({t++});
    s.numel.push_back(spec.shape.numel());
    s.decayed.push_back(spec.shape.rank() >= 2);
    s.names.push_back(spec.name);
  }
  return s;
}

std::vector<bool> decayed_stacks(const Stacks& s) {
  std::vector<bool> d;
  for (const auto& p : s.parts) d.push_back(s.decayed[static_cast<size_t>(p.front())]);
  return d;
}

// Each rank's share of an array holding its layout index at each element,
// gathered back through for_each_owner, equals the array.
void expect_shares_rebuild_the_layout(const Stacks& s, const std::vector<int>& keys, int ranks) {
  std::vector<StateLayout> per_rank;
  for (int r = 0; r < ranks; ++r) per_rank.push_back(lay_out_state(s.parts, s.numel, s.decayed, keys, ranks, r, 128));
  const StateLayout& l = per_rank[0];
  std::vector<std::vector<uint64_t>> shares(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    shares[static_cast<size_t>(r)].assign(l.shards.share_elements(), UINT64_MAX);
    for (size_t t = 0; t < s.numel.size(); ++t) {
      per_rank[static_cast<size_t>(r)].shards.for_each_mine(
          l.tensor_at[t], static_cast<uint64_t>(s.numel[t]), [&](uint64_t skip, uint64_t count, uint64_t at) {
            for (uint64_t k = 0; k < count; ++k) shares[static_cast<size_t>(r)][at + k] = l.tensor_at[t] + skip + k;
          });
    }
  }
  for (size_t t = 0; t < s.numel.size(); ++t) {
    uint64_t covered = 0;
    l.shards.for_each_owner(l.tensor_at[t], static_cast<uint64_t>(s.numel[t]),
                            [&](int owner, uint64_t skip, uint64_t count, uint64_t at) {
                              EXPECT_EQ(skip, covered) << "tensor " << t;
                              for (uint64_t k = 0; k < count; ++k) {
                                ASSERT_EQ(shares[static_cast<size_t>(owner)][at + k], l.tensor_at[t] + skip + k);
                              }
                              covered += count;
                            });
    EXPECT_EQ(covered, static_cast<uint64_t>(s.numel[t])) << "tensor " << t;
  }
}

TEST(ShardLayout, OneRegionIsTheContiguousSplit) {
  const Stacks s = llama_stacks(model::preset_config("tiny"));
  const std::vector<int> one(s.parts.size(), 0);
  const StateLayout whole = lay_out_state(s.parts, s.numel, s.decayed, {}, 1, 0, 128);
  for (int r = 0; r < 3; ++r) {
    const StateLayout l = lay_out_state(s.parts, s.numel, s.decayed, one, 3, r, 128);
    ASSERT_EQ(l.shards.regions().size(), 1u);
    EXPECT_EQ(l.tensor_at, whole.tensor_at);  // the ranks only pad the end
    EXPECT_EQ(l.elements % (3 * 128), 0u);
    EXPECT_EQ(l.shards.share_elements() * 3, l.elements);
    // The decayed stacks first: the share's decayed part is its prefix.
    const uint64_t lo = l.shards.share_elements() * static_cast<uint64_t>(r);
    const uint64_t expected = std::min(l.shards.share_elements(), l.decayed_elements > lo ? l.decayed_elements - lo : 0);
    EXPECT_EQ(l.shards.share_below(l.decayed_elements), expected);
  }
  expect_shares_rebuild_the_layout(s, one, 3);
}

TEST(ShardLayout, RegionsByLayerSplitEvenlyAndRebuildTheLayout) {
  const model::LlamaConfig c = model::preset_config("tiny");
  const Stacks s = llama_stacks(c);
  const std::vector<int> keys = layer_region_keys(s.names, decayed_stacks(s));
  for (int ranks : {2, 3, 4}) {
    const StateLayout l = lay_out_state(s.parts, s.numel, s.decayed, keys, ranks, 0, 128);
    // The embedding, each layer's matrices, lm_head (unless tied), the norms.
    const size_t expected = 1 + static_cast<size_t>(c.num_hidden_layers) + (c.tie_word_embeddings ? 0 : 1) + 1;
    ASSERT_EQ(l.shards.regions().size(), expected) << ranks << " ranks";
    for (const auto& r : l.shards.regions()) {
      EXPECT_EQ(r.elements % (128 * static_cast<uint64_t>(ranks)), 0u);
      EXPECT_EQ(r.first % 128, 0u);
    }
    // Every decayed stack lies below decayed_elements and the norms above.
    for (size_t j = 0; j < s.parts.size(); ++j) {
      EXPECT_EQ(l.stack_at[j] < l.decayed_elements, decayed_stacks(s)[j]) << s.names[j];
    }
    EXPECT_EQ(l.shards.share_below(l.decayed_elements),
              l.shards.share_elements() - l.shards.regions().back().piece);
    expect_shares_rebuild_the_layout(s, keys, ranks);
  }
}

TEST(ShardLayout, LayerKeysComeFromTheNames) {
  const std::vector<std::string> names{"model.embed_tokens.weight", "model.layers.0.input_layernorm.weight",
                                       "model.layers.0.self_attn.q_proj.weight", "model.layers.12.mlp.down_proj.weight",
                                       "lm_head.weight"};
  const std::vector<int> keys = layer_region_keys(names, {true, false, true, true, true});
  EXPECT_EQ(keys[1], -1);  // the norms share one region
  EXPECT_EQ(keys[2], 0);
  EXPECT_EQ(keys[3], 12);
  EXPECT_NE(keys[0], keys[4]);
  EXPECT_LT(keys[0], -1);
}

TEST(ShardLayout, RegionsThatDoNotSplitEvenlyAreRefused) {
  EXPECT_THROW(ShardLayout({{.first = 0, .elements = 10}}, 4, 0), Error);
  EXPECT_THROW(ShardLayout({{.first = 0, .elements = 8}, {.first = 16, .elements = 8}}, 4, 0), Error);
}

}  // namespace
}  // namespace spillway::train
