// The dropout op in the graph (ops/dropout.h): LoRA's dropout on an
// adapter's input.
#pragma once

#include <cstdint>
#include <string_view>

#include "graph/builder.h"

namespace spillway::ops {

// x with each element dropped with probability p (0 < p < 1) and the rest
// scaled by 1 / (1 - p). `key` is the micro-batch's draw key (i32 [2], the
// step's input); `salt` tells this node's draws from every other's, so two
// nodes with the same key drop different elements. Its gradient is the same
// op over dout: the same elements dropped, the rest scaled alike.
graph::Value dropout(graph::Builder& b, graph::Value x, graph::Value key, double p, uint32_t salt,
                     std::string_view name = "dropout");

}  // namespace spillway::ops
