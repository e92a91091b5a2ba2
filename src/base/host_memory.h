// What the operating system says about host memory.
#pragma once

#include <cstdint>

namespace spillway {

// Host memory available to a new allocation (MemAvailable in /proc/meminfo);
// 16 GiB where the system does not say.
uint64_t available_host_bytes();

}  // namespace spillway
