// The normalisations over the last dim, forward and backward: each row's statistics by a block (sums in
// double, block_reduce) or, for rows of up to 1024, a warp (cuda/row_kernels.cuh); the weight's and the
// bias's gradients summed over rows by fixed chunks of rows, then the chunks in order (no atomics).
#include <cmath>
#include <cstdint>

#include "core/kernels.h"
#include "cuda/dispatch.h"
#include "cuda/launch.h"
#include "cuda/row_kernels.cuh"

namespace ember::cuda {

using namespace row_kernels;  // the shared helpers: cuda/row_kernels.cuh

// ---- Layer norm: forward, dx, then dweight and dbias by chunks of rows.
namespace {

// Layer norm of rows of D <= kWarpRowMax: the mean, then the mean square deviation (two passes),
// both of the row shifted by its first element, like the CPU.
// NOTE: the shift is what lets float32 accumulate in float: rows far from zero (x + 1e4) lost three
// digits without it (measured by "layer_norm: float32 stays accurate far from zero"); x - x0 is
// exact for nearby floats.
template <typename T>
__global__ void layer_norm_forward_warp_kernel(const T* x, const T* w, const T* b, T* y, double* mean_out,
                                               double* rstd_out, int64_t rows, int64_t D, double eps) {
  const int lane = int(threadIdx.x) % kWarp;
  EMBER_WARP_ROWS(r, rows) {
    const int64_t base = r * D;
    const T shift = x[base];
    T s = 0;
    for (int64_t j = lane; j < D; j += kWarp) s += x[base + j] - shift;
    const T mean = warp_sum(s) / T(D);  // of the shifted row
    T q = 0;
    for (int64_t j = lane; j < D; j += kWarp) {
      T d = (x[base + j] - shift) - mean;
      q += d * d;
    }
    const T rstd = T(1) / std::sqrt(warp_sum(q) / T(D) + T(eps));
    for (int64_t j = lane; j < D; j += kWarp) {
      T v = ((x[base + j] - shift) - mean) * rstd;
      if (w != nullptr) v *= w[j];
      if (b != nullptr) v += b[j];
      y[base + j] = v;
    }
    if (lane == 0) {
      mean_out[r] = double(shift) + double(mean);
      rstd_out[r] = double(rstd);
    }
  }
}

// dx of layer norm, rows of D <= kWarpRowMax (layer_norm_dx_kernel's formula).
template <typename T>
__global__ void layer_norm_dx_warp_kernel(const T* grad, const T* x, const double* mean, const double* rstd,
                                          const T* w, T* dx, int64_t rows, int64_t D) {
  const int lane = int(threadIdx.x) % kWarp;
  EMBER_WARP_ROWS(r, rows) {
    const int64_t base = r * D;
    const double mu = mean[r];  // NOTE: x - mu in double: mu of a row far from zero is not a float
    const T rs = T(rstd[r]);
    T s_gw = 0, s_gwx = 0;
    for (int64_t j = lane; j < D; j += kWarp) {
      T gw = grad[base + j] * (w != nullptr ? w[j] : T(1));
      s_gw += gw;
      s_gwx += gw * (T(double(x[base + j]) - mu) * rs);
    }
    const T mean_gw = warp_sum(s_gw) / T(D), mean_gwx = warp_sum(s_gwx) / T(D);
    for (int64_t j = lane; j < D; j += kWarp) {
      T gw = grad[base + j] * (w != nullptr ? w[j] : T(1));
      T xhat = T(double(x[base + j]) - mu) * rs;
      dx[base + j] = rs * (gw - mean_gw - xhat * mean_gwx);
    }
  }
}

// y[r, :] = (x - mean) * rstd * w + b, and the row's mean and rstd for the backward: one block per row,
// the two passes' sums in double by block_reduce.
template <typename T>
__global__ void layer_norm_forward_kernel(const T* x, const T* w, const T* b, T* y, double* mean_out,
                                          double* rstd_out, int64_t D, double eps) {
  const int64_t base = int64_t(blockIdx.x) * D;
  double s = 0;
  for (int64_t j = threadIdx.x; j < D; j += kThreads) s += double(x[base + j]);
  const double mean = block_reduce(s, SumOp{}) / double(D);
  double q = 0;
  for (int64_t j = threadIdx.x; j < D; j += kThreads) {
    double d = double(x[base + j]) - mean;
    q += d * d;
  }
  const double var = block_reduce(q, SumOp{}) / double(D);
  const double rstd = 1.0 / std::sqrt(var + eps);
  for (int64_t j = threadIdx.x; j < D; j += kThreads) {
    double v = (double(x[base + j]) - mean) * rstd;
    if (w != nullptr) v *= double(w[j]);
    if (b != nullptr) v += double(b[j]);
    y[base + j] = T(v);
  }
  if (threadIdx.x == 0) {
    mean_out[blockIdx.x] = mean;
    rstd_out[blockIdx.x] = rstd;
  }
}

// dx[r, :] = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)), gw = grad * w: one block per row, the two
// means in double by block_reduce.
template <typename T>
__global__ void layer_norm_dx_kernel(const T* grad, const T* x, const double* mean, const double* rstd, const T* w,
                                     T* dx, int64_t D) {
  const int64_t base = int64_t(blockIdx.x) * D;
  const double mu = mean[blockIdx.x], rs = rstd[blockIdx.x];
  double s_gw = 0, s_gwx = 0;
  for (int64_t j = threadIdx.x; j < D; j += kThreads) {
    double gw = double(grad[base + j]) * (w != nullptr ? double(w[j]) : 1.0);
    double xhat = (double(x[base + j]) - mu) * rs;
    s_gw += gw;
    s_gwx += gw * xhat;
  }
  const double mean_gw = block_reduce(s_gw, SumOp{}) / double(D);
  const double mean_gwx = block_reduce(s_gwx, SumOp{}) / double(D);
  for (int64_t j = threadIdx.x; j < D; j += kThreads) {
    double gw = double(grad[base + j]) * (w != nullptr ? double(w[j]) : 1.0);
    double xhat = (double(x[base + j]) - mu) * rs;
    dx[base + j] = T(rs * (gw - mean_gw - xhat * mean_gwx));
  }
}

constexpr int64_t kLayerNormChunkRows = 64;

// partial[c, j] = sum over the rows of chunk c (in order) of grad * xhat; partial[chunks + c, j] of grad.
// A thread per (column j, chunk c): blockIdx.y is the chunk.
template <typename T>
__global__ void layer_norm_partial_kernel(const T* grad, const T* x, const double* mean, const double* rstd,
                                          int64_t rows, int64_t D, double* partial, int64_t chunks) {
  const int64_t j = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t c = blockIdx.y;
  if (j >= D) return;
  double pw = 0, pb = 0;
  const int64_t end = (c + 1) * kLayerNormChunkRows < rows ? (c + 1) * kLayerNormChunkRows : rows;
  for (int64_t r = c * kLayerNormChunkRows; r < end; ++r) {
    double g = double(grad[r * D + j]);
    pw += g * (double(x[r * D + j]) - mean[r]) * rstd[r];
    pb += g;
  }
  partial[c * D + j] = pw;
  partial[(chunks + c) * D + j] = pb;
}

// dweight[j] and dbias[j] = the sums over the chunks, in order, of layer_norm_partial_kernel's partials:
// a thread per column j.
template <typename T>
__global__ void layer_norm_combine_kernel(const double* partial, int64_t chunks, int64_t D, T* dweight, T* dbias) {
  const int64_t j = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (j >= D) return;
  double w = 0, b = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    w += partial[c * D + j];
    b += partial[(chunks + c) * D + j];
  }
  if (dweight != nullptr) dweight[j] = T(w);
  if (dbias != nullptr) dbias[j] = T(b);
}

}  // namespace

void layer_norm_forward(const On& on, const void* x, const void* weight, const void* bias, void* y, double* mean,
                        double* rstd, int64_t rows, int64_t D, double eps) {
  if (rows == 0) return;
  cudaStream_t stream = use_device(on.device);
  const bool float64 = on.float64();
  if (D <= kWarpRowMax) {  // short rows: a warp each
    dispatch_floating(float64, [&](auto tag) {
      using T = decltype(tag);
      layer_norm_forward_warp_kernel<<<warp_row_blocks(rows), kThreads, 0, stream>>>(
          static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const T*>(bias),
          static_cast<T*>(y), mean, rstd, rows, D, eps);
    });
    EMBER_CUDA_LAUNCHED("layer_norm_forward_warp_kernel");
    return;
  }
  dispatch_floating(float64, [&](auto tag) {
    using T = decltype(tag);
    layer_norm_forward_kernel<<<grid_rows(rows), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const T*>(bias),
        static_cast<T*>(y), mean, rstd, D, eps);
  });
  EMBER_CUDA_LAUNCHED("layer_norm_forward_kernel");
}

namespace {
int64_t layer_norm_chunks(int64_t rows) { return (rows + kLayerNormChunkRows - 1) / kLayerNormChunkRows; }
}  // namespace

// Two [chunks, D] blocks: dweight's chunk sums, then dbias's.
int64_t layer_norm_scratch(const On&, int64_t rows, int64_t D) { return 2 * layer_norm_chunks(rows) * D; }

template <typename T>
void layer_norm_backward_typed(cudaStream_t stream, const T* grad, const T* x, const double* mean, const double* rstd,
                               const T* w, T* dx, T* dw, T* db, int64_t rows, int64_t D, double* partial) {
  if (dx != nullptr && D <= kWarpRowMax) {  // short rows: a warp each
    layer_norm_dx_warp_kernel<<<warp_row_blocks(rows), kThreads, 0, stream>>>(grad, x, mean, rstd, w, dx, rows, D);
    EMBER_CUDA_LAUNCHED("layer_norm_dx_warp_kernel");
  } else if (dx != nullptr) {
    layer_norm_dx_kernel<<<grid_rows(rows), kThreads, 0, stream>>>(grad, x, mean, rstd, w, dx, D);
    EMBER_CUDA_LAUNCHED("layer_norm_dx_kernel");
  }
  if (dw != nullptr || db != nullptr) {
    const int64_t chunks = layer_norm_chunks(rows);
    if (chunks > 65535) raise_message("layer_norm backward: too many rows for the CUDA kernel (over 4 million)");
    dim3 grid(unsigned((D + kThreads - 1) / kThreads), unsigned(chunks));
    layer_norm_partial_kernel<<<grid, kThreads, 0, stream>>>(grad, x, mean, rstd, rows, D, partial, chunks);
    EMBER_CUDA_LAUNCHED("layer_norm_partial_kernel");
    layer_norm_combine_kernel<<<unsigned((D + kThreads - 1) / kThreads), kThreads, 0, stream>>>(partial, chunks, D, dw, db);
    EMBER_CUDA_LAUNCHED("layer_norm_combine_kernel");
  }
}

void layer_norm_backward(const On& on, const void* grad, const void* x, const double* mean, const double* rstd,
                         const void* weight, void* dx, void* dweight, void* dbias, int64_t rows, int64_t D,
                         double* partial) {
  if (rows == 0 || D == 0) return;
  cudaStream_t stream = use_device(on.device);
  dispatch_floating(on.float64(), [&](auto tag) {
    using T = decltype(tag);
    layer_norm_backward_typed(stream, static_cast<const T*>(grad), static_cast<const T*>(x), mean, rstd,
                              static_cast<const T*>(weight), static_cast<T*>(dx), static_cast<T*>(dweight),
                              static_cast<T*>(dbias), rows, D, partial);
  });
}

// ---- RMS norm (autograd/ops/layer_norm.cpp; the op added in docs/adding-an-op.md): one warp per
// short row, else one block per row like layer norm with sums in double; dweight by chunks of kRmsNormChunkRows rows (core/kernels.h), then the chunks in
// order (the CPU's order too).
namespace {

// y[r, :] = x[r, :] * rstd[r] * w, rstd[r] = 1 / sqrt(mean(x[r, :]^2) + eps): one block per row, the sum of
// squares in double by block_reduce.
template <typename T>
__global__ void rms_norm_forward_kernel(const T* x, const T* w, T* y, double* rstd_out, int64_t D, double eps) {
  const int64_t base = int64_t(blockIdx.x) * D;
  double q = 0;
  for (int64_t j = threadIdx.x; j < D; j += kThreads) q += double(x[base + j]) * double(x[base + j]);
  const double rstd = 1.0 / std::sqrt(block_reduce(q, SumOp{}) / double(D) + eps);
  for (int64_t j = threadIdx.x; j < D; j += kThreads)
    y[base + j] = T(double(x[base + j]) * rstd * (w != nullptr ? double(w[j]) : 1.0));
  if (threadIdx.x == 0) rstd_out[blockIdx.x] = rstd;
}

// dx[r, :] = rstd * (gw - xhat * mean(gw * xhat)), gw = grad * w, xhat = x * rstd: one block per row, the
// mean in double by block_reduce.
template <typename T>
__global__ void rms_norm_dx_kernel(const T* grad, const T* x, const double* rstd, const T* w, T* dx, int64_t D) {
  const int64_t base = int64_t(blockIdx.x) * D;
  const double rs = rstd[blockIdx.x];
  double s = 0;
  for (int64_t j = threadIdx.x; j < D; j += kThreads)
    s += double(grad[base + j]) * (w != nullptr ? double(w[j]) : 1.0) * double(x[base + j]) * rs;
  const double mean_gwx = block_reduce(s, SumOp{}) / double(D);
  for (int64_t j = threadIdx.x; j < D; j += kThreads) {
    const double gw = double(grad[base + j]) * (w != nullptr ? double(w[j]) : 1.0);
    dx[base + j] = T(rs * (gw - double(x[base + j]) * rs * mean_gwx));
  }
}

// partial[c, j] = sum over the rows of chunk c (in order) of grad * xhat; dweight[j] = sum over c in order.
// A thread per (column j, chunk c): blockIdx.y is the chunk.
template <typename T>
__global__ void rms_norm_partial_kernel(const T* grad, const T* x, const double* rstd, int64_t rows, int64_t D,
                                        double* partial) {
  const int64_t j = int64_t(blockIdx.x) * kThreads + threadIdx.x, c = blockIdx.y;
  if (j >= D) return;
  double p = 0;
  const int64_t end = (c + 1) * kRmsNormChunkRows < rows ? (c + 1) * kRmsNormChunkRows : rows;
  for (int64_t r = c * kRmsNormChunkRows; r < end; ++r) p += double(grad[r * D + j]) * double(x[r * D + j]) * rstd[r];
  partial[c * D + j] = p;
}

// dweight[j] = the sum over the chunks, in order, of rms_norm_partial_kernel's partials: a thread per
// column j.
template <typename T>
__global__ void rms_norm_combine_kernel(const double* partial, int64_t chunks, int64_t D, T* dweight) {
  const int64_t j = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (j >= D) return;
  double sum = 0;
  for (int64_t c = 0; c < chunks; ++c) sum += partial[c * D + j];
  dweight[j] = T(sum);
}

// The same for rows of D <= kWarpRowMax: one warp per row, sums in T (float for float32).
// NOTE: the squares are of x / max|x| (the row's largest magnitude, then mean(x^2) rebuilt in
// double): a float32 square overflows above 1.8e19 and underflows below 1e-23, where the CPU (in
// double) still normalises to 1 ("rms_norm's CUDA kernels match the CPU" checks 1e20 and 1e-30).
template <typename T>
__global__ void rms_norm_forward_warp_kernel(const T* x, const T* w, T* y, double* rstd_out, int64_t rows, int64_t D,
                                             double eps) {
  const int lane = int(threadIdx.x) % kWarp;
  EMBER_WARP_ROWS(r, rows) {
    const int64_t base = r * D;
    T a = 0;
    for (int64_t j = lane; j < D; j += kWarp) a = std::abs(x[base + j]) > a ? std::abs(x[base + j]) : a;
    a = warp_max(a);
    T q = 0;
    if (a > T(0))
      for (int64_t j = lane; j < D; j += kWarp) {
        const T v = x[base + j] / a;
        q += v * v;
      }
    q = warp_sum(q);
    const double rstd = 1.0 / std::sqrt(double(a) * double(a) * (double(q) / double(D)) + eps);
    for (int64_t j = lane; j < D; j += kWarp)
      y[base + j] = T(double(x[base + j]) * rstd * (w != nullptr ? double(w[j]) : 1.0));
    if (lane == 0) rstd_out[r] = rstd;
  }
}

// dx of RMS norm (rms_norm_dx_kernel's formula), rows of D <= kWarpRowMax: one warp per row, sums by
// warp shuffles.
template <typename T>
__global__ void rms_norm_dx_warp_kernel(const T* grad, const T* x, const double* rstd, const T* w, T* dx,
                                        int64_t rows, int64_t D) {
  const int lane = int(threadIdx.x) % kWarp;
  EMBER_WARP_ROWS(r, rows) {
    const int64_t base = r * D;
    const T rs = T(rstd[r]);
    T s = 0;
    for (int64_t j = lane; j < D; j += kWarp) s += grad[base + j] * (w != nullptr ? w[j] : T(1)) * (x[base + j] * rs);
    const T mean_gwx = warp_sum(s) / T(D);
    for (int64_t j = lane; j < D; j += kWarp) {
      const T gw = grad[base + j] * (w != nullptr ? w[j] : T(1));
      dx[base + j] = rs * (gw - (x[base + j] * rs) * mean_gwx);
    }
  }
}

template <typename T>
void rms_norm_backward_typed(cudaStream_t stream, const T* grad, const T* x, const double* rstd, const T* w, T* dx,
                             T* dw, int64_t rows, int64_t D, double* partial) {
  if (dx != nullptr && D <= kWarpRowMax) {
    rms_norm_dx_warp_kernel<<<warp_row_blocks(rows), kThreads, 0, stream>>>(grad, x, rstd, w, dx, rows, D);
    EMBER_CUDA_LAUNCHED("rms_norm_dx_warp_kernel");
  } else if (dx != nullptr) {
    rms_norm_dx_kernel<<<grid_rows(rows), kThreads, 0, stream>>>(grad, x, rstd, w, dx, D);
    EMBER_CUDA_LAUNCHED("rms_norm_dx_kernel");
  }
  if (dw != nullptr) {
    const int64_t chunks = (rows + kRmsNormChunkRows - 1) / kRmsNormChunkRows;
    if (chunks > 65535) raise_message("rms_norm backward: too many rows for the CUDA kernel (over 4 million)");
    const unsigned columns = unsigned((D + kThreads - 1) / kThreads);
    const dim3 grid(columns, unsigned(chunks));
    rms_norm_partial_kernel<<<grid, kThreads, 0, stream>>>(grad, x, rstd, rows, D, partial);
    EMBER_CUDA_LAUNCHED("rms_norm_partial_kernel");
    rms_norm_combine_kernel<<<columns, kThreads, 0, stream>>>(partial, chunks, D, dw);
    EMBER_CUDA_LAUNCHED("rms_norm_combine_kernel");
  }
}

}  // namespace

void rms_norm_forward(const On& on, const void* x, const void* weight, void* y, double* rstd, int64_t rows, int64_t D,
                      double eps) {
  if (rows == 0) return;
  cudaStream_t stream = use_device(on.device);
  const bool float64 = on.float64();
  if (D <= kWarpRowMax) {  // short rows: a warp each
    dispatch_floating(float64, [&](auto tag) {
      using T = decltype(tag);
      rms_norm_forward_warp_kernel<<<warp_row_blocks(rows), kThreads, 0, stream>>>(
          static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<T*>(y), rstd, rows, D, eps);
    });
    EMBER_CUDA_LAUNCHED("rms_norm_forward_warp_kernel");
    return;
  }
  dispatch_floating(float64, [&](auto tag) {
    using T = decltype(tag);
    rms_norm_forward_kernel<<<grid_rows(rows), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<T*>(y), rstd, D, eps);
  });
  EMBER_CUDA_LAUNCHED("rms_norm_forward_kernel");
}

void rms_norm_backward(const On& on, const void* grad, const void* x, const double* rstd, const void* weight,
                       void* dx, void* dweight, int64_t rows, int64_t D, double* partial) {
  if (rows == 0) return;  // dweight stays as the op made it: zeros
  cudaStream_t stream = use_device(on.device);
  dispatch_floating(on.float64(), [&](auto tag) {
    using T = decltype(tag);
    rms_norm_backward_typed(stream, static_cast<const T*>(grad), static_cast<const T*>(x), rstd,
                            static_cast<const T*>(weight), static_cast<T*>(dx), static_cast<T*>(dweight),
                            rows, D, partial);
  });
}

}  // namespace ember::cuda
