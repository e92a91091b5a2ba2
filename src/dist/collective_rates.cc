#include "dist/collective_rates.h"

#include <algorithm>

#include "base/status.h"
#include "device/event.h"

namespace spillway::dist {

std::string collective_name(Collective op) {
  switch (op) {
    case Collective::all_reduce: return "all-reduce";
    case Collective::reduce_scatter: return "reduce-scatter";
    case Collective::all_gather: return "all-gather";
  }
  return "?";
}

std::vector<CollectiveTiming> time_collectives(Communicator& comm, Device& device, const std::vector<uint64_t>& sizes,
                                               int repeats) {
  SPW_CHECK(repeats > 0 && !sizes.empty(), "collective rates", "need at least one size and one timed run");
  const uint64_t unit = 4 * static_cast<uint64_t>(comm.size());
  const uint64_t largest = *std::max_element(sizes.begin(), sizes.end());
  for (uint64_t s : sizes) {
    SPW_CHECK(s >= unit && s % unit == 0, "collective rates", "a size of ", s, " bytes is not a multiple of ", unit);
  }
  MemorySpace& memory = device.device_memory();
  // Reduce-scatter reads the whole array and writes a block; all-gather the
  // reverse: one array and one block's room serve all three.
  void* whole = memory.allocate(largest, "collective rates: array");
  void* block = memory.allocate(largest / static_cast<uint64_t>(comm.size()), "collective rates: block");
  Stream& stream = device.stream(StreamKind::comm);
  device.zero_async(whole, largest, stream);
  device.zero_async(block, largest / static_cast<uint64_t>(comm.size()), stream);
  auto start = device.new_event(true), end = device.new_event(true);
  std::vector<CollectiveTiming> out;
  for (Collective op : {Collective::all_reduce, Collective::reduce_scatter, Collective::all_gather}) {
    for (uint64_t bytes : sizes) {
      const uint64_t count = bytes / 4, share = count / static_cast<uint64_t>(comm.size());
      auto issue = [&] {
        switch (op) {
          case Collective::all_reduce: comm.all_reduce_sum(whole, count, DType::f32, stream); break;
          case Collective::reduce_scatter: comm.reduce_scatter_sum(whole, block, share, DType::f32, stream); break;
          case Collective::all_gather: comm.all_gather(block, whole, share, DType::f32, stream); break;
        }
      };
      std::vector<double> seconds;
      for (int i = 0; i <= repeats; ++i) {
        // A small all-reduce first lines the ranks up, so that the timed one
        // does not include a late peer's start.
        comm.all_reduce_sum(block, 1, DType::f32, stream);
        stream.record(*start);
        issue();
        stream.record(*end);
        comm.wait(stream);
        if (i > 0) seconds.push_back(end->seconds_since(*start));
      }
      std::sort(seconds.begin(), seconds.end());
      const double median = seconds[seconds.size() / 2];
      out.push_back({op, bytes, median, ring_bytes_sent(op, static_cast<double>(bytes), comm.size()) / median});
    }
  }
  memory.free(block);
  memory.free(whole);
  return out;
}

double planner_link_rate(const std::vector<CollectiveTiming>& timings) {
  const CollectiveTiming* best = nullptr;
  for (const CollectiveTiming& t : timings) {
    if (t.op == Collective::all_reduce && (!best || t.bytes > best->bytes)) best = &t;
  }
  SPW_CHECK(best != nullptr, "collective rates", "no all-reduce was timed");
  return best->sent_rate;
}

}  // namespace spillway::dist
