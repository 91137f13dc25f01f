// Printing tensors like PyTorch: nested brackets, 4 decimals, long dims abbreviated with "...".
#include "core/print.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ember {
namespace {

constexpr int64_t kEdgeItems = 3;    // shown at each end of an abbreviated dim
constexpr int64_t kThreshold = 1000; // more elements than this -> abbreviate

void print_values(std::string& out, const std::vector<double>& values, const Shape& shape, const Strides& strides,
                  size_t dim, int64_t offset, bool abbreviate, bool floating, int indent) {
  if (dim == shape.size()) {
    double v = values[size_t(offset)];
    if (!floating) out += fmt::format("{}", int64_t(v));
    else if (std::isnan(v) || std::isinf(v)) out += fmt::format("{}", v);
    else out += fmt::format("{:.4f}", v);
    return;
  }
  out += '[';
  int64_t n = shape[dim];
  for (int64_t i = 0; i < n; ++i) {
    if (abbreviate && n > 2 * kEdgeItems && i == kEdgeItems) {
      out += dim + 1 == shape.size() ? "..., " : fmt::format("...,\n{:{}}", "", indent + 1);
      i = n - kEdgeItems;
    }
    print_values(out, values, shape, strides, dim + 1, offset + i * strides[dim], abbreviate, floating, indent + 1);
    if (i + 1 < n) out += dim + 1 == shape.size() ? ", " : fmt::format(",\n{:{}}", "", indent + 1);
  }
  out += ']';
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::vector<double> values = detach().to_vector<double>();
  std::string out = "tensor(";
  print_values(out, values, shape(), contiguous_strides(shape()), 0, 0, numel() > kThreshold, is_real(dtype()), 7);
  out += fmt::format(", shape={}, dtype={}, device={}", shape_str(shape()), dtype_name(dtype()), device().str());
  if (requires_grad()) out += ", requires_grad=true";
  return out + ")";
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace ember
