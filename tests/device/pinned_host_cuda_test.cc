#include "device/cuda/pinned_host.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "device/cuda/cuda_device.h"

namespace spillway {
namespace {

class PinnedArraysTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
    device_ = make_cuda_device(0, 64ull << 20, 16ull << 20);
  }
  std::unique_ptr<Device> device_;
};

// Arrays that start and end inside pages, one too short for a whole page:
// what goes to the device and comes back lands where the array is, after
// write_back, whatever stretch a copy covers.
TEST_F(PinnedArraysTest, CopiesReachEveryPartOfTheArrays) {
  constexpr size_t kPage = 4096;
  char* block = static_cast<char*>(std::aligned_alloc(kPage, 16 * kPage));
  ASSERT_NE(block, nullptr);
  struct Piece {
    size_t offset, bytes;
  };
  const Piece pieces[] = {{100, 3 * kPage + 500}, {5 * kPage + 8, 1000}, {6 * kPage, 4 * kPage}};
  std::mt19937 rng(7);
  for (size_t i = 0; i < 16 * kPage; ++i) block[i] = static_cast<char>(rng());
  const std::vector<char> before(block, block + 16 * kPage);
  {
    PinnedArrays pinned;
    for (const Piece& p : pieces) pinned.add(block + p.offset, p.bytes);
    pinned.pin();
    Stream& s = device_->stream(StreamKind::compute);
    void* dev = device_->device_memory().allocate(4 * kPage + 1000, "test");
    for (size_t i = 0; i < std::size(pieces); ++i) {
      const Piece& p = pieces[i];
      // Out whole, then back in three uneven stretches, each byte flipped.
      pinned.copy_to_device(i, 0, dev, p.bytes, *device_, s);
      std::vector<char> host(p.bytes);
      device_->copy_async(host.data(), dev, p.bytes, s);
      s.synchronize();
      EXPECT_EQ(0, std::memcmp(host.data(), before.data() + p.offset, p.bytes)) << i;
      for (char& c : host) c = static_cast<char>(~c);
      device_->copy_async(dev, host.data(), p.bytes, s);
      const size_t cut1 = p.bytes / 3, cut2 = 2 * p.bytes / 3 + 1;
      pinned.copy_from_device(i, 0, dev, cut1, *device_, s);
      pinned.copy_from_device(i, cut1, static_cast<char*>(dev) + cut1, cut2 - cut1, *device_, s);
      pinned.copy_from_device(i, cut2, static_cast<char*>(dev) + cut2, p.bytes - cut2, *device_, s);
      s.synchronize();
    }
    pinned.write_back();
    device_->device_memory().free(dev);
  }
  for (size_t i = 0; i < 16 * kPage; ++i) {
    bool inside = false;
    for (const Piece& p : pieces) inside = inside || (i >= p.offset && i < p.offset + p.bytes);
    ASSERT_EQ(block[i], inside ? static_cast<char>(~before[i]) : before[i]) << i;
  }
  std::free(block);
}

// What pinning in place must never break: a pageable buffer that shares a
// page with a pinned array copies as any pageable buffer does.
TEST_F(PinnedArraysTest, ABufferSharingAPageWithAnArrayStillCopies) {
  constexpr size_t kPage = 4096;
  char* block = static_cast<char*>(std::aligned_alloc(kPage, 8 * kPage));
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, 8 * kPage);
  PinnedArrays pinned;
  pinned.add(block + 2000, 5 * kPage);  // whole pages 1..4 of the block registered
  pinned.pin();
  Stream& s = device_->stream(StreamKind::compute);
  void* dev = device_->device_memory().allocate(kPage, "test");
  // From inside the first page (shared with the array's head) into the last.
  EXPECT_NO_THROW(device_->copy_async(dev, block + 10, 1990, s));
  EXPECT_NO_THROW(device_->copy_async(block + 5 * kPage + 2100, dev, 1000, s));
  s.synchronize();
  device_->device_memory().free(dev);
  std::free(block);
}

}  // namespace
}  // namespace spillway
