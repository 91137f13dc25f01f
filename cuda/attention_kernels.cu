// Fused multi-head self-attention on the GPU, forward and backward, without writing the
// [B, H, T, T] scores or probabilities to memory: one block per (batch, head, row) keeps that
// row's T scores in shared memory. Same layout as core/cpu/attention.h: qkv [B, T, 3 D] (q, k, v,
// each H heads of Dh), out [B, T, D], key_padding_mask bool [B, T] (true = padding), causal masks
// key j > query i. A row whose keys are all masked gives NaN, like the CPU.
//
// Forward, block (b, h, i):   s_j = scale q_i . k_j (masked: -inf); p = softmax(s); o_i = sum_j p_j v_j;
//                             saves lse_i = max + log(sum) for the backward.
// Backward, two kernels, each writing its own part of dqkv (no atomics, every sum in a fixed order):
//   query rows (b, h, i):  p_j = e^(s_j - lse_i), dP_j = dO_i . v_j, D_i = dO_i . o_i,
//                          dS_j = p_j (dP_j - D_i), dq_i = scale sum_j dS_j k_j      (saves D_i)
//   key rows (b, h, j):    over queries i: p_ij, dS_ij as above,
//                          dv_j = sum_i p_ij dO_i, dk_j = scale sum_i dS_ij q_i
// The scores are recomputed (flash-attention style) instead of stored. Sums accumulate in double.
// Simple rather than fast: no tiling of K and V through shared memory yet.
// NOTE: compiled by CI with nvcc, but not yet run on a GPU (see docs/cuda.md).
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/cuda_ops.h"
#include "cuda/launch.h"

namespace ember::cuda {
namespace {

constexpr int kAttnThreads = 128;

struct Dims {
  int64_t B, T, H, Dh, D;
  double scale;
  bool causal;
};

__device__ __forceinline__ bool masked(const Dims& d, const bool* pad, int64_t b, int64_t i, int64_t j) {
  return (pad != nullptr && pad[b * d.T + j]) || (d.causal && j > i);
}

// Fixed-order block sum / max over kAttnThreads values (in double).
__device__ double block_sum(double v, double* scratch) {
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int s = kAttnThreads / 2; s > 0; s >>= 1) {
    if (int(threadIdx.x) < s) scratch[threadIdx.x] += scratch[threadIdx.x + s];
    __syncthreads();
  }
  double r = scratch[0];
  __syncthreads();
  return r;
}
__device__ double block_max(double v, double* scratch) {
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int s = kAttnThreads / 2; s > 0; s >>= 1) {
    if (int(threadIdx.x) < s) {
      double o = scratch[threadIdx.x + s];
      if (o > scratch[threadIdx.x]) scratch[threadIdx.x] = o;
    }
    __syncthreads();
  }
  double r = scratch[0];
  __syncthreads();
  return r;
}

// Pointers to row t of q, k, v of head h in batch b.
template <typename T>
__device__ __forceinline__ const T* row_of(const T* qkv, const Dims& d, int64_t b, int64_t t, int which, int64_t h) {
  return qkv + (b * d.T + t) * 3 * d.D + which * d.D + h * d.Dh;
}

template <typename T>
__device__ double dot(const T* a, const T* b, int64_t n) {
  double s = 0;
  for (int64_t k = 0; k < n; ++k) s += double(a[k]) * double(b[k]);
  return s;
}

// Block (b, h, i). Shared memory: T scores (double) + kAttnThreads scratch.
template <typename T>
__global__ void attention_forward_kernel(const T* qkv, const bool* pad, Dims d, T* out, double* lse, T* probs) {
  extern __shared__ double shared[];
  double* p = shared;
  double* scratch = shared + d.T;
  const int64_t row = blockIdx.x;  // ((b * H) + h) * T + i
  const int64_t i = row % d.T, h = (row / d.T) % d.H, b = row / (d.T * d.H);
  const T* q = row_of(qkv, d, b, i, 0, h);
  double m = -INFINITY;
  for (int64_t j = threadIdx.x; j < d.T; j += kAttnThreads) {
    double s = masked(d, pad, b, i, j) ? -INFINITY : d.scale * dot(q, row_of(qkv, d, b, j, 1, h), d.Dh);
    p[j] = s;
    m = s > m ? s : m;
  }
  m = block_max(m, scratch);
  double local = 0;
  for (int64_t j = threadIdx.x; j < d.T; j += kAttnThreads) {
    double e = std::exp(p[j] - m);  // all masked: m = -inf, e = NaN, like the CPU
    p[j] = e;
    local += e;
  }
  const double total = block_sum(local, scratch);
  for (int64_t j = threadIdx.x; j < d.T; j += kAttnThreads) {
    p[j] /= total;
    if (probs != nullptr) probs[row * d.T + j] = T(p[j]);
  }
  __syncthreads();
  if (threadIdx.x == 0) lse[row] = m + std::log(total);
  T* o = out + (b * d.T + i) * d.D + h * d.Dh;
  for (int64_t c = threadIdx.x; c < d.Dh; c += kAttnThreads) {
    double acc = 0;
    for (int64_t j = 0; j < d.T; ++j) acc += p[j] * double(row_of(qkv, d, b, j, 2, h)[c]);
    o[c] = T(acc);
  }
}

// p_ij from the saved log-sum-exp (0 where masked).
template <typename T>
__device__ double prob(const T* qkv, const bool* pad, const Dims& d, const double* lse, int64_t b, int64_t h, int64_t i,
                       int64_t j) {
  if (masked(d, pad, b, i, j)) return 0.0;
  double s = d.scale * dot(row_of(qkv, d, b, i, 0, h), row_of(qkv, d, b, j, 1, h), d.Dh);
  return std::exp(s - lse[(b * d.H + h) * d.T + i]);
}

// Block (b, h, i): dq_i, and D_i = dO_i . o_i saved for the key kernel. Shared: T dS values + scratch.
template <typename T>
__global__ void attention_backward_query_kernel(const T* qkv, const bool* pad, Dims d, const T* out, const T* dout,
                                                const double* lse, double* delta, T* dqkv) {
  extern __shared__ double shared[];
  double* ds = shared;
  double* scratch = shared + d.T;
  const int64_t row = blockIdx.x;
  const int64_t i = row % d.T, h = (row / d.T) % d.H, b = row / (d.T * d.H);
  const T* dO = dout + (b * d.T + i) * d.D + h * d.Dh;
  const T* O = out + (b * d.T + i) * d.D + h * d.Dh;
  double local = 0;
  for (int64_t c = threadIdx.x; c < d.Dh; c += kAttnThreads) local += double(dO[c]) * double(O[c]);
  const double Di = block_sum(local, scratch);
  for (int64_t j = threadIdx.x; j < d.T; j += kAttnThreads) {
    double pj = prob(qkv, pad, d, lse, b, h, i, j);
    double dp = dot(dO, row_of(qkv, d, b, j, 2, h), d.Dh);
    ds[j] = pj * (dp - Di);
  }
  __syncthreads();
  if (threadIdx.x == 0) delta[row] = Di;
  T* dq = dqkv + (b * d.T + i) * 3 * d.D + h * d.Dh;
  for (int64_t c = threadIdx.x; c < d.Dh; c += kAttnThreads) {
    double acc = 0;
    for (int64_t j = 0; j < d.T; ++j) acc += ds[j] * double(row_of(qkv, d, b, j, 1, h)[c]);
    dq[c] = T(d.scale * acc);
  }
}

// Block (b, h, j): dk_j and dv_j. Shared: T probabilities, T dS values + scratch.
template <typename T>
__global__ void attention_backward_key_kernel(const T* qkv, const bool* pad, Dims d, const T* dout, const double* lse,
                                              const double* delta, T* dqkv) {
  extern __shared__ double shared[];
  double* p = shared;
  double* ds = shared + d.T;
  const int64_t row = blockIdx.x;
  const int64_t j = row % d.T, h = (row / d.T) % d.H, b = row / (d.T * d.H);
  const T* v = row_of(qkv, d, b, j, 2, h);
  for (int64_t i = threadIdx.x; i < d.T; i += kAttnThreads) {
    double pij = prob(qkv, pad, d, lse, b, h, i, j);
    const T* dO = dout + (b * d.T + i) * d.D + h * d.Dh;
    double dp = dot(dO, v, d.Dh);
    p[i] = pij;
    ds[i] = pij * (dp - delta[(b * d.H + h) * d.T + i]);
  }
  __syncthreads();
  T* dk = dqkv + (b * d.T + j) * 3 * d.D + d.D + h * d.Dh;
  T* dv = dqkv + (b * d.T + j) * 3 * d.D + 2 * d.D + h * d.Dh;
  for (int64_t c = threadIdx.x; c < d.Dh; c += kAttnThreads) {
    double acc_k = 0, acc_v = 0;
    for (int64_t i = 0; i < d.T; ++i) {
      acc_k += ds[i] * double(row_of(qkv, d, b, i, 0, h)[c]);
      acc_v += p[i] * double(dout[(b * d.T + i) * d.D + h * d.Dh + c]);
    }
    dk[c] = T(d.scale * acc_k);
    dv[c] = T(acc_v);
  }
}

Dims make_dims(int64_t B, int64_t T, int64_t heads, int64_t D, bool causal) {
  Dims d{B, T, heads, D / heads, D, 1.0 / std::sqrt(double(D / heads)), causal};
  return d;
}

void check_size(int64_t rows, size_t shared_bytes) {
  if (rows > 2147483647) raise_message("attention (CUDA): more than 2^31 - 1 rows of B * heads * T");
  if (shared_bytes > 48 * 1024) raise_message("attention (CUDA): the sequence is too long for the fused kernel");
}

}  // namespace

namespace {
std::atomic<int> use_fused{-1};  // -1: not decided yet (read EMBER_ATTENTION on first use)
}  // namespace

void set_attention_fused(bool on) { use_fused = on ? 1 : 0; }

bool attention_fused() {
  int value = use_fused.load();
  if (value < 0) {
    const char* env = std::getenv("EMBER_ATTENTION");
    value = env != nullptr && std::strcmp(env, "fused") == 0 ? 1 : 0;
    use_fused = value;
  }
  return value == 1;
}

int64_t attention_max_len() { return (48 * 1024 / int64_t(sizeof(double)) - kAttnThreads) / 2; }

void attention_forward(int device, bool float64, const void* qkv, const bool* key_padding_mask, int64_t B, int64_t T,
                       int64_t heads, int64_t D, bool causal, void* out, double* lse, void* probs) {
  const int64_t rows = B * heads * T;
  if (rows == 0) return;
  cudaStream_t stream = use_device(device);
  const Dims d = make_dims(B, T, heads, D, causal);
  const size_t shared = size_t(T + kAttnThreads) * sizeof(double);
  check_size(rows, shared);
  if (float64)
    attention_forward_kernel<<<unsigned(rows), kAttnThreads, shared, stream>>>(
        static_cast<const double*>(qkv), key_padding_mask, d, static_cast<double*>(out), lse, static_cast<double*>(probs));
  else
    attention_forward_kernel<<<unsigned(rows), kAttnThreads, shared, stream>>>(
        static_cast<const float*>(qkv), key_padding_mask, d, static_cast<float*>(out), lse, static_cast<float*>(probs));
  EMBER_CUDA_LAUNCHED("attention_forward_kernel");
}

void attention_backward(int device, bool float64, const void* qkv, const bool* key_padding_mask, int64_t B, int64_t T,
                        int64_t heads, int64_t D, bool causal, const void* out, const void* grad_out, const double* lse,
                        double* delta, void* grad_qkv) {
  const int64_t rows = B * heads * T;
  if (rows == 0) return;
  cudaStream_t stream = use_device(device);
  const Dims d = make_dims(B, T, heads, D, causal);
  const size_t shared_q = size_t(T + kAttnThreads) * sizeof(double);
  const size_t shared_k = size_t(2 * T) * sizeof(double);
  check_size(rows, shared_q > shared_k ? shared_q : shared_k);
  if (float64) {
    attention_backward_query_kernel<<<unsigned(rows), kAttnThreads, shared_q, stream>>>(
        static_cast<const double*>(qkv), key_padding_mask, d, static_cast<const double*>(out),
        static_cast<const double*>(grad_out), lse, delta, static_cast<double*>(grad_qkv));
    EMBER_CUDA_LAUNCHED("attention_backward_query_kernel");
    attention_backward_key_kernel<<<unsigned(rows), kAttnThreads, shared_k, stream>>>(
        static_cast<const double*>(qkv), key_padding_mask, d, static_cast<const double*>(grad_out), lse, delta,
        static_cast<double*>(grad_qkv));
  } else {
    attention_backward_query_kernel<<<unsigned(rows), kAttnThreads, shared_q, stream>>>(
        static_cast<const float*>(qkv), key_padding_mask, d, static_cast<const float*>(out),
        static_cast<const float*>(grad_out), lse, delta, static_cast<float*>(grad_qkv));
    EMBER_CUDA_LAUNCHED("attention_backward_query_kernel");
    attention_backward_key_kernel<<<unsigned(rows), kAttnThreads, shared_k, stream>>>(
        static_cast<const float*>(qkv), key_padding_mask, d, static_cast<const float*>(grad_out), lse, delta,
        static_cast<float*>(grad_qkv));
  }
  EMBER_CUDA_LAUNCHED("attention_backward_key_kernel");
}

}  // namespace ember::cuda
