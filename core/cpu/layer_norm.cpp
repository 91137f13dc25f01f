// CPU layer norm, forward and backward. See layer_norm.h for the precision and determinism notes.
#include "core/cpu/layer_norm.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"
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
void combine_chunks(const std::vector<double>& parts, int64_t chunks, int64_t D, T* out) {
  parallel_for(0, D, std::max<int64_t>(256, kGrainElements / std::max<int64_t>(chunks, 1)), [&](int64_t b, int64_t e) {
    std::vector<double> total(size_t(e - b), 0.0);
    for (int64_t c = 0; c < chunks; ++c) {
      const double* row = parts.data() + c * D;
      for (int64_t j = b; j < e; ++j) total[size_t(j - b)] += row[j];
    }
    for (int64_t j = b; j < e; ++j) out[j] = T(total[size_t(j - b)]);
  });
}

}  // namespace

int64_t layer_norm_rows_per_chunk(int64_t D) { return std::max<int64_t>(16, kGrainElements / std::max<int64_t>(D, 1)); }

LayerNormForward layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  const int64_t rows = x.size(0), D = x.size(1);
  LayerNormForward out;
  out.y = Tensor::empty(x.shape(), x.dtype(), x.device());
  out.mean = Tensor::empty({rows}, Dtype::Float64, x.device());
  out.rstd = Tensor::empty({rows}, Dtype::Float64, x.device());
  if (rows == 0 || D == 0) return out;
  dispatch_floating(x.dtype(), "layer_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* w = weight.defined() ? weight.data<T>() : nullptr;
    const T* b = bias.defined() ? bias.data<T>() : nullptr;
    auto run = [&](auto kernel) {
      kernel(x.data<T>(), w, b, out.y.data<T>(), out.mean.data<double>(), out.rstd.data<double>(), rows, D, eps);
    };
    if (w && b) run(forward_kernel<T, true, true>);
    else if (w) run(forward_kernel<T, true, false>);
    else if (b) run(forward_kernel<T, false, true>);
    else run(forward_kernel<T, false, false>);
  });
  return out;
}

LayerNormGrads layer_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& weight, bool need_dx, bool need_dweight, bool need_dbias) {
  const int64_t rows = x.size(0), D = x.size(1);
  LayerNormGrads out;
  if (need_dx) out.dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (need_dweight) out.dweight = Tensor::empty({D}, x.dtype(), x.device());
  if (need_dbias) out.dbias = Tensor::empty({D}, x.dtype(), x.device());
  if (D == 0) return out;
  const int64_t chunk_rows = layer_norm_rows_per_chunk(D);
  const int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  std::vector<double> part_w(need_dweight ? size_t(chunks * D) : 0), part_b(need_dbias ? size_t(chunks * D) : 0);
  dispatch_floating(x.dtype(), "layer_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* w = weight.defined() ? weight.data<T>() : nullptr;
    T* dx = need_dx ? out.dx.data<T>() : nullptr;
    auto chunk = w ? backward_chunk<T, true> : backward_chunk<T, false>;
    parallel_for(0, chunks, 1, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c)
        chunk(grad.data<T>(), x.data<T>(), mean.data<double>(), rstd.data<double>(), w, dx,
              need_dweight ? part_w.data() + c * D : nullptr, need_dbias ? part_b.data() + c * D : nullptr,
              c * chunk_rows, std::min(rows, (c + 1) * chunk_rows), D);
    });
    if (need_dweight) combine_chunks(part_w, chunks, D, out.dweight.data<T>());
    if (need_dbias) combine_chunks(part_b, chunks, D, out.dbias.data<T>());
  });
  return out;
}

}  // namespace ember::cpu
