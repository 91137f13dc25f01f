// The CPU's reduction kernels (declared in core/kernels.h) over contiguous [outer, R, inner]
// (reducing R; the op brings any reduction to it, without a copy for the common cases: last dim
// (rows), leading dims (columns), a middle block). Each output is reduced by one thread in a fixed
// order, so results never depend on the thread count.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "core/dtype.h"
#include "core/kernels.h"
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

// No scratch: the CPU reads [outer, R, inner] in place.
int64_t reduce_scratch(const On&, int64_t, int64_t, int64_t) { return 0; }

void reduce(const On& on, ReduceKind kind, const void* x, void* out, int64_t outer, int64_t R, int64_t inner, void*) {
  dispatch_floating(Dtype(on.dtype), kind == ReduceKind::Sum ? "sum" : "max", [&](auto tag) {
    using T = typename decltype(tag)::type;
    reduce_kernel<T>(static_cast<const T*>(x), static_cast<T*>(out), outer, R, inner, kind);
  });
}

// out[o, i] = the first index of the largest x[o, :, i] (std::max_element's choice).
void argmax(const On& on, const void* x, int64_t* out, int64_t outer, int64_t n, int64_t inner, void*) {
  dispatch_floating(Dtype(on.dtype), "argmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = static_cast<const T*>(x);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const T* column = p + o * n * inner + i;
        int64_t best = 0;
        for (int64_t j = 1; j < n; ++j)
          if (column[best * inner] < column[j * inner]) best = j;
        out[o * inner + i] = best;
      }
  });
}

}  // namespace ember::cpu
