#include "device/cuda/nccl_communicator.h"

#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_stream.h"
#include "device/cuda/device_guard.h"

namespace spillway {

namespace {

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::i32: return ncclInt32;
    default: throw Error("nccl", "no NCCL type for " + std::string(dtype_name(dtype)));
  }
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(int rank, int size, RendezvousStore& store, int ordinal)
      : Communicator(rank, size), timeout_(store.timeout()) {
    CudaDeviceGuard guard(ordinal);
    ncclUniqueId id{};
    if (rank == 0) {
      check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      store.set("nccl/id", std::vector<char>(id.internal, id.internal + sizeof id.internal));
    } else {
      const std::vector<char> got = store.get("nccl/id");
      SPW_CHECK(got.size() == sizeof id.internal, "nccl rank " + std::to_string(rank), "the unique id from the store has ",
                got.size(), " bytes, not ", sizeof id.internal);
      std::copy(got.begin(), got.end(), id.internal);
    }
    // Non-blocking, so that a peer that never joins ends this rank at the
    // store's timeout instead of hanging in ncclCommInitRank.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    check(ncclCommInitRankConfig(&comm_, size, id, rank, &config), "ncclCommInitRankConfig");
    wait_until_ready("joining the other ranks");
  }

  ~NcclCommunicator() override {
    if (comm_) (void)ncclCommDestroy(comm_);
  }

  void all_reduce_sum(void* data, uint64_t count, DType dtype, Stream& stream) override {
    check(ncclAllReduce(data, data, count, nccl_type(dtype), ncclSum, comm_, handle(stream)), "ncclAllReduce", true);
  }
  void reduce_scatter_sum(const void* input, void* output, uint64_t count, DType dtype, Stream& stream) override {
    check(ncclReduceScatter(input, output, count, nccl_type(dtype), ncclSum, comm_, handle(stream)),
          "ncclReduceScatter", true);
  }
  void all_gather(const void* input, void* output, uint64_t count, DType dtype, Stream& stream) override {
    check(ncclAllGather(input, output, count, nccl_type(dtype), comm_, handle(stream)), "ncclAllGather", true);
  }
  void broadcast(void* data, uint64_t count, DType dtype, int root, Stream& stream) override {
    check(ncclBroadcast(data, data, count, nccl_type(dtype), root, comm_, handle(stream)), "ncclBroadcast", true);
  }
  void send(const void* data, uint64_t count, DType dtype, int peer, Stream& stream) override {
    check(ncclSend(data, count, nccl_type(dtype), peer, comm_, handle(stream)), "ncclSend", true);
  }
  void recv(void* data, uint64_t count, DType dtype, int peer, Stream& stream) override {
    check(ncclRecv(data, count, nccl_type(dtype), peer, comm_, handle(stream)), "ncclRecv", true);
  }
  void exchange(std::span<const PeerBuffer> sends, std::span<const PeerBuffer> receives, DType dtype,
                Stream& stream) override {
    check(ncclGroupStart(), "ncclGroupStart", true);
    for (const PeerBuffer& s : sends) {
      check(ncclSend(s.data, s.count, nccl_type(dtype), s.peer, comm_, handle(stream)), "ncclSend", true);
    }
    for (const PeerBuffer& r : receives) {
      check(ncclRecv(r.data, r.count, nccl_type(dtype), r.peer, comm_, handle(stream)), "ncclRecv", true);
    }
    check(ncclGroupEnd(), "ncclGroupEnd", true);
  }

  // NCCL has no timeout of its own: the stream is polled. A collective still
  // running at the deadline ends the process, as PyTorch's NCCL watchdog
  // does: the stream never drains, so neither an abort (which waits for the
  // collective's kernel) nor the destructors (which synchronize the device)
  // would return. What is on disk is whole (checkpoints are atomic).
  void wait(Stream& stream) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (;;) {
      const cudaError_t done = cudaStreamQuery(handle(stream));
      if (done == cudaSuccess) return;
      if (done != cudaErrorNotReady) SPW_CUDA(done);
      ncclResult_t state = ncclSuccess;
      check(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError");
      if (state != ncclInProgress) check(state, "a collective");
      if (std::chrono::steady_clock::now() >= deadline) {
        std::fprintf(stderr,
                     "spillway: nccl rank %d: a collective did not finish within %lld s (--rank-timeout): another "
                     "rank died or hangs\n",
                     rank(), static_cast<long long>(timeout_.count() / 1000));
        std::fflush(stderr);
        std::_Exit(1);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

 private:
  static cudaStream_t handle(Stream& stream) { return as_cuda_stream(stream).handle(); }

  // ncclInProgress is not a failure of a non-blocking communicator, but
  // the next call must wait until the communicator is ready again (the
  // first collective, which connects the peers, returns it).
  void check(ncclResult_t result, const char* call, bool collective = false) {
    if (result == ncclInProgress && collective) wait_until_ready(call);
    if (result == ncclSuccess || result == ncclInProgress) return;
    throw Error("nccl rank " + std::to_string(rank()), std::string(call) + ": " + ncclGetErrorString(result) +
                                                           " (" + ncclGetLastError(comm_) + ")");
  }

  void wait_until_ready(const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (;;) {
      ncclResult_t state = ncclSuccess;
      check(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError");
      if (state == ncclSuccess) return;
      check(state, what);
      if (std::chrono::steady_clock::now() >= deadline) {
        (void)ncclCommAbort(comm_);
        comm_ = nullptr;
        throw Error("nccl rank " + std::to_string(rank()),
                    std::string(what) + " did not finish within " + std::to_string(timeout_.count() / 1000) +
                        " s: a rank did not arrive");
      }
      // A non-blocking communicator hands most collectives to its own
      // thread and answers ncclInProgress: the stream gets the kernel only
      // once that is done, within microseconds. A coarse sleep here held
      // every collective issued outside a captured step (the loss's sum,
      // the sharded weights' gather) for 10 ms.
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  std::chrono::milliseconds timeout_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(int rank, int size, RendezvousStore& store, int device_ordinal) {
  return std::make_unique<NcclCommunicator>(rank, size, store, device_ordinal);
}

}  // namespace spillway
