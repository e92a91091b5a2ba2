// Learning rate by step: linear warm-up from zero, then a cosine down to a floor.
#pragma once

#include <cstdint>

namespace spillway::train {

struct LrSchedule {
  double peak = 1e-3;
  double floor = 1e-4;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;

  // `step` counts from 0; the first step already gets a non-zero rate.
  double at(int64_t step) const;
};

}  // namespace spillway::train
