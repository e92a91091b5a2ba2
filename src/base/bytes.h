// Byte sizes as people write them ("24GiB", "1.5 GB", "512MiB", "4096") and
// back again, for budgets given on the command line or in the environment.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace spillway {

// Parses a byte count. `what` names the setting in the error ("--device-mem").
// A fraction ("0.5" or "50%") is allowed only when `whole` is given, and is
// taken of it (the card's memory, say).
uint64_t parse_bytes(std::string_view text, std::string_view what,
                     std::optional<uint64_t> whole = std::nullopt);

std::string format_bytes(uint64_t bytes);  // "1.50 GiB"
// Exact, in the largest binary unit that divides it ("24GiB", "4097"), so
// that parse_bytes reads back the same count (written configurations).
std::string format_bytes_exact(uint64_t bytes);

// Rounds up to a multiple of `align` (a power of two).
constexpr uint64_t align_up(uint64_t n, uint64_t align) { return (n + align - 1) & ~(align - 1); }

}  // namespace spillway
