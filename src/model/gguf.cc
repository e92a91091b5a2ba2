#include "model/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>

#include "base/checked_math.h"
#include "base/dtype.h"
#include "base/limits.h"
#include "base/regular_file.h"
#include "base/status.h"

namespace spillway {

namespace {

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr int kMaxDims = 4;               // GGML_MAX_DIMS
constexpr int kMaxArrayNesting = 8;       // arrays of arrays are legal; bound the recursion
constexpr int64_t kMaxDim = int64_t{1} << 40;

// Bounds-checked little-endian reads from the mapping; every failure names
// what was being read and where.
class Cursor {
 public:
  Cursor(const std::byte* data, size_t size, const std::string& path) : data_(data), size_(size), path_(path) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  void need(uint64_t n, std::string_view what) const {
    SPW_CHECK(n <= remaining(), path_, "truncated: ", what, " at byte ", pos_, " needs ", n,
              " bytes but the file ends at ", size_);
  }

  template <typename T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(std::string_view what) {
    uint64_t n = read<uint64_t>(what);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return s;
  }

 private:
  const std::byte* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& path_;
};

// Smallest encoding of one value of `type`, so that an array's count can be
// checked against the bytes left before anything is allocated for it.
uint64_t min_value_bytes(GgufValueType type) {
  switch (type) {
    case GgufValueType::u8:
    case GgufValueType::i8:
    case GgufValueType::boolean:
      return 1;
    case GgufValueType::u16:
    case GgufValueType::i16:
      return 2;
    case GgufValueType::u32:
    case GgufValueType::i32:
    case GgufValueType::f32:
      return 4;
    case GgufValueType::u64:
    case GgufValueType::i64:
    case GgufValueType::f64:
    case GgufValueType::string:
      return 8;
    case GgufValueType::array:
      return 12;
  }
  return 1;
}

bool known_value_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::f64); }

GgufValue read_value(Cursor& in, GgufValueType type, const std::string& path, const std::string& what, int depth) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufValueType::u8: v.u = in.read<uint8_t>(what); break;
    case GgufValueType::i8: v.i = in.read<int8_t>(what); break;
    case GgufValueType::u16: v.u = in.read<uint16_t>(what); break;
    case GgufValueType::i16: v.i = in.read<int16_t>(what); break;
    case GgufValueType::u32: v.u = in.read<uint32_t>(what); break;
    case GgufValueType::i32: v.i = in.read<int32_t>(what); break;
    case GgufValueType::u64: v.u = in.read<uint64_t>(what); break;
    case GgufValueType::i64: v.i = in.read<int64_t>(what); break;
    case GgufValueType::f32: v.f = in.read<float>(what); break;
    case GgufValueType::f64: v.f = in.read<double>(what); break;
    case GgufValueType::boolean: {
      uint8_t b = in.read<uint8_t>(what);
      SPW_CHECK(b <= 1, path, what, ": bool value ", static_cast<int>(b), " is neither 0 nor 1");
      v.b = b == 1;
      break;
    }
    case GgufValueType::string: v.s = in.read_string(what); break;
    case GgufValueType::array: {
      SPW_CHECK(depth < kMaxArrayNesting, path, what, ": arrays nested deeper than ", kMaxArrayNesting);
      uint32_t et = in.read<uint32_t>(what);
      SPW_CHECK(known_value_type(et), path, what, ": unknown array element type ", et);
      v.element_type = static_cast<GgufValueType>(et);
      uint64_t count = in.read<uint64_t>(what);
      uint64_t min_bytes = min_value_bytes(v.element_type);
      SPW_CHECK(count <= limits::kMaxGgufArrayElements, path, what, " holds ", count, " elements; at most ",
                limits::kMaxGgufArrayElements);
      SPW_CHECK(count <= in.remaining() / min_bytes, path, "truncated: ", what, " holds ", count,
                " elements but only ", in.remaining(), " bytes remain");
      v.items.reserve(static_cast<size_t>(count));
      for (uint64_t k = 0; k < count; ++k) v.items.push_back(read_value(in, v.element_type, path, what, depth + 1));
      break;
    }
  }
  return v;
}

const char* value_type_name(GgufValueType t) {
  switch (t) {
    case GgufValueType::u8: return "uint8";
    case GgufValueType::i8: return "int8";
    case GgufValueType::u16: return "uint16";
    case GgufValueType::i16: return "int16";
    case GgufValueType::u32: return "uint32";
    case GgufValueType::i32: return "int32";
    case GgufValueType::f32: return "float32";
    case GgufValueType::boolean: return "bool";
    case GgufValueType::string: return "string";
    case GgufValueType::array: return "array";
    case GgufValueType::u64: return "uint64";
    case GgufValueType::i64: return "int64";
    case GgufValueType::f64: return "float64";
  }
  return "unknown";
}

int64_t value_as_int(const GgufValue& v, const std::string& path, std::string_view key) {
  SPW_CHECK(v.is_integer(), path, "metadata '", key, "' is ", value_type_name(v.type), ", not an integer");
  if (v.type == GgufValueType::u8 || v.type == GgufValueType::u16 || v.type == GgufValueType::u32 ||
      v.type == GgufValueType::u64) {
    SPW_CHECK(v.u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), path, "metadata '", key,
              "' value ", v.u, " is too large");
    return static_cast<int64_t>(v.u);
  }
  return v.i;
}

double value_as_float(const GgufValue& v, const std::string& path, std::string_view key) {
  if (v.is_float()) return v.f;
  SPW_CHECK(v.is_integer(), path, "metadata '", key, "' is ", value_type_name(v.type), ", not a number");
  return static_cast<double>(value_as_int(v, path, key));
}

// The bytes a tensor of `numel` elements takes, or Error where that count
// does not fit in 64 bits (it would wrap to a small size that passes the
// bounds checks and then be read far past the mapping).
uint64_t tensor_bytes(GgmlType type, int64_t numel, const std::string& path, const std::string& what) {
  const auto n = static_cast<uint64_t>(numel);
  const std::string quantity = "the byte size of " + what;
  switch (type) {
    case GgmlType::f32: return checked_mul(n, 4, path, quantity);
    case GgmlType::f16:
    case GgmlType::bf16: return checked_mul(n, 2, path, quantity);
    case GgmlType::q8_0: return checked_mul(n / kQ8_0BlockSize, kQ8_0BlockBytes, path, quantity);
    case GgmlType::q4_1: return checked_mul(n / kQ4_1BlockSize, kQ4_1BlockBytes, path, quantity);
  }
  return 0;
}

bool supported_tensor_type(uint32_t t) {
  return t == static_cast<uint32_t>(GgmlType::f32) || t == static_cast<uint32_t>(GgmlType::f16) ||
         t == static_cast<uint32_t>(GgmlType::q8_0) || t == static_cast<uint32_t>(GgmlType::q4_1) ||
         t == static_cast<uint32_t>(GgmlType::bf16);
}

float load_f16(const std::byte* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return to_float(f16{bits});
}

}  // namespace

std::string_view ggml_type_name(uint32_t type) {
  static constexpr std::string_view kNames[] = {
      "F32",     "F16",    "Q4_0",   "Q4_1",    "Q4_2",   "Q4_3",  "Q5_0",   "Q5_1",   "Q8_0",   "Q8_1",
      "Q2_K",    "Q3_K",   "Q4_K",   "Q5_K",    "Q6_K",   "Q8_K",  "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",
      "IQ4_NL",  "IQ3_S",  "IQ2_S",  "IQ4_XS",  "I8",     "I16",   "I32",    "I64",    "F64",    "IQ1_M",
      "BF16",
  };
  if (type < std::size(kNames)) return kNames[type];
  return "unknown";
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufValueType::u8:
    case GgufValueType::i8:
    case GgufValueType::u16:
    case GgufValueType::i16:
    case GgufValueType::u32:
    case GgufValueType::i32:
    case GgufValueType::u64:
    case GgufValueType::i64:
      return true;
    default:
      return false;
  }
}

bool GgufValue::is_float() const { return type == GgufValueType::f32 || type == GgufValueType::f64; }

Shape GgufTensorInfo::shape() const { return Shape(std::vector<int64_t>(dims.rbegin(), dims.rend())); }

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

GgufFile::GgufFile(std::string path) : path_(std::move(path)) {
  const int fd = open_regular_file(path_, "a GGUF file");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw Error(path_, std::string("cannot stat: ") + std::strerror(errno));
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ == 0) {
    ::close(fd);
    throw Error(path_, "truncated: the file is empty (expected a GGUF header)");
  }
  void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_errno = errno;
  ::close(fd);
  SPW_CHECK(m != MAP_FAILED, path_, "cannot map: ", std::strerror(map_errno));
  map_ = static_cast<const std::byte*>(m);
  try {
    parse();
  } catch (...) {
    ::munmap(const_cast<std::byte*>(map_), size_);
    map_ = nullptr;
    throw;
  }
}

GgufFile::~GgufFile() {
  if (map_ != nullptr) ::munmap(const_cast<std::byte*>(map_), size_);
}

void GgufFile::parse() {
  Cursor in(map_, size_, path_);
  in.need(4, "the magic");
  SPW_CHECK(std::memcmp(map_, kMagic, 4) == 0, path_, "not a GGUF file (bad magic; expected \"GGUF\")");
  in.read<uint32_t>("the magic");
  version_ = in.read<uint32_t>("the version");
  SPW_CHECK(version_ == 2 || version_ == 3, path_, "GGUF version ", version_,
            " is not supported (spillway reads versions 2 and 3, little-endian)");
  uint64_t tensor_count = in.read<uint64_t>("the tensor count");
  uint64_t kv_count = in.read<uint64_t>("the metadata count");
  // Each key/value takes at least 12 bytes and each tensor info 24.
  SPW_CHECK(kv_count <= in.remaining() / 12, path_, "truncated: header claims ", kv_count, " metadata entries");
  SPW_CHECK(tensor_count <= in.remaining() / 24, path_, "truncated: header claims ", tensor_count, " tensors");

  for (uint64_t k = 0; k < kv_count; ++k) {
    std::string key = in.read_string("metadata key " + std::to_string(k));
    std::string what = "metadata '" + key + "'";
    uint32_t type = in.read<uint32_t>(what);
    SPW_CHECK(known_value_type(type), path_, what, " has unknown value type ", type);
    GgufValue v = read_value(in, static_cast<GgufValueType>(type), path_, what, 0);
    SPW_CHECK(metadata_.emplace(key, std::move(v)).second, path_, what, " appears twice");
  }

  if (const GgufValue* a = find("general.alignment")) {
    int64_t align = value_as_int(*a, path_, "general.alignment");
    SPW_CHECK(align > 0 && (align & (align - 1)) == 0, path_, "general.alignment ", align,
              " is not a power of two");
    alignment_ = static_cast<uint64_t>(align);
  }

  tensors_.reserve(static_cast<size_t>(tensor_count));
  for (uint64_t k = 0; k < tensor_count; ++k) {
    GgufTensorInfo t;
    t.name = in.read_string("tensor info " + std::to_string(k));
    std::string what = "tensor '" + t.name + "'";
    uint32_t n_dims = in.read<uint32_t>(what);
    SPW_CHECK(n_dims >= 1 && n_dims <= kMaxDims, path_, what, " has ", n_dims, " dimensions (expected 1 to ",
              kMaxDims, ")");
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      auto dim = in.read<uint64_t>(what);
      SPW_CHECK(dim >= 1 && dim <= static_cast<uint64_t>(kMaxDim), path_, what, " has dimension ", d, " of size ",
                dim);
      t.dims.push_back(static_cast<int64_t>(dim));
      const std::optional<uint64_t> product = mul_or_none(static_cast<uint64_t>(numel), dim);
      SPW_CHECK(product && *product <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), path_, what,
                " has too many elements");
      numel = static_cast<int64_t>(*product);
    }
    uint32_t type = in.read<uint32_t>(what);
    SPW_CHECK(supported_tensor_type(type), path_, what, " has ggml type ", type, " (", ggml_type_name(type),
              "), which spillway cannot dequantize (it reads F32, F16, BF16, Q8_0 and Q4_1)");
    t.type = static_cast<GgmlType>(type);
    if (t.type == GgmlType::q8_0 || t.type == GgmlType::q4_1) {
      SPW_CHECK(t.dims[0] % kQ8_0BlockSize == 0, path_, what, " is ", ggml_type_name(type),
                " but its row length ", t.dims[0], " is not a multiple of ", kQ8_0BlockSize);
    }
    t.bytes = tensor_bytes(t.type, numel, path_, what);
    t.offset = in.read<uint64_t>(what);
    SPW_CHECK(t.offset % alignment_ == 0, path_, what, " offset ", t.offset, " is not a multiple of the alignment ",
              alignment_);
    SPW_CHECK(tensor_index_.emplace(t.name, tensors_.size()).second, path_, what, " appears twice");
    tensors_.push_back(std::move(t));
  }

  data_offset_ = (in.pos() + alignment_ - 1) / alignment_ * alignment_;
  uint64_t data_size = data_offset_ <= size_ ? size_ - data_offset_ : 0;
  for (const GgufTensorInfo& t : tensors_) {
    SPW_CHECK(t.offset <= data_size && t.bytes <= data_size - t.offset, path_, "tensor '", t.name, "' (",
              t.bytes, " bytes at data offset ", t.offset, ") runs past the end of the file (data section holds ",
              data_size, " bytes): truncated or a bad offset");
  }
  std::vector<const GgufTensorInfo*> by_offset;
  for (const GgufTensorInfo& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t k = 1; k < by_offset.size(); ++k) {
    const GgufTensorInfo& a = *by_offset[k - 1];
    const GgufTensorInfo& b = *by_offset[k];
    SPW_CHECK(a.offset + a.bytes <= b.offset, path_, "tensor '", b.name, "' overlaps tensor '", a.name, "'");
  }
  check_file_end(by_offset.empty() ? nullptr : by_offset.back(), in.pos());
}

// The GGUF spec pads each tensor's data to the alignment (llama.cpp's writer
// pads after the last tensor too, others stop at its last byte), and says
// nothing may follow; so the file ends at the last tensor's end or at the
// next multiple of the alignment after it, and with no tensors at the end of
// the header or its padding. Anything longer is bytes that some tool
// appended or a file cut and pasted wrongly.
void GgufFile::check_file_end(const GgufTensorInfo* last, uint64_t header_end) const {
  const uint64_t end = last ? data_offset_ + last->offset + last->bytes : header_end;
  const uint64_t padded = (end + alignment_ - 1) / alignment_ * alignment_;
  SPW_CHECK(size_ <= padded, path_, size_ - end, " bytes follow the ",
            last ? "last tensor's data ('" + last->name + "')" : std::string("header"),
            " where the file should end (", end, " bytes, or ", padded,
            " with the alignment's padding): garbage appended or a damaged file");
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

namespace {
const GgufValue& require(const GgufFile& f, std::string_view key) {
  const GgufValue* v = f.find(key);
  SPW_CHECK(v != nullptr, f.path(), "missing metadata '", key, "'");
  return *v;
}

const GgufValue& require_array(const GgufFile& f, std::string_view key) {
  const GgufValue& v = require(f, key);
  SPW_CHECK(v.type == GgufValueType::array, f.path(), "metadata '", key, "' is ", value_type_name(v.type),
            ", not an array");
  return v;
}
}  // namespace

std::string GgufFile::get_string(std::string_view key) const {
  const GgufValue& v = require(*this, key);
  SPW_CHECK(v.type == GgufValueType::string, path_, "metadata '", key, "' is ", value_type_name(v.type),
            ", not a string");
  return v.s;
}

int64_t GgufFile::get_int(std::string_view key) const { return value_as_int(require(*this, key), path_, key); }

double GgufFile::get_float(std::string_view key) const { return value_as_float(require(*this, key), path_, key); }

bool GgufFile::get_bool(std::string_view key) const {
  const GgufValue& v = require(*this, key);
  SPW_CHECK(v.type == GgufValueType::boolean, path_, "metadata '", key, "' is ", value_type_name(v.type),
            ", not a bool");
  return v.b;
}

std::vector<std::string> GgufFile::get_string_array(std::string_view key) const {
  const GgufValue& v = require_array(*this, key);
  SPW_CHECK(v.element_type == GgufValueType::string, path_, "metadata '", key, "' is an array of ",
            value_type_name(v.element_type), ", not of strings");
  std::vector<std::string> out;
  out.reserve(v.items.size());
  for (const GgufValue& item : v.items) out.push_back(item.s);
  return out;
}

std::vector<int64_t> GgufFile::get_int_array(std::string_view key) const {
  const GgufValue& v = require_array(*this, key);
  std::vector<int64_t> out;
  out.reserve(v.items.size());
  for (const GgufValue& item : v.items) out.push_back(value_as_int(item, path_, key));
  return out;
}

std::vector<double> GgufFile::get_float_array(std::string_view key) const {
  const GgufValue& v = require_array(*this, key);
  std::vector<double> out;
  out.reserve(v.items.size());
  for (const GgufValue& item : v.items) out.push_back(value_as_float(item, path_, key));
  return out;
}

std::optional<int64_t> GgufFile::int_or_none(std::string_view key) const {
  if (find(key) == nullptr) return std::nullopt;
  return get_int(key);
}

std::optional<double> GgufFile::float_or_none(std::string_view key) const {
  if (find(key) == nullptr) return std::nullopt;
  return get_float(key);
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo& GgufFile::tensor(std::string_view name) const {
  const GgufTensorInfo* t = find_tensor(name);
  SPW_CHECK(t != nullptr, path_, "no tensor '", name, "'");
  return *t;
}

std::span<const std::byte> GgufFile::raw(const GgufTensorInfo& t) const {
  return {map_ + data_offset_ + t.offset, static_cast<size_t>(t.bytes)};
}

std::vector<float> GgufFile::read_f32(const GgufTensorInfo& t) const {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  read_f32(t, out);
  return out;
}

void GgufFile::read_f32(const GgufTensorInfo& t, std::span<float> out) const {
  const int64_t n = t.numel();
  SPW_CHECK(static_cast<int64_t>(out.size()) == n, path_, "tensor '", t.name, "' has ", n,
            " elements but the destination holds ", out.size());
  const std::byte* src = raw(t).data();
  float* dst = out.data();
  switch (t.type) {
    case GgmlType::f32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      break;
    case GgmlType::f16:
#pragma omp parallel for schedule(static) if (n > (1 << 16))
      for (int64_t k = 0; k < n; ++k) dst[k] = load_f16(src + 2 * k);
      break;
    case GgmlType::bf16:
#pragma omp parallel for schedule(static) if (n > (1 << 16))
      for (int64_t k = 0; k < n; ++k) {
        uint16_t bits;
        std::memcpy(&bits, src + 2 * k, 2);
        dst[k] = to_float(bf16{bits});
      }
      break;
    case GgmlType::q8_0: {
      const int64_t blocks = n / kQ8_0BlockSize;
#pragma omp parallel for schedule(static) if (blocks > (1 << 11))
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const std::byte* b = src + blk * kQ8_0BlockBytes;
        const float scale = load_f16(b);
        const auto* q = reinterpret_cast<const int8_t*>(b + 2);
        float* o = dst + blk * kQ8_0BlockSize;
        for (int64_t k = 0; k < kQ8_0BlockSize; ++k) o[k] = scale * static_cast<float>(q[k]);
      }
      break;
    }
    case GgmlType::q4_1: {
      const int64_t blocks = n / kQ4_1BlockSize;
#pragma omp parallel for schedule(static) if (blocks > (1 << 11))
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const std::byte* b = src + blk * kQ4_1BlockBytes;
        const float scale = load_f16(b);
        const float minimum = load_f16(b + 2);
        const auto* q = reinterpret_cast<const uint8_t*>(b + 4);
        float* o = dst + blk * kQ4_1BlockSize;
        for (int64_t k = 0; k < kQ4_1BlockSize / 2; ++k) {
          o[k] = scale * static_cast<float>(q[k] & 0x0f) + minimum;
          o[k + kQ4_1BlockSize / 2] = scale * static_cast<float>(q[k] >> 4) + minimum;
        }
      }
      break;
    }
  }
}

bool is_gguf_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  if (!in.read(magic, 4)) return false;
  return std::memcmp(magic, kMagic, 4) == 0;
}

}  // namespace spillway
