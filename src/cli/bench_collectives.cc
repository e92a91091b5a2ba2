#include "cli/bench_collectives.h"

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "base/bytes.h"
#include "base/status.h"
#include "cli/training_ranks.h"
#include "dist/collective_rates.h"
#include "train/engine.h"

namespace spillway::cli {

int run_collectives_bench(const train::RunConfig& c, const std::string& json_path) {
  if (std::optional<int> exit_code = start_ranks_here(c)) return *exit_code;
  const TrainingRanks ranks = meet_ranks(c, train::Command::bench);
  Communicator* comm = ranks.data_parallel.comm;
  SPW_CHECK(comm != nullptr, "--collectives", "times the links between ranks: start two or more (--nproc-per-node "
            "N, or a launcher)");
  std::unique_ptr<Device> device = train::make_run_device(c.run.device, ranks.data_parallel.gpu_ordinal);
  const bool gpu = train::picks_gpu(c.run.device);
  // The gradient sums' buckets are 32M elements (128 MiB) on a GPU; a CPU
  // rank's Gloo rings are timed at sizes its tests can afford.
  std::vector<uint64_t> sizes;
  for (uint64_t s = 1ull << 20; s <= (gpu ? 1ull << 30 : 16ull << 20); s *= 4) sizes.push_back(s);
  const std::vector<dist::CollectiveTiming> timings = dist::time_collectives(*comm, *device, sizes, gpu ? 10 : 3);
  const double rate = dist::planner_link_rate(timings);
  if (comm->rank() != 0) return 0;
  std::printf("collectives over %d ranks on %s (fp32; bytes each rank sends per second):\n", comm->size(),
              device->name().c_str());
  for (const dist::CollectiveTiming& t : timings) {
    std::printf("  %-15s %10s  %9.3f ms  %7.1f GB/s\n", dist::collective_name(t.op).c_str(),
                format_bytes(t.bytes).c_str(), t.seconds * 1e3, t.sent_rate / 1e9);
  }
  std::printf("link rate for the planner: %.1f GB/s (spillway plan --link-rate %.1f)\n", rate / 1e9, rate / 1e9);
  if (!json_path.empty()) {
    nlohmann::json ops = nlohmann::json::array();
    for (const dist::CollectiveTiming& t : timings) {
      ops.push_back({{"op", dist::collective_name(t.op)}, {"bytes", t.bytes}, {"seconds", t.seconds},
                     {"sent_gb_s", t.sent_rate / 1e9}});
    }
    nlohmann::json j = {{"system", "spillway"}, {"kind", "collectives"}, {"device", device->name()},
                        {"gpus", gpu ? comm->size() : 0}, {"ranks", comm->size()}, {"link_rate_gb_s", rate / 1e9},
                        {"ops", ops}};
    std::ofstream(json_path, std::ios::app) << j.dump() << "\n";
  }
  return 0;
}

}  // namespace spillway::cli
