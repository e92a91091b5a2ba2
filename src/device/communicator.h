// Collectives among the ranks of a run, each rank one process with one
// device. The CPU backend's go through Gloo over TCP, the GPU's through
// NCCL; both enqueue their work on the stream they are given (the device's
// comm stream), which the caller joins to compute through events, as it
// does a copy.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "device/stream.h"

namespace spillway {

// Where the ranks find each other before they can talk: a key-value store
// every rank reaches (dist/tcp_store.h serves one at MASTER_ADDR:MASTER_PORT).
class RendezvousStore {
 public:
  virtual ~RendezvousStore() = default;
  virtual void set(const std::string& key, const std::vector<char>& value) = 0;
  // Waits until `key` is set, for at most the store's timeout; Error naming
  // the key when it never is.
  virtual std::vector<char> get(const std::string& key) = 0;
  virtual std::chrono::milliseconds timeout() const = 0;
};

// One side of a point-to-point message: `count` elements at `data`, to or
// from rank `peer`.
struct PeerBuffer {
  void* data;
  uint64_t count;
  int peer;
};

enum class Collective : uint8_t { all_reduce, reduce_scatter, all_gather };

// The bytes one rank sends in a ring `op` over `ranks` ranks of `bytes` (the
// whole array, as all_reduce_sum takes it, reduce_scatter_sum's input or
// all_gather's output): (N-1)/N of them per pass, all-reduce making two. A
// link's collective rate is these bytes over the time (plan/machine_rates.h).
inline double ring_bytes_sent(Collective op, double bytes, int ranks) {
  const double passes = op == Collective::all_reduce ? 2.0 : 1.0;
  return passes * (ranks - 1.0) / ranks * bytes;
}

class Communicator {
 public:
  virtual ~Communicator() = default;
  int rank() const { return rank_; }
  int size() const { return size_; }

  // In place: data holds `count` elements of `dtype` on every rank, and
  // after the call their sum over the ranks.
  virtual void all_reduce_sum(void* data, uint64_t count, DType dtype, Stream& stream) = 0;
  // `input` holds size() blocks of `count` elements; block r of every rank
  // summed lands in rank r's `output` (count elements).
  virtual void reduce_scatter_sum(const void* input, void* output, uint64_t count, DType dtype, Stream& stream) = 0;
  // Each rank's `count` elements of `input`, concatenated in rank order
  // into every rank's `output`.
  virtual void all_gather(const void* input, void* output, uint64_t count, DType dtype, Stream& stream) = 0;
  // `root`'s `count` elements into every rank's `data`.
  virtual void broadcast(void* data, uint64_t count, DType dtype, int root, Stream& stream) = 0;
  // Point to point: `count` elements to rank `peer`, which receives them
  // with the matching recv.
  virtual void send(const void* data, uint64_t count, DType dtype, int peer, Stream& stream) = 0;
  virtual void recv(void* data, uint64_t count, DType dtype, int peer, Stream& stream) = 0;
  // Sends and receives in flight together, so that ranks sending to each
  // other at once all go on: a pipeline's stages crossing activations and
  // gradients. At most one message each way between two ranks a call.
  virtual void exchange(std::span<const PeerBuffer> sends, std::span<const PeerBuffer> receives, DType dtype,
                        Stream& stream) = 0;
  // Returns once everything enqueued on `stream` has finished. Error naming
  // this rank when its collectives do not finish within the run's timeout
  // (a peer that died or hangs): no rank waits forever.
  virtual void wait(Stream& stream) = 0;

 protected:
  Communicator(int rank, int size) : rank_(rank), size_(size) {}

 private:
  int rank_, size_;
};

}  // namespace spillway
