// Shapes and strides: sizes per dimension, element counts, broadcasting, printing.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ember {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

int64_t numel(const Shape& shape);
// Row-major strides: the last dimension is contiguous.
Strides contiguous_strides(const Shape& shape);
// NumPy broadcasting of two shapes; an error naming `op` when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// A dim in [-ndim, ndim) made non-negative; an error naming `op` when out of range.
int64_t normalize_dim(int64_t dim, int64_t ndim, const char* op);
// "[2, 3]"
std::string shape_str(const Shape& shape);

}  // namespace ember
