// CPU reduction kernels over a tensor seen as [outer, R, inner]: out[o, i] = reduce over r of x[o, r, i].
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace ember::cpu {

enum class ReduceKind { Sum, Max };

// Reduces x over `dims` (sorted, unique, non-negative); the result keeps the reduced dims as size 1.
Tensor reduce(const Tensor& x, const std::vector<int64_t>& dims, ReduceKind kind, const char* op);
// Index of the largest element along dim (first one on ties), as int64, keepdim shape.
Tensor argmax(const Tensor& x, int64_t dim);

}  // namespace ember::cpu
