// What the two GPU engines (all on the device; planned across device and
// host) share.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace spillway::train {

// "cuda:0 NVIDIA H100 80GB HBM3".
std::string cuda_engine_name(int ordinal);

// A kernel cannot throw, so ids are checked on the host before they go to
// the GPU: Error naming the first token (or target: negative ones are
// ignored positions) outside the vocabulary.
void check_token_ids(std::span<const int32_t> inputs, std::span<const int32_t> targets, int64_t vocab);

}  // namespace spillway::train
