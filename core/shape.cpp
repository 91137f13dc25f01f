// Shapes and strides: sizes per dimension, element counts, broadcasting, printing.
#include "core/shape.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "core/error.h"

namespace ember {

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  bool overflow = false;
  for (int64_t size : shape) overflow |= __builtin_mul_overflow(n, size, &n);
  // NOTE: a zero anywhere makes the count 0, whatever the other sizes.
  if (overflow && std::find(shape.begin(), shape.end(), 0) == shape.end())
    fail("shape {} has more elements than a 64-bit count can hold", shape_str(shape));
  return overflow ? 0 : n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    // Only an empty tensor (a 0 elsewhere, checked by numel) can overflow here: its strides
    // are never used to reach an element, so saturate rather than overflow (found by UBSan).
    if (__builtin_mul_overflow(stride, shape[i], &stride)) stride = INT64_MAX;
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
