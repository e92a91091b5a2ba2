#include "model/gguf_write.h"

#include <cmath>
#include <cstring>

#include "base/atomic_file.h"
#include "base/dtype.h"
#include "base/status.h"

namespace spillway {

namespace {

template <typename T>
void put(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

std::string typed(GgufValueType type) {
  std::string out;
  put<uint32_t>(out, static_cast<uint32_t>(type));
  return out;
}

std::string array_of(GgufValueType element, uint64_t count) {
  std::string out = typed(GgufValueType::array);
  put<uint32_t>(out, static_cast<uint32_t>(element));
  put<uint64_t>(out, count);
  return out;
}

void put_f16(std::vector<uint8_t>& out, float x) {
  const uint16_t bits = to_f16(x).bits;
  out.push_back(static_cast<uint8_t>(bits & 0xFF));
  out.push_back(static_cast<uint8_t>(bits >> 8));
}

}  // namespace

template <typename T>
void GgufWriter::add_scalar(std::string key, GgufValueType type, T value) {
  std::string v = typed(type);
  put(v, value);
  metadata_.emplace_back(std::move(key), std::move(v));
}

void GgufWriter::add_string(std::string key, std::string value) {
  std::string v = typed(GgufValueType::string);
  put_string(v, value);
  metadata_.emplace_back(std::move(key), std::move(v));
}
void GgufWriter::add_u32(std::string key, uint32_t value) { add_scalar(std::move(key), GgufValueType::u32, value); }
void GgufWriter::add_i32(std::string key, int32_t value) { add_scalar(std::move(key), GgufValueType::i32, value); }
void GgufWriter::add_f32(std::string key, float value) { add_scalar(std::move(key), GgufValueType::f32, value); }
void GgufWriter::add_bool(std::string key, bool value) {
  add_scalar(std::move(key), GgufValueType::boolean, static_cast<uint8_t>(value ? 1 : 0));
}
void GgufWriter::add_strings(std::string key, const std::vector<std::string>& values) {
  std::string v = array_of(GgufValueType::string, values.size());
  for (const std::string& s : values) put_string(v, s);
  metadata_.emplace_back(std::move(key), std::move(v));
}
void GgufWriter::add_i32s(std::string key, const std::vector<int32_t>& values) {
  std::string v = array_of(GgufValueType::i32, values.size());
  for (int32_t x : values) put(v, x);
  metadata_.emplace_back(std::move(key), std::move(v));
}
void GgufWriter::add_f32s(std::string key, const std::vector<float>& values) {
  std::string v = array_of(GgufValueType::f32, values.size());
  for (float x : values) put(v, x);
  metadata_.emplace_back(std::move(key), std::move(v));
}

void GgufWriter::add_tensor(const std::string& name, const Shape& shape, GgmlType type, std::span<const float> data) {
  Tensor t{name, {}, type, {}};
  for (int d = shape.rank() - 1; d >= 0; --d) t.dims.push_back(shape[d]);
  SPW_CHECK(static_cast<int64_t>(data.size()) == shape.numel(), name, "has ", data.size(), " values for shape ",
            shape.str());
  switch (type) {
    case GgmlType::f32:
      t.bytes.resize(data.size() * 4);
      std::memcpy(t.bytes.data(), data.data(), t.bytes.size());
      break;
    case GgmlType::f16:
      t.bytes.reserve(data.size() * 2);
      for (float x : data) put_f16(t.bytes, x);
      break;
    case GgmlType::bf16:
      t.bytes.reserve(data.size() * 2);
      for (float x : data) {
        const uint16_t bits = to_bf16(x).bits;
        t.bytes.push_back(static_cast<uint8_t>(bits & 0xFF));
        t.bytes.push_back(static_cast<uint8_t>(bits >> 8));
      }
      break;
    case GgmlType::q8_0: {
      SPW_CHECK(!t.dims.empty() && t.dims[0] % kQ8_0BlockSize == 0, name, "rows of ", t.dims[0],
                " values cannot be stored as Q8_0 (blocks of ", kQ8_0BlockSize, ")");
      t.bytes.reserve(data.size() / kQ8_0BlockSize * kQ8_0BlockBytes);
      for (size_t b = 0; b < data.size(); b += kQ8_0BlockSize) {
        float amax = 0;
        for (int64_t k = 0; k < kQ8_0BlockSize; ++k) amax = std::max(amax, std::fabs(data[b + k]));
        const float d = amax / 127.0f;
        const float inverse = d != 0 ? 1.0f / d : 0.0f;
        put_f16(t.bytes, d);
        for (int64_t k = 0; k < kQ8_0BlockSize; ++k) {
          t.bytes.push_back(static_cast<uint8_t>(static_cast<int8_t>(std::round(data[b + k] * inverse))));
        }
      }
      break;
    }
    case GgmlType::q4_1:
      throw Error(name, "spillway does not write Q4_1");
  }
  tensors_.push_back(std::move(t));
}

void GgufWriter::write(const std::string& path) const {
  std::string head = "GGUF";
  put<uint32_t>(head, 3);
  put<uint64_t>(head, tensors_.size());
  put<uint64_t>(head, metadata_.size());
  for (const auto& [key, value] : metadata_) {
    put_string(head, key);
    head += value;
  }
  const auto aligned = [](uint64_t n) { return (n + kGgufDefaultAlignment - 1) / kGgufDefaultAlignment * kGgufDefaultAlignment; };
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    put_string(head, t.name);
    put<uint32_t>(head, static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) put<uint64_t>(head, static_cast<uint64_t>(d));
    put<uint32_t>(head, static_cast<uint32_t>(t.type));
    put<uint64_t>(head, offset);
    offset = aligned(offset + t.bytes.size());
  }
  head.resize(aligned(head.size()), '\0');
  AtomicFile file(path);
  file.write(head.data(), head.size());
  const std::string padding(kGgufDefaultAlignment, '\0');
  for (const Tensor& t : tensors_) {
    file.write(t.bytes.data(), t.bytes.size());
    file.write(padding.data(), aligned(t.bytes.size()) - t.bytes.size());
  }
  file.commit();
}

}  // namespace spillway
