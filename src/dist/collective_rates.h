// The rate of the links between the ranks of a run, measured the way the
// single-GPU rates were (plan/machine_rates.h): time the collectives the
// training step issues, over the communicator and memory it uses, and
// divide the bytes each rank sends (device/communicator.h's
// ring_bytes_sent) by the time. `spillway bench --collectives` prints them;
// `spillway plan --link-rate` takes the result.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device/communicator.h"
#include "device/device.h"

namespace spillway::dist {

struct CollectiveTiming {
  Collective op;
  uint64_t bytes = 0;    // of the whole array (fp32)
  double seconds = 0;    // median of the timed runs
  double sent_rate = 0;  // bytes each rank sent per second
};

std::string collective_name(Collective op);  // "all-reduce", ...

// Times each collective at each size in `sizes` (bytes, multiples of 4 *
// comm.size()): one untimed run, then the median of `repeats`, each timed
// on `device`'s comm stream between events. Every rank must call it alike.
std::vector<CollectiveTiming> time_collectives(Communicator& comm, Device& device, const std::vector<uint64_t>& sizes,
                                               int repeats);

// The rate the planner divides by: the all-reduce's at the largest size
// timed (the gradient sums' buckets are that large or larger).
double planner_link_rate(const std::vector<CollectiveTiming>& timings);

}  // namespace spillway::dist
