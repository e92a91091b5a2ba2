// Device memory a GPU rank keeps outside the step graph's arena: its
// runners' kernel workspaces, a little of the pool for the arena's
// fragmentation, NCCL's own buffers. The GPU engine measures the
// workspaces by making its runners; a plan made without a GPU estimates
// them. Both add the rest alike, so plan and run agree on what fits.
#pragma once

#include <cstdint>

#include "graph/graph.h"

namespace spillway::train {

// What the runners of a step take beside cuDNN's attention: cuBLASLt's
// workspace, the norms', the loss's and the embedding's, a few gigabytes
// at most.
inline constexpr uint64_t kKernelWorkspaceBytes = 2ull << 30;
// NCCL's own buffers, outside the engine's pool.
inline constexpr uint64_t kCommunicatorReserve = 512ull << 20;

// cuDNN's ordered (deterministic) attention backward keeps a bf16 score
// matrix a head and fp32 partial key/value gradients: batch x heads x
// queries x keys x 2 + batch x heads x keys x head_dim x 4 bytes (what it
// asked for on Hopper: 4.1 GiB at seq 8192 with 32 heads, 258 GiB at
// 32,768 queries over 131,072 keys). The atomic one needs next to none.
uint64_t deterministic_attention_workspace(int64_t batch, int64_t heads, int64_t queries, int64_t keys,
                                           int64_t head_dim);
// The largest of the step's attention backward nodes', where
// `deterministic`, or kKernelWorkspaceBytes.
uint64_t estimated_kernel_workspaces(const graph::Graph& step, bool deterministic);

// The whole reserve of a rank whose runners take `workspaces` of a pool of
// `budget` bytes.
uint64_t device_reserve(uint64_t workspaces, uint64_t budget, bool communicates);

}  // namespace spillway::train
