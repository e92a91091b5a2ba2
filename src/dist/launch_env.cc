#include "dist/launch_env.h"

#include <charconv>
#include <cstdlib>
#include <string_view>

#include "base/status.h"

namespace spillway::dist {

namespace {

const char* system_getenv(const char* name) { return std::getenv(name); }

// The integer in variable `name`, or `fallback` when it is unset.
int64_t integer(const char* (*getenv)(const char*), const char* name, int64_t fallback) {
  const char* text = getenv(name);
  if (!text) return fallback;
  const std::string_view s(text);
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  SPW_CHECK(ec == std::errc() && end == s.data() + s.size(), name, "is '", s, "', not a whole number");
  return v;
}

}  // namespace

LaunchEnv read_launch_env(const char* (*getenv)(const char*)) {
  if (!getenv) getenv = system_getenv;
  LaunchEnv e;
  if (getenv("RANK") || getenv("WORLD_SIZE")) {
    e.launcher = "torchrun";
    SPW_CHECK(getenv("RANK") && getenv("WORLD_SIZE"), getenv("RANK") ? "WORLD_SIZE" : "RANK",
              "is not set, but its partner is: a launcher sets both");
    e.rank = static_cast<int>(integer(getenv, "RANK", 0));
    e.world = static_cast<int>(integer(getenv, "WORLD_SIZE", 1));
    e.local_rank = static_cast<int>(integer(getenv, "LOCAL_RANK", e.rank));
    e.local_world = static_cast<int>(integer(getenv, "LOCAL_WORLD_SIZE", e.world));
  } else if (getenv("OMPI_COMM_WORLD_SIZE")) {
    e.launcher = "mpirun";
    e.rank = static_cast<int>(integer(getenv, "OMPI_COMM_WORLD_RANK", 0));
    e.world = static_cast<int>(integer(getenv, "OMPI_COMM_WORLD_SIZE", 1));
    e.local_rank = static_cast<int>(integer(getenv, "OMPI_COMM_WORLD_LOCAL_RANK", e.rank));
    e.local_world = static_cast<int>(integer(getenv, "OMPI_COMM_WORLD_LOCAL_SIZE", e.world));
  } else if (getenv("SLURM_NTASKS") && getenv("SLURM_PROCID")) {
    e.launcher = "srun";
    e.rank = static_cast<int>(integer(getenv, "SLURM_PROCID", 0));
    e.world = static_cast<int>(integer(getenv, "SLURM_NTASKS", 1));
    e.local_rank = static_cast<int>(integer(getenv, "SLURM_LOCALID", e.rank));
    // SLURM says tasks per node in a compressed list; hosts are filled evenly.
    const int64_t nodes = integer(getenv, "SLURM_NNODES", 1);
    SPW_CHECK(nodes >= 1, "SLURM_NNODES", "is ", nodes, ", not at least 1");
    e.local_world = static_cast<int>((e.world + nodes - 1) / nodes);
  } else {
    return e;
  }
  SPW_CHECK(e.world >= 1, e.launcher, "the world size is ", e.world, ", not at least 1");
  SPW_CHECK(e.local_world >= 1 && e.local_world <= e.world, e.launcher, e.local_world, " ranks on this host of ",
            e.world, " in all");
  const bool all_local = e.local_world == e.world;
  SPW_CHECK(e.rank >= 0 && e.rank < e.world, e.launcher, "rank ", e.rank, " is outside a world of ", e.world);
  if (const char* addr = getenv("MASTER_ADDR")) {
    e.master_addr = addr;
  } else {
    SPW_CHECK(all_local || e.world == 1, "MASTER_ADDR", "is not set, and the ranks of this ", e.launcher,
              " run are on several hosts: set it to the host of rank 0");
  }
  int64_t port = integer(getenv, "MASTER_PORT", e.master_port);
  SPW_CHECK(port > 0 && port < 65536, "MASTER_PORT", "is ", port, ", not a TCP port");
  // torchrun's agent serves a store of its own (PyTorch's protocol) at
  // MASTER_PORT and says so to its workers: rank 0's store takes the next port.
  const char* agent_store = getenv("TORCHELASTIC_USE_AGENT_STORE");
  if (e.launcher == "torchrun" && agent_store && std::string_view(agent_store) == "True") {
    SPW_CHECK(port < 65535, "MASTER_PORT", "is ", port, ": torchrun's agent holds it and no port follows it");
    ++port;
  }
  e.master_port = static_cast<uint16_t>(port);
  return e;
}

}  // namespace spillway::dist
