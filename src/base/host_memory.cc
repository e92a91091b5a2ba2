#include "base/host_memory.h"

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

}  // namespace spillway
