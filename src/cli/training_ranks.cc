#include "cli/training_ranks.h"

#include <chrono>
#include <cstdio>
#include <string>

#include "base/host_memory.h"
#include "base/log.h"
#include "base/status.h"
#include "dist/launch_env.h"
#include "dist/spawn.h"
#include "train/engine.h"
#include "train/layout_choice.h"
#include "train/run_config_fields.h"

#ifdef SPILLWAY_HAS_CUDA
#include "device/cuda/cuda_device.h"
#endif

namespace spillway::cli {

namespace {


// The GPU of the rank that is `local_rank` on its host: its own where the
// launcher let it see them all, the one it sees where it gave each rank one.
int gpu_of(const dist::LaunchEnv& env) {
#ifdef SPILLWAY_HAS_CUDA
  const int count = cuda_device_count();
  if (count == 1) return 0;
  SPW_CHECK(env.local_rank < count, "rank " + std::to_string(env.rank), "is local rank ", env.local_rank,
            " on a host with ", count, " GPUs: start at most one rank per GPU");
#endif
  return env.local_rank;
}

dist::RankGrid grid_of(const train::ParallelConfig& p, int world) {
  return dist::RankGrid(static_cast<int>(p.dp), static_cast<int>(p.pp), static_cast<int>(p.cp), static_cast<int>(p.tp),
                        world);
}

}  // namespace

std::optional<int> start_ranks_here(const train::RunConfig& config) {
  const train::ParallelConfig& p = config.parallel;
  if (p.nproc_per_node == 1 || !dist::read_launch_env().launcher.empty()) return std::nullopt;
  grid_of(p, static_cast<int>(p.nproc_per_node));  // one error here rather than one from every rank
  return dist::run_local_ranks(static_cast<int>(p.nproc_per_node));
}

train::RunConfig with_planned_layout(const train::RunConfig& config) {
  const dist::LaunchEnv env = dist::read_launch_env();
  if (!train::picks_gpu(config.run.device) || env.world <= 1) return config;
  // LoRA's ranks are data parallel, its state replicated (train/lora_plan.h).
  if (config.lora.rank > 0) return config;
#ifdef SPILLWAY_HAS_CUDA
  const int gpu = gpu_of(env);
  const train::MemoryConfig& m = config.memory;
  // Every rank chooses alone: budgets it measures are taken in whole GiB,
  // so that ranks a few pages apart choose alike (World's start-up check
  // of the run configuration ends a run whose ranks did not).
  const auto whole_gib = [](uint64_t bytes) { return bytes >> 30 << 30; };
  const uint64_t device = m.device_mem ? m.device_mem : whole_gib(cuda_default_device_budget(gpu));
  const uint64_t host = m.host_mem ? m.host_mem : whole_gib(available_host_bytes());
  const int hosts = env.local_world > 0 && env.world % env.local_world == 0 ? env.world / env.local_world : 1;
  const std::optional<train::LayoutChoice> choice =
      train::choose_gpu_layout(config, env.world, hosts, cuda_device_name(gpu), device, host);
  if (!choice) return config;
  if (env.rank == 0) std::printf("%s\n", choice->line.c_str());
  train::RunConfig chosen = config;
  chosen.parallel.tp = choice->layout.tp;
  chosen.parallel.pp = choice->layout.pp;
  chosen.parallel.cp = choice->layout.cp;
  return chosen;
#else
  return config;
#endif
}

TrainingRanks meet_ranks(const train::RunConfig& config, train::Command command) {
  const dist::LaunchEnv env = dist::read_launch_env();
  const train::ParallelConfig& p = config.parallel;
  SPW_CHECK(!env.launcher.empty() || p.dp <= 1, "--dp", p.dp, " needs ", p.dp,
            " ranks, but this is one process: start them with --nproc-per-node ", p.dp,
            ", or with a launcher (torchrun, mpirun, srun)");
  const int64_t split = p.tp * p.pp * p.cp;
  SPW_CHECK(!env.launcher.empty() || split == 1, p.tp > 1 ? "--tp" : p.pp > 1 ? "--pp" : "--cp",
            p.tp > 1 ? p.tp : p.pp > 1 ? p.pp : p.cp, " needs ", split,
            " ranks at least, but this is one process: start them with --nproc-per-node ", split,
            ", or with a launcher (torchrun, mpirun, srun)");
  const dist::RankGrid grid = grid_of(p, env.world);
  const bool gpu = train::picks_gpu(config.run.device);
  TrainingRanks ranks;
  ranks.data_parallel.gpu_ordinal = gpu ? gpu_of(env) : 0;
  ranks.data_parallel.ranks_on_host = env.local_world;
  if (env.world == 1) return ranks;
  if (env.rank != 0) set_log_rank(LogLevel::warn, "rank " + std::to_string(env.rank) + ": ");
  ranks.world = std::make_unique<dist::World>(env, grid, gpu ? ranks.data_parallel.gpu_ordinal : -1,
                                              train::run_config_json(config, command).dump(),
                                              std::chrono::seconds(p.timeout_s));
  dist::World* world = ranks.world.get();
  ranks.data_parallel.comm = world->group(dist::Dim::dp);
  ranks.data_parallel.tensor_parallel = world->group(dist::Dim::tp);
  ranks.data_parallel.pipeline_parallel = world->group(dist::Dim::pp);
  ranks.data_parallel.context_parallel = world->group(dist::Dim::cp);
  ranks.data_parallel.replicas = world->replicas();
  ranks.data_parallel.world_rank = env.rank;
  ranks.data_parallel.world_size = env.world;
  ranks.data_parallel.barrier = [world](std::chrono::milliseconds wait) { world->barrier(wait); };
  return ranks;
}

}  // namespace spillway::cli
