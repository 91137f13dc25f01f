// Shapes and strides: sizes per dimension, element counts, broadcasting, printing.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/shape.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace ember {

int64_t numel(const Shape& shape) {
  // NOTE: the product of the non-zero sizes must fit too, even when a 0 makes the tensor empty:
  // strides and loops multiply sizes together (UBSan found [0, 2^62, 2^62] overflowing them).
  int64_t n = 1;
  bool empty = false;
  for (int64_t size : shape) {
    if (size == 0) {
      empty = true;
      continue;
    }
    if (__builtin_mul_overflow(n, size, &n))
      fail("shape {} has more elements than a 64-bit count can hold", shape_str(shape));
  }
  return empty ? 0 : n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];  // cannot overflow for a shape numel() accepted
  }
  return strides;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t ndim = std::max(a.size(), b.size());
  Shape out(ndim);
  for (size_t i = 0; i < ndim; ++i) {
    // Align from the right: missing leading dims count as 1.
    int64_t sa = i < ndim - a.size() ? 1 : a[i - (ndim - a.size())];
    int64_t sb = i < ndim - b.size() ? 1 : b[i - (ndim - b.size())];
    EMBER_CHECK(sa == sb || sa == 1 || sb == 1, "{}: shapes {} and {} do not broadcast (dim {}: {} vs {})",
                op, shape_str(a), shape_str(b), i, sa, sb);
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

int64_t normalize_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t lo = ndim == 0 ? -1 : -ndim;
  int64_t hi = ndim == 0 ? 0 : ndim - 1;
  EMBER_CHECK(dim >= lo && dim <= hi, "{}: dim {} out of range for a tensor with {} dims", op, dim, ndim);
  return dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
}

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

}  // namespace ember
