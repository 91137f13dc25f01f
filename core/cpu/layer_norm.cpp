// The CPU's normalisation kernels over the last dim (declared in core/kernels.h), forward and
// backward; each section says its precision and its order of summation.
//
// Layer norm. Precision: the forward computes in the input's dtype, on the row shifted by its first
// element (so rows far from zero keep their digits), in two passes (the mean, then the mean of squared
// deviations from it, so no cancellation), each a 16-lane sum; the saved mean / rstd are float64 whatever
// the input dtype. The backward computes in the input's dtype too, on each row shifted by its first element
// again; each chunk's dweight / dbias sums are added in double.
// Determinism: rows are processed by one thread each; dweight and dbias are summed per chunk of
// rows_per_chunk(D) rows (a fixed split that depends only on D), and the chunk sums are then added in
// chunk order. Results are bitwise identical for any thread count.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/kernels.h"
#include "core/parallel.h"

namespace ember::cpu {
namespace {

constexpr int kLanes = 16;               // independent accumulators, so the row sums vectorise
constexpr int64_t kGrainElements = 32768;  // about this many elements per parallel task

// sum of term(i) for i in [0, n), in kLanes independent accumulators of type Acc (so that the
// compiler vectorises without reassociating), combined in a fixed order. One accumulator array per
// call: GCC does not vectorise two interleaved ones.
template <typename Acc, typename Term>
inline Acc lane_sum(int64_t n, Term term) {
  Acc lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) lanes[k] += term(i + k);
  Acc total = 0;
  for (int k = 0; k < kLanes; ++k) total += lanes[k];
  for (; i < n; ++i) total += term(i);
  return total;
}

// Forward in the input's own precision. The row is first shifted by its first element, so that
// a row far from zero (say 1e4 +- 1 in float32) keeps its digits: the deviations x - x0 are exact
// there, while a float mean of 1e4 could not be closer than 1e-3. Then two passes (the mean, then
// the mean of squared deviations from it, so no cancellation), each a 16-lane sum, and the
// normalisation in T.
template <typename T, bool kHasWeight, bool kHasBias>
void forward_kernel(const T* x, const T* w, const T* b, T* y, double* mean_out, double* rstd_out, int64_t rows,
                    int64_t D, double eps) {
  parallel_for(0, rows, std::max<int64_t>(1, kGrainElements / D), [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) {
      const T* xr = x + r * D;
      T* yr = y + r * D;
      const T shift = xr[0];
      const T mean = lane_sum<T>(D, [&](int64_t i) { return xr[i] - shift; }) / T(D);  // of x - shift
      const T var = lane_sum<T>(D, [&](int64_t i) {
                      T d = (xr[i] - shift) - mean;
                      return d * d;
                    }) / T(D);
      const T rstd = T(1) / std::sqrt(var + T(eps));
      mean_out[r] = double(shift) + double(mean);
      rstd_out[r] = double(rstd);
      for (int64_t i = 0; i < D; ++i) {
        T v = ((xr[i] - shift) - mean) * rstd;
        if constexpr (kHasWeight) v *= w[i];
        if constexpr (kHasBias) v += b[i];
        yr[i] = v;
      }
    }
  });
}

// One chunk of rows: dx for each row (when dx != nullptr), and the chunk's sums of grad * xhat and
// grad into part_w / part_b (when not null), each of D doubles, overwritten.
// In the input's precision, as the forward: each row shifted by its first element again (x - x0 is exact
// for a row far from zero, where x - mean in float32 would keep only the mean's digits), its mean
// deviation mu - x0 taken from the float64 mean; 16-lane sums; the chunk's sums over its rows (at most
// layer_norm_rows_per_chunk) in T, then added in float64 (combine_chunks).
template <typename T, bool kHasWeight>
void backward_chunk(const T* g, const T* x, const double* mean, const double* rstd, const T* w, T* dx,
                    double* part_w, double* part_b, int64_t first, int64_t last, int64_t D) {
  std::vector<T> sum_w(part_w ? size_t(D) : 0, T(0)), sum_b(part_b ? size_t(D) : 0, T(0));
  const T inv_d = T(1) / T(D);
  for (int64_t r = first; r < last; ++r) {
    const T* gr = g + r * D;
    const T* xr = x + r * D;
    const T shift = xr[0], deviation = T(mean[r] - double(shift)), rs = T(rstd[r]);
    auto xhat_at = [&](int64_t i) { return ((xr[i] - shift) - deviation) * rs; };
    if (dx) {
      // a = sum(gw), c = sum(gw * xhat), gw = g * w
      auto gw_at = [&](int64_t i) {
        if constexpr (kHasWeight) return gr[i] * w[i];
        else return gr[i];
      };
      const T a = lane_sum<T>(D, gw_at) * inv_d;
      const T c = lane_sum<T>(D, [&](int64_t i) { return gw_at(i) * xhat_at(i); }) * inv_d;
      T* dxr = dx + r * D;
      for (int64_t j = 0; j < D; ++j) dxr[j] = rs * (gw_at(j) - a - xhat_at(j) * c);
    }
    if (part_w)
      for (int64_t j = 0; j < D; ++j) sum_w[size_t(j)] += gr[j] * xhat_at(j);
    if (part_b)
      for (int64_t j = 0; j < D; ++j) sum_b[size_t(j)] += gr[j];
  }
  if (part_w) std::copy(sum_w.begin(), sum_w.end(), part_w);
  if (part_b) std::copy(sum_b.begin(), sum_b.end(), part_b);
}

// Sums the chunk rows of `parts` ([chunks, D]) into out [D], for every column in chunk order
// (whatever the split of the columns over threads), streaming the rows.
template <typename T>
void combine_chunks(const double* parts, int64_t chunks, int64_t D, T* out) {
  parallel_for(0, D, std::max<int64_t>(256, kGrainElements / std::max<int64_t>(chunks, 1)), [&](int64_t b, int64_t e) {
    std::vector<double> total(size_t(e - b), 0.0);
    for (int64_t c = 0; c < chunks; ++c) {
      const double* row = parts + c * D;
      for (int64_t j = b; j < e; ++j) total[size_t(j - b)] += row[j];
    }
    for (int64_t j = b; j < e; ++j) out[j] = T(total[size_t(j - b)]);
  });
}

// Rows whose dweight / dbias contributions are summed together before the chunks are combined.
int64_t rows_per_chunk(int64_t D) { return std::max<int64_t>(16, kGrainElements / std::max<int64_t>(D, 1)); }

}  // namespace

void layer_norm_forward(const On& on, const void* x, const void* weight, const void* bias, void* y, double* mean,
                        double* rstd, int64_t rows, int64_t D, double eps) {
  if (rows == 0 || D == 0) return;
  dispatch_floating(Dtype(on.dtype), "layer_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* w = static_cast<const T*>(weight);
    const T* b = static_cast<const T*>(bias);
    auto run = [&](auto kernel) { kernel(static_cast<const T*>(x), w, b, static_cast<T*>(y), mean, rstd, rows, D, eps); };
    if (w && b) run(forward_kernel<T, true, true>);
    else if (w) run(forward_kernel<T, true, false>);
    else if (b) run(forward_kernel<T, false, true>);
    else run(forward_kernel<T, false, false>);
  });
}

// Two [chunks, D] blocks: dweight's chunk sums, then dbias's.
int64_t layer_norm_scratch(const On&, int64_t rows, int64_t D) {
  const int64_t chunk_rows = rows_per_chunk(D);
  return 2 * ((rows + chunk_rows - 1) / chunk_rows) * D;
}

void layer_norm_backward(const On& on, const void* grad, const void* x, const double* mean, const double* rstd,
                         const void* weight, void* dx, void* dweight, void* dbias, int64_t rows, int64_t D,
                         double* scratch) {
  if (D == 0) return;
  const int64_t chunk_rows = rows_per_chunk(D);
  const int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  double* part_w = dweight ? scratch : nullptr;
  double* part_b = dbias ? scratch + chunks * D : nullptr;
  dispatch_floating(Dtype(on.dtype), "layer_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* w = static_cast<const T*>(weight);
    auto chunk = w ? backward_chunk<T, true> : backward_chunk<T, false>;
    parallel_for(0, chunks, 1, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c)
        chunk(static_cast<const T*>(grad), static_cast<const T*>(x), mean, rstd, w, static_cast<T*>(dx),
              part_w ? part_w + c * D : nullptr, part_b ? part_b + c * D : nullptr, c * chunk_rows,
              std::min(rows, (c + 1) * chunk_rows), D);
    });
    if (part_w) combine_chunks(part_w, chunks, D, static_cast<T*>(dweight));
    if (part_b) combine_chunks(part_b, chunks, D, static_cast<T*>(dbias));
  });
}

// ---- RMS norm. Sums in double, in a fixed order: 8 lanes per row, and dweight by chunks of
// kRmsNormChunkRows rows added in order, the chunks of cuda/norm_kernels.cu.
namespace {

// sum of term(i) for i in [0, n) in double, in 8 lanes (so that it vectorises) added in a fixed order.
template <typename Term>
double lanes_sum(int64_t n, Term term) {
  double lanes[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) lanes[k] += term(i + k);
  for (; i < n; ++i) lanes[0] += term(i);
  double total = 0;
  for (double lane : lanes) total += lane;
  return total;
}

}  // namespace

void rms_norm_forward(const On& on, const void* x_, const void* w_, void* y_, double* rstd, int64_t rows, int64_t D,
                      double eps) {
  dispatch_floating(Dtype(on.dtype), "rms_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *x = static_cast<const T*>(x_), *w = static_cast<const T*>(w_);
    T* y = static_cast<T*>(y_);
    parallel_for(0, rows, std::max<int64_t>(1, kGrainElements / D), [&](int64_t first, int64_t last) {
      for (int64_t r = first; r < last; ++r) {
        const T* xr = x + r * D;
        const double mean_square = lanes_sum(D, [&](int64_t i) { return double(xr[i]) * double(xr[i]); }) / double(D);
        const double rs = 1.0 / std::sqrt(mean_square + eps);
        for (int64_t i = 0; i < D; ++i) y[r * D + i] = T(double(xr[i]) * rs * (w != nullptr ? double(w[i]) : 1.0));
        rstd[r] = rs;
      }
    });
  });
}

// dx = rstd * (gw - xhat * mean(gw * xhat)), dweight = sum over rows of grad * xhat (xhat = x * rstd,
// gw = grad * weight).
void rms_norm_backward(const On& on, const void* g_, const void* x_, const double* rstd, const void* w_, void* dx_,
                       void* dw_, int64_t rows, int64_t D, double* partial) {
  dispatch_floating(Dtype(on.dtype), "rms_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *g = static_cast<const T*>(g_), *x = static_cast<const T*>(x_), *w = static_cast<const T*>(w_);
    T *dx = static_cast<T*>(dx_), *dw = static_cast<T*>(dw_);
    if (dx != nullptr)
      parallel_for(0, rows, std::max<int64_t>(1, kGrainElements / D), [&](int64_t first, int64_t last) {
        for (int64_t r = first; r < last; ++r) {
          const T *gr = g + r * D, *xr = x + r * D;
          const double rs = rstd[r];
          auto gw = [&](int64_t i) { return double(gr[i]) * (w != nullptr ? double(w[i]) : 1.0); };
          const double mean_gwx = lanes_sum(D, [&](int64_t i) { return gw(i) * double(xr[i]) * rs; }) / double(D);
          for (int64_t i = 0; i < D; ++i) dx[r * D + i] = T(rs * (gw(i) - double(xr[i]) * rs * mean_gwx));
        }
      });
    if (dw == nullptr) return;
    const int64_t chunks = (rows + kRmsNormChunkRows - 1) / kRmsNormChunkRows;
    parallel_for(0, chunks, 1, [&](int64_t first, int64_t last) {
      for (int64_t c = first; c < last; ++c) {
        double* part = partial + c * D;
        std::fill(part, part + D, 0.0);
        for (int64_t r = c * kRmsNormChunkRows; r < std::min(rows, (c + 1) * kRmsNormChunkRows); ++r)
          for (int64_t i = 0; i < D; ++i) part[i] += double(g[r * D + i]) * double(x[r * D + i]) * rstd[r];
      }
    });
    for (int64_t i = 0; i < D; ++i) {
      double sum = 0;
      for (int64_t c = 0; c < chunks; ++c) sum += partial[c * D + i];
      dw[i] = T(sum);
    }
  });
}
}  // namespace ember::cpu
