// What the two GPU engines (all on the device; planned across device and
// host) share.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "device/device.h"
#include "train/engine.h"

namespace spillway::train {

// GPU 0 with the device budget of `options` (unset: the whole pool) and a
// pinned host pool of `pinned_bytes`; Error naming --device cuda when no GPU
// is visible.
std::unique_ptr<Device> open_cuda_device(const EngineOptions& options, uint64_t pinned_bytes);

// "cuda:0 NVIDIA H100 80GB HBM3".
std::string cuda_engine_name(int ordinal);

// A kernel cannot throw, so ids are checked on the host before they go to
// the GPU: Error naming the first token (or target: negative ones are
// ignored positions) outside the vocabulary.
void check_token_ids(std::span<const int32_t> inputs, std::span<const int32_t> targets, int64_t vocab);

}  // namespace spillway::train
