#include "base/bytes.h"

#include <cctype>
#include <cmath>
#include <cstdio>

#include "base/status.h"

namespace spillway {

uint64_t parse_bytes(std::string_view text, std::string_view what,
                     std::optional<uint64_t> whole) {
  std::string s;
  for (char c : text) if (!std::isspace(static_cast<unsigned char>(c))) s += c;
  SPW_CHECK(!s.empty(), what, "empty byte size");
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(s, &pos);
  } catch (const std::exception&) {
    throw Error(what, "'" + std::string(text) + "' is not a byte size (try 24GiB, 512MB or 4096)");
  }
  SPW_CHECK(value >= 0 && std::isfinite(value), what, "byte size must be non-negative: '", text, "'");
  std::string unit = s.substr(pos);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  struct Unit { const char* name; double scale; };
  static constexpr Unit kUnits[] = {
      {"", 1}, {"b", 1},
      {"k", 1e3}, {"kb", 1e3}, {"m", 1e6}, {"mb", 1e6}, {"g", 1e9}, {"gb", 1e9}, {"t", 1e12}, {"tb", 1e12},
      {"kib", 1024.0}, {"mib", 1048576.0}, {"gib", 1073741824.0}, {"tib", 1099511627776.0},
  };
  if (unit == "%" || (unit.empty() && value <= 1.0 && s.find('.') != std::string::npos)) {
    SPW_CHECK(whole.has_value(), what, "a fraction ('", text, "') needs a known total; give bytes instead");
    double frac = unit == "%" ? value / 100.0 : value;
    SPW_CHECK(frac <= 1.0, what, "fraction '", text, "' is more than the whole");
    return static_cast<uint64_t>(frac * static_cast<double>(*whole));
  }
  for (const auto& u : kUnits) {
    if (unit != u.name) continue;
    // 2^64 and up has no uint64 value to round to (1e30 would be garbage).
    SPW_CHECK(value * u.scale < 18446744073709551616.0, what, "'", text, "' is more bytes than 64 bits count");
    return static_cast<uint64_t>(std::round(value * u.scale));
  }
  throw Error(what, "unknown unit '" + unit + "' in '" + std::string(text) +
                        "' (use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB or %)");
}

std::string format_bytes(uint64_t bytes) {
  static constexpr const char* kNames[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int i = 0;
  while (v >= 1024.0 && i < 4) { v /= 1024.0; ++i; }
  char buf[32];
  if (i == 0) std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else std::snprintf(buf, sizeof buf, "%.2f %s", v, kNames[i]);
  return buf;
}

std::string format_bytes_exact(uint64_t bytes) {
  static constexpr const char* kNames[] = {"KiB", "MiB", "GiB", "TiB"};
  for (int i = 3; i >= 0; --i) {
    const uint64_t unit = 1ull << (10 * (i + 1));
    if (bytes != 0 && bytes % unit == 0) return std::to_string(bytes / unit) + kNames[i];
  }
  return std::to_string(bytes);
}

}  // namespace spillway
