// Reading safetensors: map the file, check every number in the header
// against the file before trusting it, then hand out spans into the mapping.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>
#include <nlohmann/json.hpp>
#include <utility>

#include "base/bytes.h"
#include "base/checked_math.h"
#include "base/json_text.h"
#include "base/regular_file.h"
#include "base/status.h"
#include "model/safetensors.h"

namespace spillway {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian and is used in place");

namespace {

using nlohmann::json;

// The reference implementation refuses headers past 100 MB; real ones are a
// few MB at most, so anything larger is a corrupt length, not a header.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

struct SafetensorsDType {
  std::string_view name;
  DType type;
};
constexpr SafetensorsDType kSafetensorsDTypes[] = {
    {"F32", DType::f32}, {"F16", DType::f16}, {"BF16", DType::bf16}, {"F64", DType::f64},
    {"I32", DType::i32}, {"U16", DType::u16}, {"U32", DType::u32},
};
constexpr std::string_view kSupportedNames = "F32, F16, BF16, F64, I32, U16, U32";

bool find_safetensors_dtype(std::string_view name, DType* out) {
  for (const auto& d : kSafetensorsDTypes) {
    if (d.name == name) {
      *out = d.type;
      return true;
    }
  }
  return false;
}

std::string errno_text() { return std::strerror(errno); }

std::string tensor_label(std::string_view name) { return "tensor '" + std::string(name) + "'"; }

struct ParsedHeader {
  std::vector<SafetensorsTensor> tensors;
  std::map<std::string, std::string> metadata;
};

struct DataSpan {
  uint64_t begin, end;
  const std::string* name;
};

std::map<std::string, std::string> parse_metadata(const std::string& path, const json& value) {
  SPW_CHECK(value.is_object(), path, "\"__metadata__\" is not a JSON object");
  std::map<std::string, std::string> metadata;
  for (const auto& [key, v] : value.items()) {
    SPW_CHECK(v.is_string(), path, "\"__metadata__\" value for key '", key, "' is not a string");
    metadata.emplace(key, v.get<std::string>());
  }
  return metadata;
}

Shape parse_shape(const std::string& path, const std::string& label, const json& value) {
  SPW_CHECK(value.is_array(), path, label, " has a \"shape\" that is not an array");
  std::vector<int64_t> dims;
  for (const json& d : value) {
    SPW_CHECK(d.is_number_integer(), path, label, " has a non-integer dimension ", d.dump(),
              " in its shape ", value.dump());
    if (d.is_number_unsigned()) {
      uint64_t u = d.get<uint64_t>();
      SPW_CHECK(u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), path, label,
                " has a dimension too large (", u, ") in its shape");
      dims.push_back(static_cast<int64_t>(u));
    } else {
      int64_t s = d.get<int64_t>();
      SPW_CHECK(s >= 0, path, label, " has a negative dimension ", s, " in its shape ", value.dump());
      dims.push_back(s);
    }
  }
  return Shape(std::move(dims));
}

// numel × element size, or an error when it does not fit in 64 bits.
uint64_t shape_bytes(const std::string& path, const std::string& label, const Shape& shape, DType dtype) {
  std::optional<uint64_t> bytes = dtype_size(dtype);
  for (int64_t d : shape.dims()) {
    bytes = mul_or_none(*bytes, static_cast<uint64_t>(d));
    SPW_CHECK(bytes.has_value(), path, label, " has a shape ", shape.str(), " too large to address");
  }
  return *bytes;
}

std::pair<uint64_t, uint64_t> parse_offsets(const std::string& path, const std::string& label,
                                            const json& value) {
  SPW_CHECK(value.is_array() && value.size() == 2 && value[0].is_number_unsigned() &&
                value[1].is_number_unsigned(),
            path, label, " has \"data_offsets\" ", value.dump(), " that are not two non-negative integers");
  uint64_t begin = value[0].get<uint64_t>(), end = value[1].get<uint64_t>();
  SPW_CHECK(begin <= end, path, label, " has data_offsets [", begin, ", ", end, "] out of order");
  return {begin, end};
}

// The tensors must tile [0, data_size) exactly: the format leaves no room for
// padding, so a gap means a lost or misplaced tensor.
void check_coverage(const std::string& path, std::vector<DataSpan> spans, uint64_t data_size) {
  std::sort(spans.begin(), spans.end(), [](const DataSpan& a, const DataSpan& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  const DataSpan* previous = nullptr;
  for (const DataSpan& s : spans) {
    SPW_CHECK(s.begin >= covered, path, tensor_label(*s.name), " bytes [", s.begin, ", ", s.end,
              ") overlap ", tensor_label(*previous->name), " bytes [", previous->begin, ", ",
              previous->end, ")");
    SPW_CHECK(s.begin == covered, path, "hole of ", s.begin - covered, " bytes in the data buffer at [",
              covered, ", ", s.begin, "), before ", tensor_label(*s.name));
    covered = s.end;
    previous = &s;
  }
  SPW_CHECK(covered == data_size, path, "hole of ", data_size - covered,
            " bytes at the end of the data buffer, after ",
            previous ? tensor_label(*previous->name) : std::string("no tensor at all"));
}

ParsedHeader parse_header(const std::string& path, const std::byte* file, uint64_t file_size) {
  SPW_CHECK(file_size >= 8, path, "file is ", file_size,
            " bytes, shorter than the 8-byte header length: truncated or not a safetensors file");
  uint64_t header_size;
  std::memcpy(&header_size, file, 8);
  SPW_CHECK(header_size <= kMaxHeaderBytes, path, "header length ", header_size,
            " is absurdly large (the limit is ", format_bytes(kMaxHeaderBytes), "): not a safetensors file?");
  SPW_CHECK(header_size <= file_size - 8, path, "header length ", header_size,
            " runs past the end of the file (", file_size, " bytes): truncated or not a safetensors file");

  std::string_view text(reinterpret_cast<const char*>(file + 8), header_size);
  SPW_CHECK(!text.empty() && text.front() == '{', path,
            "header is not a JSON object (it must start with '{')");
  const json header = json_from_text(text, path, "header is not valid JSON");

  const uint64_t data_size = file_size - 8 - header_size;
  const std::byte* data = file + 8 + header_size;
  ParsedHeader parsed;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      parsed.metadata = parse_metadata(path, entry);
      continue;
    }
    const std::string label = tensor_label(name);
    SPW_CHECK(entry.is_object(), path, label, " is not a JSON object");
    // A named reference: lambdas may not capture structured bindings before
    // C++20 compilers caught up (clang 14 refuses, and builds the fuzzers).
    const json& tensor = entry;
    auto field = [&](const char* key) -> const json& {
      auto it = tensor.find(key);
      SPW_CHECK(it != tensor.end(), path, label, " is missing \"", key, "\"");
      return *it;
    };
    // A tensor entry has exactly these three keys; anything else is a writer
    // that means something spillway would silently ignore.
    for (const auto& [key, unused] : entry.items()) {
      SPW_CHECK(key == "dtype" || key == "shape" || key == "data_offsets", path, label, " has an unknown field \"",
                key, "\" (a tensor has only \"dtype\", \"shape\" and \"data_offsets\")");
    }
    const json& dtype_value = field("dtype");
    const json& shape_value = field("shape");
    const json& offsets_value = field("data_offsets");

    SPW_CHECK(dtype_value.is_string(), path, label, " has a \"dtype\" that is not a string");
    const std::string& dtype_name = dtype_value.get_ref<const std::string&>();
    DType dtype;
    SPW_CHECK(find_safetensors_dtype(dtype_name, &dtype), path, label, " has dtype ", dtype_name,
              ", which spillway does not support (supported: ", kSupportedNames, ")");
    Shape shape = parse_shape(path, label, shape_value);
    auto [begin, end] = parse_offsets(path, label, offsets_value);
    const uint64_t expected = shape_bytes(path, label, shape, dtype);
    SPW_CHECK(end - begin == expected, path, label, " holds ", end - begin, " bytes but shape ",
              shape.str(), " of ", dtype_name, " needs ", expected, " (byte size mismatch)");
    SPW_CHECK(end <= data_size, path, "truncated: ", label, " ends at data byte ", end,
              " but the file holds only ", data_size, " data bytes");

    parsed.tensors.push_back(SafetensorsTensor{
        name, dtype, std::move(shape),
        std::span<const std::byte>(data + begin, static_cast<size_t>(end - begin))});
  }
  // items() of a json object runs in key order, so the tensors are sorted by
  // name and the spans point at names that stay put from here on.
  std::vector<DataSpan> spans;
  for (const SafetensorsTensor& t : parsed.tensors) {
    uint64_t begin = static_cast<uint64_t>(t.bytes.data() - data);
    spans.push_back(DataSpan{begin, begin + t.bytes.size(), &t.name});
  }
  check_coverage(path, std::move(spans), data_size);
  return parsed;
}

template <typename Load>
void convert_each(int64_t n, float* out, Load load) {
#pragma omp parallel for schedule(static) if (n >= (int64_t{1} << 18))
  for (int64_t i = 0; i < n; ++i) out[i] = load(i);
}

}  // namespace

std::string_view safetensors_dtype_name(DType t) {
  for (const auto& d : kSafetensorsDTypes) {
    if (d.type == t) return d.name;
  }
  throw Error("safetensors", "dtype " + std::string(dtype_name(t)) + " has no safetensors name");
}

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  const int fd = open_regular_file(path_, "a safetensors file");
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    std::string reason = "cannot stat: " + errno_text();
    ::close(fd);
    throw Error(path_, reason);
  }
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size >= 8) {
    void* m = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    ::close(fd);  // the mapping keeps the file alive
    SPW_CHECK(m != MAP_FAILED, path_, "cannot map ", file_size, " bytes: ", std::strerror(map_errno));
    mapping_ = static_cast<const std::byte*>(m);
    mapping_size_ = file_size;
  } else {
    ::close(fd);
  }
  try {
    ParsedHeader parsed = parse_header(path_, mapping_, file_size);
    tensors_ = std::move(parsed.tensors);
    metadata_ = std::move(parsed.metadata);
  } catch (...) {
    unmap();
    throw;
  }
  for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
}

SafetensorsFile::~SafetensorsFile() { unmap(); }

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      mapping_(std::exchange(other.mapping_, nullptr)),
      mapping_size_(std::exchange(other.mapping_size_, 0)),
      tensors_(std::move(other.tensors_)),
      index_(std::move(other.index_)),
      metadata_(std::move(other.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_size_ = std::exchange(other.mapping_size_, 0);
    tensors_ = std::move(other.tensors_);
    index_ = std::move(other.index_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

void SafetensorsFile::unmap() {
  if (mapping_ != nullptr) {
    ::munmap(const_cast<std::byte*>(mapping_), mapping_size_);
    mapping_ = nullptr;
    mapping_size_ = 0;
  }
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const SafetensorsTensor& SafetensorsFile::tensor(std::string_view name) const {
  const SafetensorsTensor* t = find(name);
  SPW_CHECK(t != nullptr, path_, "no ", tensor_label(name));
  return *t;
}

void SafetensorsFile::read_tensor_as_f32(std::string_view name, const Shape& expected,
                                         std::span<float> out) const {
  const SafetensorsTensor& t = tensor(name);
  SPW_CHECK(t.shape == expected, path_, tensor_label(name), " has shape ", t.shape.str(), ", expected ",
            expected.str());
  convert_tensor_to_f32(t, path_, out);
}

void SafetensorsFile::read_tensor_as_f32(std::string_view name, std::span<float> out) const {
  convert_tensor_to_f32(tensor(name), path_, out);
}

void convert_tensor_to_f32(const SafetensorsTensor& t, std::string_view thing, std::span<float> out) {
  const int64_t n = t.shape.numel();
  SPW_CHECK(static_cast<int64_t>(out.size()) == n, thing, tensor_label(t.name), " has ", n,
            " elements (shape ", t.shape.str(), ") but the destination holds ", out.size());
  const std::byte* src = t.bytes.data();
  // Loads go through memcpy: a tensor in a file written by someone else need
  // not sit at a multiple of its element size.
  switch (t.dtype) {
    case DType::f32:
      if (n > 0) std::memcpy(out.data(), src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::f64:
      convert_each(n, out.data(), [src](int64_t i) {
        double v;
        std::memcpy(&v, src + i * 8, 8);
        return static_cast<float>(v);
      });
      return;
    case DType::bf16:
      convert_each(n, out.data(), [src](int64_t i) {
        bf16 v;
        std::memcpy(&v.bits, src + i * 2, 2);
        return to_float(v);
      });
      return;
    case DType::f16:
      convert_each(n, out.data(), [src](int64_t i) {
        f16 v;
        std::memcpy(&v.bits, src + i * 2, 2);
        return to_float(v);
      });
      return;
    default:
      throw Error(thing, tensor_label(t.name) + " has dtype " + std::string(safetensors_dtype_name(t.dtype)) +
                             ", which is not a floating-point type");
  }
}

}  // namespace spillway
