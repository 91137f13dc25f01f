// The row building blocks of rows.h. Each reduction keeps 16 independent partial results, lane k summing
// elements k, k + 16, ... (core/cpu/lanes.h: one vector register for float), added in lane order at the end:
// the result of the same scalar loop.
#include "core/cpu/rows.h"

#include <cstdint>
#include <limits>

#include "core/cpu/lanes.h"

namespace ember::cpu {

using namespace lanes;

// sum(a * b)
template <typename T>
T row_dot(const T* a, const T* b, int64_t n) {
  Lanes<T> lanes{};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) lanes += load(a + i) * load(b + i);
  T total = lane_total<T>(lanes);
  for (; i < n; ++i) total += a[i] * b[i];
  return total;
}

template <typename T>
void row_dots(int64_t rows, int64_t n, T alpha, const T* a, int64_t a_rs, const T* b, int64_t b_rs, T* out,
              int64_t out_rs) {
  int64_t r = 0;
  const int64_t whole = n - n % kLanes;  // the columns summed in lanes; the rest added one by one
  for (; whole > 0 && r + kLanes <= rows; r += kLanes) {
    Lanes<T> lanes[kLanes] = {};
    for (int j = 0; j < kLanes; ++j) {
      const T* aj = a + (r + j) * a_rs;
      const T* bj = b + (r + j) * b_rs;
      for (int64_t i = 0; i < whole; i += kLanes) lanes[j] += load(aj + i) * load(bj + i);
    }
    const Lanes<T> totals = lane_totals<T>(lanes);
    for (int j = 0; j < kLanes; ++j) {
      T total = totals[j];
      for (int64_t i = whole; i < n; ++i) total += a[(r + j) * a_rs + i] * b[(r + j) * b_rs + i];
      out[(r + j) * out_rs] += alpha * total;
    }
  }
  for (; r < rows; ++r) out[r * out_rs] += alpha * row_dot(a + r * a_rs, b + r * b_rs, n);
}

template <typename T>
T row_sum(const T* a, int64_t n) {
  Lanes<T> lanes{};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) lanes += load(a + i);
  T total = lane_total<T>(lanes);
  for (; i < n; ++i) total += a[i];
  return total;
}

// out = e^(x - shift), returning the sum of the values written.
template <typename T>
T row_exp_store_sum(const T* x, T shift, T* out, int64_t n) {
  Lanes<T> lanes{};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const Lanes<T> e = exp_lanes(load(x + i) - shift);
    store(out + i, e);
    lanes += e;
  }
  T total = lane_total<T>(lanes);
  for (; i < n; ++i) {
    T e = exp_vec(x[i] - shift);
    out[i] = e;
    total += e;
  }
  return total;
}

template <typename T>
T row_max(const T* x, int64_t n) {
  Lanes<T> lanes = splat(-std::numeric_limits<T>::infinity());
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const Lanes<T> v = load(x + i);
    lanes = v > lanes ? v : lanes;  // a NaN never wins
  }
  T best = lanes[0];
  for (int k = 1; k < kLanes; ++k) best = lanes[k] > best ? lanes[k] : best;
  for (; i < n; ++i) best = x[i] > best ? x[i] : best;
  return best;
}

template <typename T>
T row_sum_exp(const T* x, T shift, int64_t n) {
  Lanes<T> lanes{};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) lanes += exp_lanes(load(x + i) - shift);
  T total = lane_total<T>(lanes);
  for (; i < n; ++i) total += exp_vec(x[i] - shift);
  return total;
}

template <typename T>
void row_exp_scaled(const T* x, T shift, T scale, T* out, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) store(out + i, exp_lanes(load(x + i) - shift) * scale);
  for (; i < n; ++i) out[i] = exp_vec(x[i] - shift) * scale;
}

#define EMBER_INSTANTIATE(T)                                      \
  template T row_max<T>(const T*, int64_t);                       \
  template T row_sum_exp<T>(const T*, T, int64_t);                \
  template void row_exp_scaled<T>(const T*, T, T, T*, int64_t);  \
  template T row_dot<T>(const T*, const T*, int64_t);             \
  template void row_dots<T>(int64_t, int64_t, T, const T*, int64_t, const T*, int64_t, T*, int64_t); \
  template T row_sum<T>(const T*, int64_t);                       \
  template T row_exp_store_sum<T>(const T*, T, T*, int64_t);
EMBER_INSTANTIATE(float)
EMBER_INSTANTIATE(double)
#undef EMBER_INSTANTIATE

}  // namespace ember::cpu
