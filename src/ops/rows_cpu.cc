#include <cstring>

#include "ops/rows.h"

namespace spillway::ops {

void copy_rows(const void* src, void* dst, const RowCopy& c) {
  const auto* from = static_cast<const char*>(src);
  auto* to = static_cast<char*>(dst);
  const auto bytes = static_cast<size_t>(c.count * c.row_bytes);
  for (int64_t b = 0; b < c.batch; ++b) {
    std::memcpy(to + (b * c.dst_rows + c.dst_first) * c.row_bytes, from + (b * c.src_rows + c.src_first) * c.row_bytes,
                bytes);
  }
}

}  // namespace spillway::ops
