#include "dist/world.h"

#include <fstream>
#include <iterator>
#include <vector>

#include "base/status.h"
#include "dist/tcp_store.h"

#ifdef SPILLWAY_HAS_GLOO
#include "device/cpu/gloo_communicator.h"
#endif
#ifdef SPILLWAY_HAS_CUDA
#include "device/cuda/nccl_communicator.h"
#endif

namespace spillway::dist {

namespace {

// A group's keys apart from every other group's in the one store.
class PrefixedStore final : public RendezvousStore {
 public:
  PrefixedStore(RendezvousStore& store, std::string prefix) : store_(store), prefix_(std::move(prefix)) {}
  void set(const std::string& key, const std::vector<char>& value) override { store_.set(prefix_ + key, value); }
  std::vector<char> get(const std::string& key) override { return store_.get(prefix_ + key); }
  std::chrono::milliseconds timeout() const override { return store_.timeout(); }

 private:
  RendezvousStore& store_;
  std::string prefix_;
};

std::vector<char> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

std::unique_ptr<Communicator> make_communicator(int rank, int size, RendezvousStore& store, int gpu_ordinal,
                                                const std::string& host) {
  if (gpu_ordinal >= 0) {
#ifdef SPILLWAY_HAS_CUDA
    return make_nccl_communicator(rank, size, store, gpu_ordinal);
#else
    throw Error("--device", "this spillway was built without CUDA, so without NCCL");
#endif
  }
#ifdef SPILLWAY_HAS_GLOO
  return make_gloo_communicator(rank, size, store, host);
#else
  (void)rank, (void)size, (void)store, (void)host;
  throw Error("--nproc-per-node", "this spillway was built without Gloo (Debian's libgloo-dev), which carries the "
                                  "CPU's collectives: one rank only");
#endif
}

}  // namespace

uint64_t executable_fingerprint() {
  std::ifstream in("/proc/self/exe", std::ios::binary);
  uint64_t h = 1469598103934665603ull;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    for (std::streamsize i = 0; i < in.gcount(); ++i) h = (h ^ static_cast<unsigned char>(buf[i])) * 1099511628211ull;
  }
  return h;
}

World::World(const LaunchEnv& env, const RankGrid& grid, int gpu_ordinal, const std::string& fingerprint,
             std::chrono::milliseconds timeout)
    : rank_(env.rank), grid_(grid) {
  SPW_CHECK(env.world == grid.world(), "rank grid", "a grid of ", grid.world(), " ranks for a world of ", env.world);
  if (grid.world() == 1) return;
  store_ = std::make_unique<TcpStore>(env.master_addr, env.master_port, env.rank == 0, timeout);
  // Every rank the same binary and configuration, or none starts.
  const std::string mine = std::to_string(executable_fingerprint()) + "\n" + fingerprint;
  store_->set("fingerprint/" + std::to_string(rank_), bytes_of(mine));
  if (rank_ == 0) {
    std::string verdict = "ok";
    for (int r = 1; r < grid.world() && verdict == "ok"; ++r) {
      const std::vector<char> theirs = store_->get("fingerprint/" + std::to_string(r));
      const std::string text(theirs.begin(), theirs.end());
      if (text.substr(0, text.find('\n')) != mine.substr(0, mine.find('\n'))) {
        verdict = "rank " + std::to_string(r) + " runs another spillway binary than rank 0";
      } else if (text != mine) {
        verdict = "rank " + std::to_string(r) + " resolved another run configuration than rank 0";
      }
    }
    store_->set("fingerprint/verdict", bytes_of(verdict));
  }
  const std::vector<char> verdict = store_->get("fingerprint/verdict");
  SPW_CHECK(std::string(verdict.begin(), verdict.end()) == "ok", "rank " + std::to_string(rank_),
            std::string(verdict.begin(), verdict.end()));
  const std::string host = env.master_addr == "127.0.0.1" || env.master_addr == "localhost" ? "127.0.0.1" : "";
  for (int d = 0; d < kDims; ++d) {
    const Dim dim = static_cast<Dim>(d);
    if (grid.degree(dim) == 1) continue;
    const std::vector<int> members = grid.group(dim, rank_);
    const int in_group = grid.coordinates(rank_)[dim];
    PrefixedStore prefixed(*store_, dim_name(dim) + "/" + std::to_string(grid.group_index(dim, rank_)) + "/");
    groups_[static_cast<size_t>(d)] =
        make_communicator(in_group, static_cast<int>(members.size()), prefixed, gpu_ordinal, host);
  }
  if (grid.degree(Dim::cp) > 1 && grid.degree(Dim::dp) > 1) {
    PrefixedStore prefixed(*store_, "replicas/" + std::to_string(grid.replica_group_index(rank_)) + "/");
    replicas_ = make_communicator(grid.replica_position(rank_), static_cast<int>(grid.replicas(rank_).size()),
                                  prefixed, gpu_ordinal, host);
  }
}

World::~World() = default;

void World::barrier(std::chrono::milliseconds wait) {
  if (!store_) return;
  const std::string at = "barrier/" + std::to_string(barriers_++) + "/";
  store_->set(at + std::to_string(rank_), {});
  for (int r = 0; r < size(); ++r) store_->get(at + std::to_string(r), wait);
}

}  // namespace spillway::dist
