// Tensor shapes: dimensions in row-major order, and their contiguous strides.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace spillway {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  int rank() const { return static_cast<int>(dims_.size()); }
  // Negative indices count from the back, as in Python.
  int64_t operator[](int i) const { return dims_.at(i < 0 ? i + rank() : i); }
  int64_t numel() const;
  const std::vector<int64_t>& dims() const { return dims_; }
  // Product of every dimension but the last: the row count of a [..., n] tensor.
  int64_t rows() const;
  int64_t last() const { return dims_.empty() ? 1 : dims_.back(); }
  // Row-major strides of a contiguous tensor of this shape, in elements.
  std::vector<int64_t> strides() const;
  Shape with_last(int64_t n) const;

  bool operator==(const Shape& o) const { return dims_ == o.dims_; }
  bool operator!=(const Shape& o) const { return dims_ != o.dims_; }
  std::string str() const;  // "[2, 3, 4]"

 private:
  std::vector<int64_t> dims_;
};

}  // namespace spillway
