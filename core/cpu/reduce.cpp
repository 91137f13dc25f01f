// CPU reductions. Any reduction is brought to the form [outer, R, inner] (reducing R), which
// covers the common cases without copies: last dim (rows), leading dims (columns), a middle block.
// Each output is reduced by one thread in a fixed order, so results never depend on the thread count.
#include "core/cpu/reduce.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"

namespace ember::cpu {
namespace {

// Sum of a contiguous row in 16 independent lanes (so the compiler vectorises it).
template <typename T>
T sum_row(const T* x, int64_t n) {
  constexpr int kLanes = 16;
  T lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) lanes[k] += x[i + k];
  T total = 0;
  for (int k = 0; k < kLanes; ++k) total += lanes[k];
  for (; i < n; ++i) total += x[i];
  return total;
}

template <typename T>
T max_row(const T* x, int64_t n) {
  T best = -std::numeric_limits<T>::infinity();
  for (int64_t i = 0; i < n; ++i) best = (x[i] > best || x[i] != x[i]) ? x[i] : best;  // NaN propagates
  return best;
}

template <typename T>
void reduce_kernel(const T* x, T* out, int64_t outer, int64_t R, int64_t inner, ReduceKind kind) {
  if (inner == 1) {
    // Rows: out[o] = reduce(x[o, :])
    parallel_for(0, outer, std::max<int64_t>(1, 16384 / std::max<int64_t>(R, 1)), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o)
        out[o] = kind == ReduceKind::Sum ? sum_row(x + o * R, R) : max_row(x + o * R, R);
    });
    return;
  }
  // Columns: out[o, :] = reduce over r of x[o, r, :], streaming rows of length inner.
  auto columns = [&](int64_t o, int64_t i0, int64_t i1) {
    T* dst = out + o * inner;
    const T* src = x + o * R * inner;
    if (R == 0) {
      for (int64_t i = i0; i < i1; ++i) dst[i] = kind == ReduceKind::Sum ? T(0) : -std::numeric_limits<T>::infinity();
      return;
    }
    for (int64_t i = i0; i < i1; ++i) dst[i] = src[i];
    for (int64_t r = 1; r < R; ++r) {
      const T* row = src + r * inner;
      if (kind == ReduceKind::Sum) {
        for (int64_t i = i0; i < i1; ++i) dst[i] += row[i];
      } else {
        for (int64_t i = i0; i < i1; ++i) dst[i] = (row[i] > dst[i] || row[i] != row[i]) ? row[i] : dst[i];
      }
    }
  };
  if (outer >= num_threads()) {
    parallel_for(0, outer, std::max<int64_t>(1, 16384 / std::max<int64_t>(R * inner, 1)), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) columns(o, 0, inner);
    });
  } else {
    for (int64_t o = 0; o < outer; ++o)
      parallel_for(0, inner, std::max<int64_t>(64, 16384 / std::max<int64_t>(R, 1)),
                   [&](int64_t b, int64_t e) { columns(o, b, e); });
  }
}

}  // namespace

Tensor reduce(const Tensor& x, const std::vector<int64_t>& dims, ReduceKind kind, const char* op) {
  Shape out_shape = x.shape();
  std::vector<bool> reduced(size_t(x.dim()), false);
  for (int64_t d : dims) {
    reduced[size_t(d)] = true;
    out_shape[size_t(d)] = 1;
  }
  // Are the reduced dims (ignoring size-1 dims) one consecutive block of the others?
  std::vector<int64_t> sized;  // dims of size != 1
  for (int64_t d = 0; d < x.dim(); ++d)
    if (x.shape()[size_t(d)] != 1) sized.push_back(d);
  int64_t first = -1, last = -1;  // positions in `sized` of the first and last reduced dim
  for (size_t k = 0; k < sized.size(); ++k)
    if (reduced[size_t(sized[k])]) {
      if (first < 0) first = int64_t(k);
      last = int64_t(k);
    }
  bool block = true;
  for (int64_t k = first; k >= 0 && k <= last; ++k) block = block && reduced[size_t(sized[size_t(k)])];
  Tensor src = x;
  int64_t outer = 1, R = 1, inner = 1;
  if (block) {
    src = x.contiguous();
    for (int64_t k = 0; k < int64_t(sized.size()); ++k) {
      int64_t s = x.shape()[size_t(sized[size_t(k)])];
      if (first >= 0 && k >= first && k <= last) R *= s;
      else if (first >= 0 && k > last) inner *= s;
      else outer *= s;
    }
  } else {
    // Move the reduced dims to the end and copy once.
    std::vector<int64_t> order;
    for (int64_t d = 0; d < x.dim(); ++d)
      if (!reduced[size_t(d)]) order.push_back(d), outer *= x.shape()[size_t(d)];
    for (int64_t d = 0; d < x.dim(); ++d)
      if (reduced[size_t(d)]) order.push_back(d), R *= x.shape()[size_t(d)];
    src = x.detach().permute(order).contiguous();
  }
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    reduce_kernel<T>(src.data<T>(), out.data<T>(), outer, R, inner, kind);
  });
  return out;
}

Tensor argmax(const Tensor& x, int64_t dim) {
  Tensor src = x.detach().transpose(dim, -1).contiguous();
  int64_t n = src.size(-1), rows = n == 0 ? 0 : src.numel() / n;
  Shape out_shape = x.shape();
  out_shape[size_t(dim)] = 1;
  Tensor out = Tensor::empty(src.shape().size() ? Shape{rows} : Shape{1}, Dtype::Int64);
  dispatch_floating(x.dtype(), "argmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = src.data<T>();
    int64_t* o = out.data<int64_t>();
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = p + r * n;
      o[r] = std::max_element(row, row + n) - row;
    }
  });
  // Rows came out in the transposed order; put the kept dims back.
  Shape transposed_shape = src.shape();
  transposed_shape.back() = 1;
  return out.view(transposed_shape).transpose(dim, -1).contiguous().view(out_shape);
}

}  // namespace ember::cpu
