// The largest sizes spillway accepts from a file, a flag or the environment,
// in one place. Each is far above any real model or run (LLaMA-3-405B has
// hidden size 16,384, 126 layers and a 128,256-token vocabulary), and low
// enough that no product of them overflows 64 bits in the arithmetic that
// sizes tensors and buffers: a value past one is a corrupt or hostile input,
// refused with its field named before anything is allocated for it.
#pragma once

#include <cstdint>

namespace spillway::limits {

// Model shape (config.json, GGUF metadata, presets).
inline constexpr int64_t kMaxVocab = int64_t{1} << 22;           // 4,194,304 tokens
inline constexpr int64_t kMaxHidden = int64_t{1} << 16;          // 65,536
inline constexpr int64_t kMaxIntermediate = int64_t{1} << 18;    // 262,144
inline constexpr int64_t kMaxLayers = 100000;
inline constexpr int64_t kMaxHeads = int64_t{1} << 12;           // 4,096
inline constexpr int64_t kMaxPositions = int64_t{1} << 24;       // 16,777,216 tokens of context

// Training and evaluation schedule (run config files and flags).
inline constexpr int64_t kMaxBatch = int64_t{1} << 20;
inline constexpr int64_t kMaxSeq = kMaxPositions;
inline constexpr int64_t kMaxGradAccum = int64_t{1} << 20;
inline constexpr int64_t kMaxSteps = int64_t{1} << 40;
inline constexpr int64_t kMaxEvalBatches = int64_t{1} << 20;
// Tokens of one micro-batch (batch × seq): every activation is sized by it.
inline constexpr int64_t kMaxBatchTokens = int64_t{1} << 31;
// Ranks: data-parallel ones, and the model splits, whose product is an int.
inline constexpr int64_t kMaxRanks = int64_t{1} << 16;
inline constexpr int64_t kMaxModelSplit = int64_t{1} << 10;
// Memory budgets: 1 PiB, more than any machine spillway runs on has.
inline constexpr uint64_t kMaxBudgetBytes = uint64_t{1} << 50;

// Files.
inline constexpr uint64_t kMaxTokenFileTokens = uint64_t{1} << 48;
inline constexpr uint64_t kMaxGgufArrayElements = uint64_t{1} << 24;
inline constexpr uint64_t kMaxTokenizerMerges = uint64_t{1} << 24;

}  // namespace spillway::limits
