// safetensors files: Hugging Face's checkpoint format, read through a
// read-only memory mapping and written atomically.
//
// Layout: an 8-byte little-endian header length N, N bytes of UTF-8 JSON
// (padded with spaces), then the data buffer. The JSON maps each tensor name
// to {"dtype", "shape", "data_offsets": [begin, end]} with offsets relative
// to the data buffer; "__metadata__" optionally holds a string→string map.
// The file is untrusted input: every number in the header is checked before
// it is used, and the tensors must tile the data buffer exactly (no overlap,
// no hole, nothing past the end), so a bad file is one Error naming the file,
// the tensor and the problem, never a read out of bounds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/atomic_file.h"
#include "base/dtype.h"
#include "base/shape.h"

namespace spillway {

// safetensors' dtype names ("F32", "BF16", ...) for the dtypes spillway has.
std::string_view safetensors_dtype_name(DType t);

struct SafetensorsTensor {
  std::string name;
  DType dtype;
  Shape shape;
  // Into the file's mapping: valid while the SafetensorsFile lives (moving
  // the file keeps it valid). Not aligned beyond what the file gives.
  std::span<const std::byte> bytes;
};

class SafetensorsFile {
 public:
  // Maps `path` and validates its header; throws Error(path, problem).
  explicit SafetensorsFile(std::string path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // Sorted by name.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // nullptr when the file has no tensor of that name.
  const SafetensorsTensor* find(std::string_view name) const;
  // Throws Error(path, "no tensor '<name>'") when absent.
  const SafetensorsTensor& tensor(std::string_view name) const;

  // Converts a floating-point tensor (F32, F16, BF16, F64) into `out`, after
  // checking that its shape is `expected` and that `out` holds numel floats.
  void read_tensor_as_f32(std::string_view name, const Shape& expected, std::span<float> out) const;
  // The same without a shape to check against: only the element count must match.
  void read_tensor_as_f32(std::string_view name, std::span<float> out) const;

 private:
  void unmap();

  std::string path_;
  const std::byte* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;  // name → position in tensors_
  std::map<std::string, std::string> metadata_;
};

// Converts one tensor's bytes into floats; shared by SafetensorsFile and
// callers that hold a SafetensorsTensor from a WeightDirectory.
// `thing` names the file in errors.
void convert_tensor_to_f32(const SafetensorsTensor& t, std::string_view thing, std::span<float> out);

// Collects tensors and metadata, then writes one safetensors file.
//
// The writer references the tensor bytes (it does not copy them): each
// pointer passed to add() must stay valid, and its bytes unchanged, until
// write() returns. This keeps a multi-gigabyte checkpoint from being held
// twice in memory.
class SafetensorsWriter {
 public:
  // `data` holds shape.numel() contiguous row-major elements of `dtype`
  // (little-endian, as every machine spillway runs on). Throws Error naming
  // the tensor for a duplicate or reserved name or a negative dimension.
  void add(std::string name, DType dtype, Shape shape, const void* data);
  // A tensor whose bytes `fill` makes when write() reaches it, into a buffer
  // of its stored size that the writer reuses: state read from a device
  // tensor by tensor never has to be in host memory all at once.
  using Fill = std::function<void(std::span<std::byte> out)>;
  void add(std::string name, DType dtype, Shape shape, Fill fill);
  void add_metadata(std::string key, std::string value);

  // The header (names sorted, "__metadata__" first) and data laid out as they
  // will be written. Tensors sit in the data buffer by element size, widest
  // first, then by name, so every tensor starts at a multiple of its element
  // size and a reader can use the mapped bytes in place.
  std::string header_json() const;
  uint64_t data_bytes() const;

  // Writes `path` atomically (see base/atomic_file.h): on any failure it
  // throws Error(path, problem) and leaves `path` as it was.
  void write(const std::string& path) const;
  // Calls every Fill in the order write() would and writes nothing: for a
  // data-parallel rank whose fills are collectives that the writing rank's
  // need it to join.
  void walk() const;

 private:
  struct Pending {
    std::string name;
    DType dtype;
    Shape shape;
    const void* data;
    uint64_t bytes;
    Fill fill;  // where data is null
  };
  // The tensor's stored size, after refusing what the format cannot hold.
  uint64_t checked_bytes(const std::string& name, DType dtype, const Shape& shape) const;
  // Calls body(bytes, size) for each tensor in data-buffer order, filling
  // those made on demand first.
  void for_each_in_order(const std::function<void(const void*, uint64_t)>& body) const;
  // In data-buffer order, with each tensor's begin offset.
  std::vector<std::pair<const Pending*, uint64_t>> data_order() const;

  std::map<std::string, Pending> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace spillway
