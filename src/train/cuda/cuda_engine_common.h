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

// Elements each stack of a stacked parameter's tensors starts on in the
// engines' weight, gradient and moment arrays (model::stacked_offsets): 256
// bytes in bf16, cuBLASLt's plans assume that much, and 512 in fp32.
inline constexpr uint64_t kStackAlign = 128;

// Whether the step stacks q|k|v and gate|up (KernelConfig::projections);
// `auto` differs by engine, as engine.h says why.
bool fused_projections(const EngineOptions& options, bool planned_engine);

// "cuda:0 NVIDIA H100 80GB HBM3".
std::string cuda_engine_name(int ordinal);

// A kernel cannot throw, so ids are checked on the host before they go to
// the GPU: Error when there are not `batch_tokens` of each (the device
// buffers hold that many), or naming the first token (or target: negative
// ones are ignored positions) outside the vocabulary.
void check_token_ids(std::span<const int32_t> inputs, std::span<const int32_t> targets, int64_t vocab,
                     size_t batch_tokens);

}  // namespace spillway::train
