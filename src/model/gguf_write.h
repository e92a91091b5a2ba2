// Writes GGUF files (version 3, little-endian, the layout gguf.h reads):
// metadata of the value types llama.cpp's writer uses, then tensor infos,
// then each tensor's data aligned to 32 bytes. Tensors are given as float32
// and stored as F32, F16, BF16 or Q8_0, quantized as llama.cpp quantizes
// (Q8_0: per block of 32, scale = max |x| / 127 as f16, values rounded to
// nearest).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/gguf.h"

namespace spillway {

class GgufWriter {
 public:
  void add_string(std::string key, std::string value);
  void add_u32(std::string key, uint32_t value);
  void add_i32(std::string key, int32_t value);
  void add_f32(std::string key, float value);
  void add_bool(std::string key, bool value);
  void add_strings(std::string key, const std::vector<std::string>& values);
  void add_i32s(std::string key, const std::vector<int32_t>& values);
  void add_f32s(std::string key, const std::vector<float>& values);

  // `data` in row-major order of `shape` (which is written reversed, as
  // ggml's dims). Q8_0 needs a last dimension that is a multiple of 32;
  // Error naming the tensor otherwise.
  void add_tensor(const std::string& name, const Shape& shape, GgmlType type, std::span<const float> data);

  // Written whole to a temporary beside `path` and renamed over it.
  void write(const std::string& path) const;

 private:
  template <typename T>
  void add_scalar(std::string key, GgufValueType type, T value);

  struct Tensor {
    std::string name;
    std::vector<int64_t> dims;
    GgmlType type;
    std::vector<uint8_t> bytes;
  };
  std::vector<std::pair<std::string, std::string>> metadata_;  // key, encoded type and value
  std::vector<Tensor> tensors_;
};

}  // namespace spillway
