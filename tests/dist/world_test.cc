// Ranks as threads of one process, each with its own store client, Gloo
// connections and CPU device: the world meets, checks that every rank runs
// the same configuration, and its communicators carry each collective
// along their dimension of the grid only.
#include "dist/world.h"

#include <gtest/gtest.h>

#include <functional>
#include <numeric>
#include <thread>
#include <vector>

#include "base/status.h"
#include "device/cpu/cpu_device.h"
#include "dist/tcp_store.h"

namespace spillway::dist {
namespace {

#ifdef SPILLWAY_HAS_GLOO

uint16_t some_free_port() { return TcpStore("127.0.0.1", 0, true, std::chrono::seconds(1)).port(); }

// Runs body(rank, world) on `n` threads as the ranks of one run; returns the
// first error any rank raised, or "".
std::string run_ranks(int n, const std::function<void(int, uint16_t)>& body) {
  const uint16_t port = some_free_port();
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r) {
    ranks.emplace_back([&, r] {
      try {
        body(r, port);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (const auto& e : errors) {
    if (!e.empty()) return e;
  }
  return "";
}

LaunchEnv env_of(int rank, int world, uint16_t port) {
  LaunchEnv e;
  e.rank = rank;
  e.world = world;
  e.master_port = port;
  e.launcher = "test";
  return e;
}

TEST(World, CollectivesOfEveryKindAmongFourRanks) {
  const std::string error = run_ranks(4, [](int rank, uint16_t port) {
    World world(env_of(rank, 4, port), RankGrid(4, 1, 1, 1, 4), -1, "same", std::chrono::seconds(20));
    Communicator& c = *world.group(Dim::dp);
    ASSERT_EQ(c.rank(), rank);
    ASSERT_EQ(c.size(), 4);
    auto device = make_cpu_device();
    Stream& s = device->stream(StreamKind::comm);
    std::vector<float> x(1000);
    std::iota(x.begin(), x.end(), static_cast<float>(rank));
    c.all_reduce_sum(x.data(), x.size(), DType::f32, s);
    std::vector<double> blocks(8, rank + 1.0), mine(2);
    c.reduce_scatter_sum(blocks.data(), mine.data(), 2, DType::f64, s);
    const int32_t id = 10 * rank;
    std::vector<int32_t> ids(4);
    c.all_gather(&id, ids.data(), 1, DType::i32, s);
    std::vector<float> root(3, static_cast<float>(rank));
    c.broadcast(root.data(), root.size(), DType::f32, 2, s);
    std::vector<float> ring(5, static_cast<float>(rank)), from_left(5);
    // Even ranks send first, odd ones receive first: no cycle of waits.
    const int right = (rank + 1) % 4, left = (rank + 3) % 4;
    if (rank % 2 == 0) {
      c.send(ring.data(), 5, DType::f32, right, s);
      c.recv(from_left.data(), 5, DType::f32, left, s);
    } else {
      c.recv(from_left.data(), 5, DType::f32, left, s);
      c.send(ring.data(), 5, DType::f32, right, s);
    }
    // Every rank sends right and receives from both sides at once: a
    // circle of sends, which one exchange a rank lets through.
    std::vector<float> out(3, 100.0f + static_cast<float>(rank)), in_left(3), in_right(2);
    std::vector<float> to_left(2, 200.0f + static_cast<float>(rank));
    const PeerBuffer sends[] = {{out.data(), 3, right}, {to_left.data(), 2, left}};
    const PeerBuffer receives[] = {{in_left.data(), 3, left}, {in_right.data(), 2, right}};
    c.exchange(sends, receives, DType::f32, s);
    s.synchronize();
    EXPECT_EQ(in_left, (std::vector<float>(3, 100.0f + static_cast<float>(left))));
    EXPECT_EQ(in_right, (std::vector<float>(2, 200.0f + static_cast<float>(right))));
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], 4.0f * static_cast<float>(i) + 6.0f) << i;
    EXPECT_EQ(mine, (std::vector<double>{10.0, 10.0}));
    EXPECT_EQ(ids, (std::vector<int32_t>{0, 10, 20, 30}));
    EXPECT_EQ(root, (std::vector<float>(3, 2.0f)));
    EXPECT_EQ(from_left, (std::vector<float>(5, static_cast<float>(left))));
  });
  EXPECT_EQ(error, "");
}

// dp 2 x tp 2: a sum along tp stays within each pair of neighbours, one
// along dp within each pair two apart.
TEST(World, EachDimensionSumsWithinItsGroup) {
  const std::string error = run_ranks(4, [](int rank, uint16_t port) {
    World world(env_of(rank, 4, port), RankGrid(2, 1, 1, 2, 4), -1, "same", std::chrono::seconds(20));
    EXPECT_EQ(world.group(Dim::pp), nullptr);
    auto device = make_cpu_device();
    Stream& s = device->stream(StreamKind::comm);
    float tp = static_cast<float>(rank), dp = static_cast<float>(rank);
    world.group(Dim::tp)->all_reduce_sum(&tp, 1, DType::f32, s);
    world.group(Dim::dp)->all_reduce_sum(&dp, 1, DType::f32, s);
    s.synchronize();
    EXPECT_EQ(tp, rank < 2 ? 1.0f : 5.0f);
    EXPECT_EQ(dp, rank % 2 == 0 ? 2.0f : 4.0f);
  });
  EXPECT_EQ(error, "");
}

// dp 2 x cp 2 x tp 2: the replicas of a tp coordinate's state are the
// four ranks of that coordinate, dp and cp together.
TEST(World, ReplicasSumOverDataAndContextParallelism) {
  const std::string error = run_ranks(8, [](int rank, uint16_t port) {
    World world(env_of(rank, 8, port), RankGrid(2, 1, 2, 2, 8), -1, "same", std::chrono::seconds(30));
    ASSERT_NE(world.replicas(), nullptr);
    EXPECT_EQ(world.replicas()->size(), 4);
    auto device = make_cpu_device();
    Stream& s = device->stream(StreamKind::comm);
    float x = static_cast<float>(rank);
    world.replicas()->all_reduce_sum(&x, 1, DType::f32, s);
    s.synchronize();
    EXPECT_EQ(x, rank % 2 == 0 ? 0.0f + 2 + 4 + 6 : 1.0f + 3 + 5 + 7);
  });
  EXPECT_EQ(error, "");
}

TEST(World, RanksWithAnotherConfigurationDoNotStart) {
  const std::string error = run_ranks(2, [](int rank, uint16_t port) {
    World world(env_of(rank, 2, port), RankGrid(2, 1, 1, 1, 2), -1, rank == 1 ? "steps=7" : "steps=6",
                std::chrono::seconds(20));
  });
  EXPECT_NE(error.find("rank 1 resolved another run configuration than rank 0"), std::string::npos) << error;
}

// A rank that never arrives ends the others at the timeout, with the key
// they waited for.
TEST(World, ARankThatNeverArrivesEndsTheOthers) {
  const std::string error = run_ranks(1, [](int rank, uint16_t port) {
    World world(env_of(rank, 2, port), RankGrid(2, 1, 1, 1, 2), -1, "same", std::chrono::milliseconds(500));
  });
  EXPECT_NE(error.find("was not set within"), std::string::npos) << error;
}

#else

TEST(World, NeedsGloo) { GTEST_SKIP() << "built without Gloo"; }

#endif

}  // namespace
}  // namespace spillway::dist
