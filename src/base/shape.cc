#include "base/shape.h"

namespace spillway {

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

int64_t Shape::rows() const {
  int64_t n = 1;
  for (size_t i = 0; i + 1 < dims_.size(); ++i) n *= dims_[i];
  return n;
}

std::vector<int64_t> Shape::strides() const {
  std::vector<int64_t> s(dims_.size());
  int64_t step = 1;
  for (size_t i = dims_.size(); i-- > 0;) {
    s[i] = step;
    step *= dims_[i];
  }
  return s;
}

Shape Shape::with_last(int64_t n) const {
  std::vector<int64_t> d = dims_;
  if (d.empty()) d.push_back(n); else d.back() = n;
  return Shape(std::move(d));
}

std::string Shape::str() const {
  std::string s = "[";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(dims_[i]);
  }
  return s + "]";
}

}  // namespace spillway
