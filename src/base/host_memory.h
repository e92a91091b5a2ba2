// What the operating system says about host memory.
#pragma once

#include <cstdint>

namespace spillway {

// Host memory available to a new allocation (MemAvailable in /proc/meminfo);
// 16 GiB where the system does not say.
uint64_t available_host_bytes();

// This process's resident memory now, and its peak so far (VmRSS and VmHWM
// in /proc/self/status); 0 where the system does not say.
uint64_t resident_host_bytes();
uint64_t peak_resident_host_bytes();

// Hands the allocator's free memory back to the system (glibc's
// malloc_trim), after a large release: freed blocks can otherwise stay
// resident, beside what the process planned to hold instead.
void return_free_host_memory();

}  // namespace spillway
