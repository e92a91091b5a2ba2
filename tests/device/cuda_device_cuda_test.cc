#include "device/cuda/cuda_device.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "base/status.h"
#include "device/cuda/cuda_check.h"

namespace spillway {
namespace {

constexpr uint64_t kPool = 64ull << 20;

std::string error_text(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CudaCheck, NamesTheCallAndCudasReason) {
  // Runs with or without a GPU: no machine has device 9999.
  std::string msg = error_text([] { SPW_CUDA(cudaSetDevice(9999)); });
  EXPECT_EQ(msg.rfind("cudaSetDevice(9999): ", 0), 0u) << msg;
  EXPECT_GT(msg.size(), std::string("cudaSetDevice(9999): ").size());
  // Without a driver every call fails again; with one the failure must not
  // linger in the last-error slot.
  if (cuda_device_count() > 0) {
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  }
}

class CudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
    device_ = make_cuda_device(0, kPool, kPool);
  }
  std::unique_ptr<Device> device_;
};

TEST_F(CudaDeviceTest, NamesPoolsAndStreams) {
  EXPECT_EQ(device_->name(), "cuda:0");
  EXPECT_EQ(device_->device_memory().name(), "cuda:0");
  EXPECT_EQ(device_->host_memory().name(), "cuda:0:pinned_host");
  EXPECT_EQ(device_->device_memory().budget(), kPool);
  EXPECT_EQ(device_->host_memory().budget(), kPool);
  auto& cuda = static_cast<CudaDevice&>(*device_);
  EXPECT_NE(cuda.cuda_stream(StreamKind::compute).handle(), cuda.cuda_stream(StreamKind::h2d).handle());
  EXPECT_NE(cuda.cuda_stream(StreamKind::d2h).handle(), nullptr);
  EXPECT_EQ(device_->stream(StreamKind::comm).name(), "cuda:0:comm");
  EXPECT_THROW(make_cuda_device(cuda_device_count()), Error);
}

TEST_F(CudaDeviceTest, PoolsHandOutAlignedMemoryOfTheRightKind) {
  void* on_device = device_->device_memory().allocate(1001, "d");
  void* pinned = device_->host_memory().allocate(1001, "h");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(on_device) % MemorySpace::kAlignment, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pinned) % MemorySpace::kAlignment, 0u);
  cudaPointerAttributes attrs{};
  SPW_CUDA(cudaPointerGetAttributes(&attrs, on_device));
  EXPECT_EQ(attrs.type, cudaMemoryTypeDevice);
  EXPECT_EQ(attrs.device, 0);
  SPW_CUDA(cudaPointerGetAttributes(&attrs, pinned));
  EXPECT_EQ(attrs.type, cudaMemoryTypeHost);
  device_->device_memory().free(on_device);
  device_->host_memory().free(pinned);
}

// Host → device on h2d, device → device on compute, device → host on d2h,
// joined by events. A host callback stalls the h2d stream first, so a stream
// that ignored its event would copy the stale fill instead of the data.
TEST_F(CudaDeviceTest, CopiesOnThreeStreamsFollowTheirEvents) {
  auto& cuda = static_cast<CudaDevice&>(*device_);
  auto h2d_done = device_->new_event();
  auto d2d_done = device_->new_event();
  std::mt19937_64 rng(5);
  for (uint64_t n : {1ull, 4099ull, 1000003ull, 8ull << 20}) {
    auto* src = static_cast<unsigned char*>(device_->host_memory().allocate(n, "src"));
    auto* dst = static_cast<unsigned char*>(device_->host_memory().allocate(n, "dst"));
    void* a = device_->device_memory().allocate(n, "a");
    void* b = device_->device_memory().allocate(n, "b");
    for (uint64_t i = 0; i < n; ++i) src[i] = static_cast<unsigned char>(rng());
    std::memset(dst, 0x5A, n);
    SPW_CUDA(cudaMemset(a, 0xA5, n));
    SPW_CUDA(cudaMemset(b, 0xA5, n));
    SPW_CUDA(cudaDeviceSynchronize());  // the streams below are non-blocking

    SPW_CUDA(cudaLaunchHostFunc(
        cuda.cuda_stream(StreamKind::h2d).handle(),
        [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(30)); }, nullptr));
    device_->copy_async(a, src, n, device_->stream(StreamKind::h2d));
    device_->stream(StreamKind::h2d).record(*h2d_done);
    device_->stream(StreamKind::compute).wait(*h2d_done);
    device_->copy_async(b, a, n, device_->stream(StreamKind::compute));
    device_->stream(StreamKind::compute).record(*d2d_done);
    device_->stream(StreamKind::d2h).wait(*d2d_done);
    device_->copy_async(dst, b, n, device_->stream(StreamKind::d2h));
    device_->stream(StreamKind::d2h).synchronize();

    EXPECT_TRUE(h2d_done->query());
    EXPECT_TRUE(d2d_done->query());
    EXPECT_EQ(std::memcmp(dst, src, n), 0) << "n=" << n;
    device_->synchronize();
    for (void* p : {a, b}) device_->device_memory().free(p);
    for (void* p : {static_cast<void*>(src), static_cast<void*>(dst)}) device_->host_memory().free(p);
  }
}

TEST_F(CudaDeviceTest, BudgetAndFragmentationErrorsNameThePool) {
  MemorySpace& space = device_->device_memory();
  void* half = space.allocate(kPool / 2, "half");
  std::string msg = error_text([&] { space.allocate(kPool / 2 + 1, "activations"); });
  EXPECT_EQ(msg.rfind("cuda:0: cannot allocate 'activations'", 0), 0u) << msg;
  EXPECT_NE(msg.find(format_bytes(kPool)), std::string::npos) << msg;
  EXPECT_EQ(space.in_use(), kPool / 2);

  // Within budget but split in two by a live block: the arena says so.
  void* quarter = space.allocate(kPool / 4, "quarter");
  space.free(half);
  msg = error_text([&] { space.allocate(kPool * 5 / 8, "wide"); });
  EXPECT_EQ(msg.rfind("cuda:0: no free block", 0), 0u) << msg;
  space.free(quarter);
  void* all = space.allocate(kPool, "all of it");
  space.free(all);
  EXPECT_EQ(space.in_use(), 0u);
  EXPECT_EQ(space.peak(), kPool);
}

TEST_F(CudaDeviceTest, ABudgetBeyondFreeMemoryIsRefusedUpFront) {
  size_t free_bytes = 0, total_bytes = 0;
  SPW_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  std::string msg = error_text([&] { make_cuda_device(0, uint64_t(total_bytes) * 2, kPool); });
  EXPECT_EQ(msg.rfind("cuda:0: device budget", 0), 0u) << msg;
}

}  // namespace
}  // namespace spillway
