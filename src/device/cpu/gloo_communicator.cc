#include "device/cpu/gloo_communicator.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <cstring>
#include <vector>

#include "base/status.h"
#include "device/cpu/cpu_stream.h"

namespace spillway {

namespace {

// Gloo's rendezvous through ours.
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  explicit StoreAdapter(RendezvousStore& store) : store_(store) {}
  void set(const std::string& key, const std::vector<char>& data) override { store_.set(key, data); }
  std::vector<char> get(const std::string& key) override { return store_.get(key); }
  void wait(const std::vector<std::string>& keys) override {
    for (const auto& k : keys) store_.get(k);
  }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override { wait(keys); }

 private:
  RendezvousStore& store_;
};

template <typename T>
void sum_into(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<T*>(out);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

template <typename T>
void sum_typed(const std::shared_ptr<gloo::Context>& context, void* data, uint64_t count) {
  gloo::AllreduceOptions o(context);
  o.setOutput(static_cast<T*>(data), count);
  o.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&sum_into<T>));
  gloo::allreduce(o);
}

// In place: the sum over the ranks of `count` elements at `data`.
void sum_over_ranks(const std::shared_ptr<gloo::Context>& context, void* data, uint64_t count, DType dtype) {
  switch (dtype) {
    case DType::f32: return sum_typed<float>(context, data, count);
    case DType::f64: return sum_typed<double>(context, data, count);
    case DType::i32: return sum_typed<int32_t>(context, data, count);
    default: throw Error("gloo", "sums of " + std::string(dtype_name(dtype)) + " are not supported on the CPU");
  }
}

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(int rank, int size, RendezvousStore& store, const std::string& host)
      : Communicator(rank, size), timeout_(store.timeout()) {
    gloo::transport::tcp::attr attr;
    attr.hostname = host;
    try {
      device_ = gloo::transport::tcp::CreateDevice(attr);
      auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
      context->setTimeout(timeout_);
      StoreAdapter adapter(store);
      context->connectFullMesh(adapter, device_);
      context_ = context;
    } catch (const gloo::Exception& e) {
      throw Error("gloo rank " + std::to_string(rank), std::string("cannot connect to its peers: ") + e.what());
    }
  }

  void all_reduce_sum(void* data, uint64_t count, DType dtype, Stream& stream) override {
    enqueue(stream, "all-reduce", [=, this] { sum_over_ranks(context_, data, count, dtype); });
  }

  // The whole sum, then this rank's block: Gloo's own reduce-scatter is for
  // floats only, and the CPU backend's runs are small.
  void reduce_scatter_sum(const void* input, void* output, uint64_t count, DType dtype, Stream& stream) override {
    const uint64_t bytes = count * dtype_size(dtype);
    enqueue(stream, "reduce-scatter", [=, this] {
      const auto* in = static_cast<const char*>(input);
      std::vector<char> whole(in, in + bytes * static_cast<uint64_t>(size()));
      sum_over_ranks(context_, whole.data(), count * static_cast<uint64_t>(size()), dtype);
      std::memcpy(output, whole.data() + bytes * static_cast<uint64_t>(rank()), bytes);
    });
  }

  void all_gather(const void* input, void* output, uint64_t count, DType dtype, Stream& stream) override {
    const uint64_t bytes = count * dtype_size(dtype);
    enqueue(stream, "all-gather", [=, this] {
      gloo::AllgatherOptions o(context_);
      o.setInput(const_cast<char*>(static_cast<const char*>(input)), bytes);
      o.setOutput(static_cast<char*>(output), bytes * static_cast<uint64_t>(size()));
      gloo::allgather(o);
    });
  }

  void broadcast(void* data, uint64_t count, DType dtype, int root, Stream& stream) override {
    const uint64_t bytes = count * dtype_size(dtype);
    enqueue(stream, "broadcast", [=, this] {
      gloo::BroadcastOptions o(context_);
      o.setOutput(static_cast<char*>(data), bytes);
      o.setRoot(root);
      gloo::broadcast(o);
    });
  }

  void send(const void* data, uint64_t count, DType dtype, int peer, Stream& stream) override {
    const uint64_t bytes = count * dtype_size(dtype);
    enqueue(stream, "send to rank " + std::to_string(peer), [=, this] {
      auto buf = context_->createUnboundBuffer(const_cast<void*>(data), bytes);
      buf->send(peer, kPointToPointSlot);
      buf->waitSend(timeout_);
    });
  }

  void recv(void* data, uint64_t count, DType dtype, int peer, Stream& stream) override {
    const uint64_t bytes = count * dtype_size(dtype);
    enqueue(stream, "receive from rank " + std::to_string(peer), [=, this] {
      auto buf = context_->createUnboundBuffer(data, bytes);
      buf->recv(peer, kPointToPointSlot);
      buf->waitRecv(timeout_);
    });
  }

  void exchange(std::span<const PeerBuffer> sends, std::span<const PeerBuffer> receives, DType dtype,
                Stream& stream) override {
    const uint64_t elem = dtype_size(dtype);
    std::string peers;
    for (const auto* list : {&sends, &receives}) {
      for (const PeerBuffer& b : *list) peers += (peers.empty() ? "" : ", ") + std::to_string(b.peer);
    }
    enqueue(stream, "exchange with ranks " + peers,
            [=, this, sends = std::vector<PeerBuffer>(sends.begin(), sends.end()),
             receives = std::vector<PeerBuffer>(receives.begin(), receives.end())] {
              std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> in, out;
              for (const PeerBuffer& r : receives) {
                in.push_back(context_->createUnboundBuffer(r.data, r.count * elem));
                in.back()->recv(r.peer, kPointToPointSlot);
              }
              for (const PeerBuffer& s : sends) {
                out.push_back(context_->createUnboundBuffer(s.data, s.count * elem));
                out.back()->send(s.peer, kPointToPointSlot);
              }
              for (auto& b : out) b->waitSend(timeout_);
              for (auto& b : in) b->waitRecv(timeout_);
            });
  }

  // Gloo's operations end at their own timeout.
  void wait(Stream& stream) override { stream.synchronize(); }

 private:
  static constexpr uint64_t kPointToPointSlot = 1;

  // Gloo's failures (a peer gone, a timeout) become one line naming this
  // rank and the operation, reported by the stream's synchronize().
  template <typename Work>
  void enqueue(Stream& stream, std::string what, Work work) {
    as_cpu_stream(stream).enqueue([this, what = std::move(what), work] {
      try {
        work();
      } catch (const gloo::Exception& e) {
        throw Error("rank " + std::to_string(rank()) + " " + what,
                    std::string("failed (a peer ended or timed out): ") + e.what());
      }
    });
  }

  std::chrono::milliseconds timeout_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
};

}  // namespace

std::unique_ptr<Communicator> make_gloo_communicator(int rank, int size, RendezvousStore& store,
                                                     const std::string& interface_host) {
  return std::make_unique<GlooCommunicator>(rank, size, store, interface_host);
}

}  // namespace spillway
