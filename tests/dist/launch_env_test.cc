#include "dist/launch_env.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "base/status.h"

namespace spillway::dist {
namespace {

std::map<std::string, std::string> g_env;
const char* fake_getenv(const char* name) {
  auto it = g_env.find(name);
  return it == g_env.end() ? nullptr : it->second.c_str();
}

LaunchEnv read(std::map<std::string, std::string> env) {
  g_env = std::move(env);
  return read_launch_env(fake_getenv);
}

std::string error_of(std::map<std::string, std::string> env) {
  try {
    read(std::move(env));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(LaunchEnv, AloneWithoutALauncher) {
  const LaunchEnv e = read({});
  EXPECT_EQ(e.world, 1);
  EXPECT_EQ(e.rank, 0);
  EXPECT_TRUE(e.launcher.empty());
}

TEST(LaunchEnv, ReadsTorchrunMpirunAndSrun) {
  LaunchEnv t = read({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                      {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "29600"}});
  EXPECT_EQ(t.launcher, "torchrun");
  EXPECT_EQ(t.rank, 3);
  EXPECT_EQ(t.world, 4);
  EXPECT_EQ(t.local_rank, 1);
  EXPECT_EQ(t.local_world, 2);
  EXPECT_EQ(t.master_addr, "node7");
  EXPECT_EQ(t.master_port, 29600);
  LaunchEnv m = read({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                      {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  EXPECT_EQ(m.launcher, "mpirun");
  EXPECT_EQ(m.rank, 1);
  EXPECT_EQ(m.local_world, 2);
  EXPECT_EQ(m.master_addr, "127.0.0.1");  // every rank on this host
  EXPECT_EQ(m.master_port, 29500);
  LaunchEnv s = read({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"}, {"SLURM_NNODES", "2"},
                      {"MASTER_ADDR", "10.1.2.3"}});
  EXPECT_EQ(s.launcher, "srun");
  EXPECT_EQ(s.rank, 5);
  EXPECT_EQ(s.local_rank, 1);
  EXPECT_EQ(s.local_world, 4);
  EXPECT_EQ(s.master_addr, "10.1.2.3");
}

TEST(LaunchEnv, TorchrunsAgentStoreKeepsItsPort) {
  const LaunchEnv t = read({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"},
                            {"TORCHELASTIC_USE_AGENT_STORE", "True"}});
  EXPECT_EQ(t.master_port, 29501);
  const LaunchEnv own = read({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"},
                              {"TORCHELASTIC_USE_AGENT_STORE", "False"}});
  EXPECT_EQ(own.master_port, 29500);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "65535"},
                      {"TORCHELASTIC_USE_AGENT_STORE", "True"}})
                .find("torchrun's agent holds it"),
            std::string::npos);
}

TEST(LaunchEnv, BadVariablesAreOneLineNamingThem) {
  EXPECT_EQ(error_of({{"RANK", "2"}, {"WORLD_SIZE", "two"}}), "WORLD_SIZE: is 'two', not a whole number");
  EXPECT_EQ(error_of({{"RANK", "4"}, {"WORLD_SIZE", "4"}}), "torchrun: rank 4 is outside a world of 4");
  EXPECT_EQ(error_of({{"RANK", "0"}}), "WORLD_SIZE: is not set, but its partner is: a launcher sets both");
  EXPECT_EQ(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}),
            "MASTER_PORT: is 70000, not a TCP port");
  EXPECT_NE(error_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_NNODES", "2"}}).find("MASTER_ADDR"),
            std::string::npos);
}

}  // namespace
}  // namespace spillway::dist
