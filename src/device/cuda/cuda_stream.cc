#include "device/cuda/cuda_stream.h"

#include "device/cuda/cuda_check.h"
#include "device/cuda/device_guard.h"

namespace spillway {

namespace {

const CudaEvent& as_cuda_event(const Event& event, const std::string& stream_name) {
  const auto* cuda = dynamic_cast<const CudaEvent*>(&event);
  SPW_CHECK(cuda != nullptr, stream_name, "event is not a CUDA event");
  return *cuda;
}

}  // namespace

CudaEvent::CudaEvent(int ordinal, bool timed) {
  CudaDeviceGuard guard(ordinal);
  SPW_CUDA(cudaEventCreateWithFlags(&event_, timed ? cudaEventDefault : cudaEventDisableTiming));
}

CudaEvent::~CudaEvent() { SPW_CUDA_WARN(cudaEventDestroy(event_)); }

void CudaEvent::synchronize() { SPW_CUDA(cudaEventSynchronize(event_)); }

bool CudaEvent::query() {
  const cudaError_t status = cudaEventQuery(event_);
  if (status == cudaErrorNotReady) return false;
  SPW_CUDA(status);
  return true;
}

double CudaEvent::seconds_since(const Event& earlier) const {
  float ms = 0;
  SPW_CUDA(cudaEventElapsedTime(&ms, as_cuda_event(earlier, "timing").handle(), event_));
  return ms * 1e-3;
}

CudaStream::CudaStream(std::string name, int ordinal) : Stream(std::move(name)) {
  CudaDeviceGuard guard(ordinal);
  SPW_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

CudaStream::~CudaStream() {
  SPW_CUDA_WARN(cudaStreamSynchronize(stream_));
  SPW_CUDA_WARN(cudaStreamDestroy(stream_));
}

void CudaStream::record(Event& event) {
  SPW_CUDA(cudaEventRecord(as_cuda_event(event, name()).handle(), stream_));
}

void CudaStream::wait(const Event& event) {
  SPW_CUDA(cudaStreamWaitEvent(stream_, as_cuda_event(event, name()).handle(), 0));
}

void CudaStream::synchronize() { SPW_CUDA(cudaStreamSynchronize(stream_)); }

CudaStream& as_cuda_stream(Stream& stream) {
  auto* cuda = dynamic_cast<CudaStream*>(&stream);
  SPW_CHECK(cuda != nullptr, stream.name(), "not a CUDA stream");
  return *cuda;
}

}  // namespace spillway
