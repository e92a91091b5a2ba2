// The parts of the training state a checkpoint holds per parameter tensor:
// its fp32 master weight and AdamW's two moments (read tensor by tensor
// from wherever an engine keeps them).
#pragma once

#include <cstdint>

namespace spillway::train {

enum class StatePart : uint8_t { master, m, v };

}  // namespace spillway::train
