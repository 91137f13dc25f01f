// The CPU's softmax and log-softmax kernels (declared in core/kernels.h): forward and fused backward
// (one pass per row for the reductions, one for the outputs), written with the row building blocks
// of core/cpu/rows.h.
//
// A tensor is seen as contiguous [outer, n, inner] with the softmax taken over n. inner == 1 (the
// last dim) is the fast path: one row per task, every pass over a row a flat vectorisable loop.
// Otherwise blocks of columns are processed together, streaming rows of `inner` contiguous values.
// Each output element is computed by one thread in a fixed order: results never depend on the
// thread count.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "core/cpu/rows.h"
#include "core/dtype.h"
#include "core/kernels.h"
#include "core/parallel.h"

namespace ember::cpu {
namespace {

// Columns processed together when the softmax dim is not the last one.
constexpr int64_t kColumnBlock = 256;
// About this many elements per parallel task.
constexpr int64_t kGrainElements = 32768;

// ---- Forward

template <typename T>
void forward_rows(const T* x, T* y, int64_t rows, int64_t n, bool log) {
  parallel_for(0, rows, std::max<int64_t>(1, kGrainElements / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T* in = x + r * n;
      T* out = y + r * n;
      T m = row_max(in, n);
      if (log) {
        // (x - m) - log(s), not x - (m + log(s)): m + log(s) would round to the spacing of m.
        T log_sum = std::log(row_sum_exp(in, m, n));
        for (int64_t i = 0; i < n; ++i) out[i] = (in[i] - m) - log_sum;
      } else {
        T inv = T(1) / row_exp_store_sum(in, m, out, n);
        for (int64_t i = 0; i < n; ++i) out[i] *= inv;
      }
    }
  });
}

// [outer, n, inner], inner > 1: tasks are (outer index, block of up to kColumnBlock columns).
template <typename Fn>
void for_each_column_block(int64_t outer, int64_t n, int64_t inner, Fn&& fn) {
  int64_t blocks = (inner + kColumnBlock - 1) / kColumnBlock;
  int64_t grain = std::max<int64_t>(1, kGrainElements / std::max<int64_t>(n * std::min(inner, kColumnBlock), 1));
  parallel_for(0, outer * blocks, grain, [&](int64_t b, int64_t e) {
    for (int64_t task = b; task < e; ++task) {
      int64_t o = task / blocks;
      int64_t i0 = (task % blocks) * kColumnBlock;
      int64_t width = std::min(kColumnBlock, inner - i0);
      fn(o * n * inner + i0, width);  // offset of element [o, 0, i0], block width
    }
  });
}

template <typename T>
void forward_columns(const T* x, T* y, int64_t outer, int64_t n, int64_t inner, bool log) {
  for_each_column_block(outer, n, inner, [&](int64_t start, int64_t w) {
    T m[kColumnBlock], s[kColumnBlock];
    const T* src = x + start;
    T* dst = y + start;
    for (int64_t i = 0; i < w; ++i) m[i] = -std::numeric_limits<T>::infinity();
    for (int64_t r = 0; r < n; ++r) {
      const T* row = src + r * inner;
      for (int64_t i = 0; i < w; ++i) m[i] = row[i] > m[i] ? row[i] : m[i];
    }
    for (int64_t i = 0; i < w; ++i) s[i] = 0;
    for (int64_t r = 0; r < n; ++r) {
      const T* row = src + r * inner;
      T* out = dst + r * inner;
      if (log) {
        for (int64_t i = 0; i < w; ++i) s[i] += exp_vec(row[i] - m[i]);
      } else {
        for (int64_t i = 0; i < w; ++i) {
          T e = exp_vec(row[i] - m[i]);
          out[i] = e;
          s[i] += e;
        }
      }
    }
    if (log) {
      for (int64_t i = 0; i < w; ++i) s[i] = std::log(s[i]);
      for (int64_t r = 0; r < n; ++r) {
        const T* row = src + r * inner;
        T* out = dst + r * inner;
        for (int64_t i = 0; i < w; ++i) out[i] = (row[i] - m[i]) - s[i];
      }
    } else {
      for (int64_t i = 0; i < w; ++i) s[i] = T(1) / s[i];
      for (int64_t r = 0; r < n; ++r) {
        T* out = dst + r * inner;
        for (int64_t i = 0; i < w; ++i) out[i] *= s[i];
      }
    }
  });
}

// ---- Backward: softmax dx = y * (g - sum(g y)); log_softmax dx = g - e^y * sum(g)

template <typename T>
void backward_rows(const T* g, const T* y, T* dx, int64_t rows, int64_t n, bool log) {
  parallel_for(0, rows, std::max<int64_t>(1, kGrainElements / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T* gr = g + r * n;
      const T* yr = y + r * n;
      T* out = dx + r * n;
      if (log) {
        T total = row_sum(gr, n);
        for (int64_t i = 0; i < n; ++i) out[i] = gr[i] - exp_vec(yr[i]) * total;
      } else {
        T dot = row_dot(gr, yr, n);
        for (int64_t i = 0; i < n; ++i) out[i] = yr[i] * (gr[i] - dot);
      }
    }
  });
}

template <typename T>
void backward_columns(const T* g, const T* y, T* dx, int64_t outer, int64_t n, int64_t inner, bool log) {
  for_each_column_block(outer, n, inner, [&](int64_t start, int64_t w) {
    T s[kColumnBlock];
    for (int64_t i = 0; i < w; ++i) s[i] = 0;
    for (int64_t r = 0; r < n; ++r) {
      const T* gr = g + start + r * inner;
      const T* yr = y + start + r * inner;
      if (log) {
        for (int64_t i = 0; i < w; ++i) s[i] += gr[i];
      } else {
        for (int64_t i = 0; i < w; ++i) s[i] += gr[i] * yr[i];
      }
    }
    for (int64_t r = 0; r < n; ++r) {
      const T* gr = g + start + r * inner;
      const T* yr = y + start + r * inner;
      T* out = dx + start + r * inner;
      if (log) {
        for (int64_t i = 0; i < w; ++i) out[i] = gr[i] - exp_vec(yr[i]) * s[i];
      } else {
        for (int64_t i = 0; i < w; ++i) out[i] = yr[i] * (gr[i] - s[i]);
      }
    }
  });
}

}  // namespace

// No scratch: the CPU reads [outer, n, inner] in place.
int64_t softmax_scratch(const On&, int64_t, int64_t, int64_t, bool) { return 0; }

void softmax_forward(const On& on, const void* x, void* y, int64_t outer, int64_t n, int64_t inner, bool log,
                     void*) {
  if (outer * n * inner == 0) return;
  dispatch_floating(Dtype(on.dtype), log ? "log_softmax" : "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = static_cast<const T*>(x);
    T* out = static_cast<T*>(y);
    if (inner == 1) forward_rows<T>(src, out, outer, n, log);
    else forward_columns<T>(src, out, outer, n, inner, log);
  });
}

void softmax_backward(const On& on, const void* grad, const void* y, void* dx, int64_t outer, int64_t n,
                      int64_t inner, bool log, void*) {
  if (outer * n * inner == 0) return;
  dispatch_floating(Dtype(on.dtype), log ? "log_softmax" : "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *g = static_cast<const T*>(grad), *yt = static_cast<const T*>(y);
    T* out = static_cast<T*>(dx);
    if (inner == 1) backward_rows<T>(g, yt, out, outer, n, log);
    else backward_columns<T>(g, yt, out, outer, n, inner, log);
  });
}

}  // namespace ember::cpu
