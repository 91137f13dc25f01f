// The CPU's one strided loop: walks N same-shaped (possibly broadcast or transposed) operands
// row by row, merging dims that are contiguous in every operand, optionally over the thread pool.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

#include "core/merge_dims.h"
#include "core/parallel.h"
#include "core/shape.h"

namespace ember::cpu {

// One operand of a loop: its first element and its strides in bytes (0 for a broadcast dim).
struct LoopOperand {
  char* data;
  Strides byte_strides;
};

// Calls row(ptrs, inner_strides, n) for every innermost row of `shape`, where ptrs[k] points at
// the row's first element of operand k and inner_strides[k] is its byte stride along the row.
// Rows are spread over the thread pool once the tensor has more than `grain` elements.
template <size_t N, typename RowFn>
void for_each_row(const Shape& shape, const std::array<LoopOperand, N>& operands, RowFn row,
                  int64_t grain = 32768) {
  // Merge dims that are laid out back to back in every operand: [a, b] -> [a*b] (core/merge_dims.h).
  Shape sizes = shape;
  std::array<Strides, N> strides;
  std::array<int64_t*, N> stride_ptrs;
  for (size_t k = 0; k < N; ++k) {
    strides[k] = operands[k].byte_strides;
    stride_ptrs[k] = strides[k].data();
  }
  const int kept = merge_dims(int(sizes.size()), sizes.data(), stride_ptrs.data(), int(N));
  sizes.resize(size_t(kept));
  for (size_t k = 0; k < N; ++k) strides[k].resize(size_t(kept));
  if (sizes.empty()) {  // a single element
    sizes.push_back(1);
    for (size_t k = 0; k < N; ++k) strides[k].push_back(0);
  }
  for (int64_t s : shape)
    if (s == 0) return;

  const int64_t ndim = int64_t(sizes.size());
  const int64_t inner = sizes.back();
  std::array<int64_t, N> inner_strides;
  for (size_t k = 0; k < N; ++k) inner_strides[k] = strides[k].back();
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < ndim; ++d) rows *= sizes[d];

  auto run_rows = [&](int64_t first, int64_t last) {
    // Position of row `first` as a multi-index over the outer dims.
    std::array<char*, N> ptrs;
    Shape index(size_t(std::max<int64_t>(ndim - 1, 0)), 0);
    int64_t rest = first;
    for (int64_t d = ndim - 2; d >= 0; --d) {
      index[d] = rest % sizes[d];
      rest /= sizes[d];
    }
    for (size_t k = 0; k < N; ++k) {
      ptrs[k] = operands[k].data;
      for (int64_t d = 0; d + 1 < ndim; ++d) ptrs[k] += index[d] * strides[k][d];
    }
    for (int64_t r = first; r < last; ++r) {
      row(ptrs, inner_strides, inner);
      // Advance the multi-index like an odometer.
      for (int64_t d = ndim - 2; d >= 0; --d) {
        for (size_t k = 0; k < N; ++k) ptrs[k] += strides[k][d];
        if (++index[d] < sizes[d]) break;
        for (size_t k = 0; k < N; ++k) ptrs[k] -= strides[k][d] * sizes[d];
        index[d] = 0;
      }
    }
  };
  if (rows * inner <= grain) {
    run_rows(0, rows);
  } else if (rows == 1) {  // one long row: split the row itself
    parallel_for(0, inner, grain, [&](int64_t first, int64_t last) {
      std::array<char*, N> ptrs;
      for (size_t k = 0; k < N; ++k) ptrs[k] = operands[k].data + first * inner_strides[k];
      row(ptrs, inner_strides, last - first);
    });
  } else {
    int64_t rows_per_grain = std::max<int64_t>(1, grain / std::max<int64_t>(inner, 1));
    parallel_for(0, rows, rows_per_grain, run_rows);
  }
}

}  // namespace ember::cpu
