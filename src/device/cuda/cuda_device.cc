#include "device/cuda/cuda_device.h"

#include <unistd.h>

#include <algorithm>
#include <string>

#include "base/bytes.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_pool.h"
#include "device/cuda/device_guard.h"

namespace spillway {

namespace {

// Pools are reserved in 2 MiB steps, the size of the driver's large pages.
constexpr uint64_t kPoolGranule = 2ull << 20;

std::string device_name(int ordinal) { return "cuda:" + std::to_string(ordinal); }

uint64_t resolve_device_budget(int ordinal, uint64_t budget) {
  CudaDeviceGuard guard(ordinal);
  size_t free_bytes = 0, total_bytes = 0;
  SPW_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (budget == MemorySpace::kUnlimited) {
    const auto share = static_cast<uint64_t>(kDefaultDevicePoolShareOfFree * static_cast<double>(free_bytes));
    return share & ~(kPoolGranule - 1);
  }
  SPW_CHECK(budget <= free_bytes, device_name(ordinal), "device budget ", format_bytes(budget),
            " is more than the ", format_bytes(free_bytes), " free (of ", format_bytes(total_bytes),
            ")");
  return budget;
}

uint64_t resolve_host_budget(uint64_t budget) {
  if (budget != MemorySpace::kUnlimited) return budget;
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  SPW_CHECK(pages > 0 && page_size > 0, "pinned host pool", "cannot read the host's memory size");
  const uint64_t half_ram = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size) / 2;
  return std::min(kDefaultPinnedPoolBytes, half_ram) & ~(kPoolGranule - 1);
}

Device::Streams make_cuda_streams(int ordinal) {
  Device::Streams streams;
  for (int k = 0; k < kStreamKindCount; ++k) {
    streams[k] = std::make_unique<CudaStream>(
        device_name(ordinal) + ":" + std::string(stream_kind_name(static_cast<StreamKind>(k))), ordinal);
  }
  return streams;
}

}  // namespace

CudaDevice::CudaDevice(int ordinal, uint64_t device_budget, uint64_t host_budget)
    : Device(device_name(ordinal),
             make_cuda_pool_space(device_name(ordinal), CudaPoolKind::device, ordinal,
                                  resolve_device_budget(ordinal, device_budget)),
             make_cuda_pool_space(device_name(ordinal) + ":pinned_host", CudaPoolKind::pinned_host,
                                  ordinal, resolve_host_budget(host_budget)),
             make_cuda_streams(ordinal)),
      ordinal_(ordinal) {}

std::unique_ptr<Event> CudaDevice::new_event(bool timed) { return std::make_unique<CudaEvent>(ordinal_, timed); }

void CudaDevice::copy_async(void* dst, const void* src, uint64_t bytes, Stream& stream) {
  CudaStream& cuda = as_cuda_stream(stream);
  if (bytes == 0) return;
  SPW_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cuda.handle()));
}

void CudaDevice::zero_async(void* dst, uint64_t bytes, Stream& stream) {
  CudaStream& cuda = as_cuda_stream(stream);
  if (bytes == 0) return;
  SPW_CUDA(cudaMemsetAsync(dst, 0, bytes, cuda.handle()));
}

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

std::string cuda_device_name(int ordinal) {
  cudaDeviceProp prop{};
  SPW_CUDA(cudaGetDeviceProperties(&prop, ordinal));
  return prop.name;
}

uint64_t cuda_default_device_budget(int ordinal) { return resolve_device_budget(ordinal, MemorySpace::kUnlimited); }

void set_current_cuda_device(int ordinal) { SPW_CUDA(cudaSetDevice(ordinal)); }

std::unique_ptr<Device> make_cuda_device(int ordinal, uint64_t device_budget, uint64_t host_budget) {
  const int count = cuda_device_count();
  SPW_CHECK(ordinal >= 0 && ordinal < count, device_name(ordinal), "no such GPU (this machine has ",
            count, ")");
  return std::make_unique<CudaDevice>(ordinal, device_budget, host_budget);
}

}  // namespace spillway
