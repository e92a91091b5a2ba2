// Where this process stands in a run of several, as the launchers people
// use say it in the environment: torchrun (RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR, MASTER_PORT), Open MPI's mpirun (OMPI_COMM_WORLD_*) and
// SLURM's srun (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID), or a process
// alone. `spillway ... --nproc-per-node N` sets torchrun's variables for the
// processes it starts (dist/spawn.h).
#pragma once

#include <cstdint>
#include <string>

namespace spillway::dist {

struct LaunchEnv {
  int rank = 0, world = 1, local_rank = 0;
  int local_world = 1;  // ranks on this host, which share its memory
  std::string master_addr = "127.0.0.1";
  uint16_t master_port = 29500;
  std::string launcher;  // "torchrun", "mpirun", "srun"; empty: one process alone
};

// Reads the variables through `getenv` (std::getenv by default). Errors name
// the variable and its value: a rank outside the world, a world the
// launcher did not say, a port that is not one. Ranks on several hosts need
// MASTER_ADDR; ranks all on this host meet at 127.0.0.1. Under torchrun's
// agent store (TORCHELASTIC_USE_AGENT_STORE=True) the agent holds
// MASTER_PORT, and the ranks meet at MASTER_PORT + 1.
LaunchEnv read_launch_env(const char* (*getenv)(const char*) = nullptr);

}  // namespace spillway::dist
