// Reads GGUF files (llama.cpp's single-file model format), versions 2 and 3.
//
// Layout, all little-endian: "GGUF", u32 version, u64 tensor count, u64
// metadata count; metadata as (string key, u32 value type, value); tensor
// infos as (string name, u32 n_dims, u64 dims[n_dims], u32 ggml type, u64
// offset); then, padded to `general.alignment` (default 32) from the start
// of the file, the data section, each tensor at its offset into it. Strings
// are a u64 byte count and the bytes. dims are in ggml's order: dims[0]
// varies fastest, so a 2-D tensor with dims [in, out] is row-major
// [out, in]; shape() gives the row-major order.
//
// The file is memory-mapped and validated whole on opening: truncation,
// offsets that are misaligned or run past the end, overlapping tensors,
// unknown value or tensor types are each an Error naming the file (and the
// key or tensor). Tensors of F32, F16, BF16, Q8_0 and Q4_1 dequantize to float32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/shape.h"

namespace spillway {

enum class GgufValueType : uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};

// The ggml tensor types spillway dequantizes (ggml's numbering).
enum class GgmlType : uint32_t { f32 = 0, f16 = 1, q4_1 = 3, q8_0 = 8, bf16 = 30 };

// Q8_0: blocks of 32 weights, each an f16 scale followed by 32 int8 values;
// weight = scale * value.
inline constexpr int64_t kQ8_0BlockSize = 32;
inline constexpr int64_t kQ8_0BlockBytes = 2 + kQ8_0BlockSize;
// Q4_1: blocks of 32 weights: an f16 scale d, an f16 minimum m, then 16 bytes
// of 4-bit values q, weight k from the low nibble of byte k and weight k + 16
// from its high nibble; weight = d * q + m.
inline constexpr int64_t kQ4_1BlockSize = 32;
inline constexpr int64_t kQ4_1BlockBytes = 4 + kQ4_1BlockSize / 2;
inline constexpr uint64_t kGgufDefaultAlignment = 32;

std::string_view ggml_type_name(uint32_t type);  // "Q4_K", or "unknown"

// One metadata value. Integers of every width are held as int64 or uint64
// (by signedness), floats as double; arrays hold their elements.
struct GgufValue {
  GgufValueType type = GgufValueType::u8;
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0.0;
  bool b = false;
  std::string s;
  GgufValueType element_type = GgufValueType::u8;  // arrays only
  std::vector<GgufValue> items;                    // arrays only

  bool is_integer() const;
  bool is_float() const;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // ggml order: dims[0] varies fastest
  GgmlType type = GgmlType::f32;
  uint64_t offset = 0;  // into the data section
  uint64_t bytes = 0;

  Shape shape() const;  // row-major: dims reversed
  int64_t numel() const;
};

class GgufFile {
 public:
  explicit GgufFile(std::string path);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }

  const std::map<std::string, GgufValue, std::less<>>& metadata() const { return metadata_; }
  // nullptr when absent.
  const GgufValue* find(std::string_view key) const;
  // Typed lookups: Error naming the file and key when the key is absent or
  // holds another type. get_int takes any integer type (a negative value
  // read from an unsigned type cannot happen; one above int64 is an Error),
  // get_float any float or integer.
  std::string get_string(std::string_view key) const;
  int64_t get_int(std::string_view key) const;
  double get_float(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<int64_t> get_int_array(std::string_view key) const;
  std::vector<double> get_float_array(std::string_view key) const;
  std::optional<int64_t> int_or_none(std::string_view key) const;
  std::optional<double> float_or_none(std::string_view key) const;

  // In file order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  const GgufTensorInfo& tensor(std::string_view name) const;  // Error when absent
  // The tensor's stored bytes, inside the mapping.
  std::span<const std::byte> raw(const GgufTensorInfo& t) const;
  // Dequantized to float32, in ggml order (which is row-major for shape()).
  std::vector<float> read_f32(const GgufTensorInfo& t) const;
  void read_f32(const GgufTensorInfo& t, std::span<float> out) const;

 private:
  void check_file_end(const GgufTensorInfo* last, uint64_t header_end) const;
  void parse();

  std::string path_;
  const std::byte* map_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::map<std::string, GgufValue, std::less<>> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// True when the file at `path` starts with the GGUF magic.
bool is_gguf_file(const std::string& path);

}  // namespace spillway
