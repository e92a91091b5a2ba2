#include "base/host_memory.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <fstream>
#include <string>

namespace spillway {

uint64_t available_host_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  uint64_t kb = 0;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return 16ull << 30;
}

namespace {

uint64_t own_status_bytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::stoull(line.substr(field.size())) * 1024;  // "VmRSS:  1234 kB"
  }
  return 0;
}

}  // namespace

uint64_t resident_host_bytes() { return own_status_bytes("VmRSS:"); }
uint64_t peak_resident_host_bytes() { return own_status_bytes("VmHWM:"); }

void return_free_host_memory() {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

}  // namespace spillway
