// Writing safetensors: a sorted header padded so the data starts 8-byte
// aligned, then each tensor's bytes straight from the caller's memory, all
// through a temporary file that is renamed into place only when complete.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/atomic_file.h"
#include "base/bytes.h"
#include "base/status.h"
#include "model/safetensors.h"

namespace spillway {

namespace {

// nlohmann refuses to dump strings that are not UTF-8; finding out at add()
// names the culprit, where finding out at write() could only name the file.
bool is_valid_utf8(const std::string& text) {
  try {
    (void)nlohmann::json(text).dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

}  // namespace

uint64_t SafetensorsWriter::checked_bytes(const std::string& name, DType dtype, const Shape& shape) const {
  SPW_CHECK(!name.empty(), "safetensors writer", "a tensor name must not be empty");
  SPW_CHECK(is_valid_utf8(name), "safetensors writer", "tensor name is not valid UTF-8");
  SPW_CHECK(name != "__metadata__", name, "is reserved for metadata and cannot name a tensor");
  SPW_CHECK(!tensors_.contains(name), name, "tensor added twice to one safetensors file");
  uint64_t bytes = dtype_size(dtype);
  for (int64_t d : shape.dims()) {
    SPW_CHECK(d >= 0, name, "negative dimension in shape ", shape.str());
    SPW_CHECK(!__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes), name, "shape ",
              shape.str(), " is too large to address");
  }
  (void)safetensors_dtype_name(dtype);  // a dtype without a safetensors name is refused here
  return bytes;
}

void SafetensorsWriter::add(std::string name, DType dtype, Shape shape, const void* data) {
  const uint64_t bytes = checked_bytes(name, dtype, shape);
  SPW_CHECK(data != nullptr || bytes == 0, name, "no data given for ", bytes, " bytes");
  Pending pending{name, dtype, std::move(shape), data, bytes, {}};
  tensors_.emplace(std::move(name), std::move(pending));
}

void SafetensorsWriter::add(std::string name, DType dtype, Shape shape, Fill fill) {
  const uint64_t bytes = checked_bytes(name, dtype, shape);
  SPW_CHECK(fill != nullptr, name, "no way given to make the tensor's bytes");
  Pending pending{name, dtype, std::move(shape), nullptr, bytes, std::move(fill)};
  tensors_.emplace(std::move(name), std::move(pending));
}

void SafetensorsWriter::add_metadata(std::string key, std::string value) {
  SPW_CHECK(is_valid_utf8(key) && is_valid_utf8(value), "safetensors writer",
            "metadata key or value is not valid UTF-8");
  metadata_.insert_or_assign(std::move(key), std::move(value));
}

std::vector<std::pair<const SafetensorsWriter::Pending*, uint64_t>> SafetensorsWriter::data_order() const {
  std::vector<const Pending*> order;
  for (const auto& [name, p] : tensors_) order.push_back(&p);
  std::stable_sort(order.begin(), order.end(), [](const Pending* a, const Pending* b) {
    return dtype_size(a->dtype) > dtype_size(b->dtype);
  });
  std::vector<std::pair<const Pending*, uint64_t>> placed;
  uint64_t offset = 0;
  for (const Pending* p : order) {
    placed.emplace_back(p, offset);
    offset += p->bytes;
  }
  return placed;
}

uint64_t SafetensorsWriter::data_bytes() const {
  uint64_t total = 0;
  for (const auto& [name, p] : tensors_) total += p.bytes;
  return total;
}

std::string SafetensorsWriter::header_json() const {
  std::map<std::string_view, uint64_t> begin_of;
  for (const auto& [p, begin] : data_order()) begin_of.emplace(p->name, begin);

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) {
    nlohmann::ordered_json metadata = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata_) metadata[key] = value;
    header["__metadata__"] = std::move(metadata);
  }
  for (const auto& [name, p] : tensors_) {
    const uint64_t begin = begin_of.at(name);
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = safetensors_dtype_name(p.dtype);
    entry["shape"] = p.shape.dims();
    entry["data_offsets"] = nlohmann::ordered_json::array({begin, begin + p.bytes});
    header[name] = std::move(entry);
  }
  std::string text = header.dump();
  // Spaces after the JSON are allowed by the format; they put the data
  // buffer at a multiple of 8 bytes from the start of the file.
  const uint64_t unpadded = 8 + text.size();
  text.append(align_up(unpadded, 8) - unpadded, ' ');
  return text;
}

void SafetensorsWriter::write(const std::string& path) const {
  const std::string header = header_json();
  AtomicFile file(path);
  const uint64_t header_size = header.size();
  file.write(&header_size, 8);
  file.write(header.data(), header.size());
  for_each_in_order([&](const void* bytes, uint64_t size) { file.write(bytes, size); });
  file.commit();
}

void SafetensorsWriter::walk() const {
  for_each_in_order([](const void*, uint64_t) {});
}

void SafetensorsWriter::for_each_in_order(const std::function<void(const void*, uint64_t)>& body) const {
  std::vector<std::byte> made;  // one buffer, as large as the largest tensor made on demand
  for (const auto& [p, begin] : data_order()) {
    if (!p->fill) {
      body(p->data, p->bytes);
      continue;
    }
    if (made.size() < p->bytes) made.resize(p->bytes);
    const std::span<std::byte> out(made.data(), p->bytes);
    p->fill(out);
    body(out.data(), out.size());
  }
}

}  // namespace spillway
