// Streams and events of the CUDA backend: thin owners of cudaStream_t and
// cudaEvent_t. Streams are non-blocking, so they never serialise against the
// legacy default stream; events carry no timing, which makes record and wait
// cheaper.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "device/event.h"
#include "device/stream.h"

namespace spillway {

class CudaEvent final : public Event {
 public:
  explicit CudaEvent(int ordinal, bool timed = false);
  ~CudaEvent() override;
  void synchronize() override;
  bool query() override;
  double seconds_since(const Event& earlier) const override;
  cudaEvent_t handle() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

class CudaStream final : public Stream {
 public:
  CudaStream(std::string name, int ordinal);
  ~CudaStream() override;
  void record(Event& event) override;
  void wait(const Event& event) override;
  void synchronize() override;
  // For launching kernels and library calls on this stream.
  cudaStream_t handle() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// The CudaStream behind `stream`; throws Error when it is another backend's.
CudaStream& as_cuda_stream(Stream& stream);

}  // namespace spillway
