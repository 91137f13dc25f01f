// The mixed-precision GEMM on the GPU: bfloat16 operands multiplied, summed in float32.
// Each operand (float32, rounded to nearest even as __float2bfloat16_rn does, or bfloat16, copied) goes
// into a compact row-major bfloat16 copy by one gather kernel, read through any strides; then one
// cublasGemmStridedBatchedEx with CUDA_R_16BF inputs, a CUDA_R_32F C and CUBLAS_COMPUTE_32F (tensor cores
// on a GPU). The row-major to column-major mapping is cuda/blas.cu's: C^T = B^T A^T, B first, M and N
// swapped. gemm_bf16_typed also writes a bfloat16 C: cuBLAS writes it directly (CUDA_R_16BF C, each entry
// the float32 sum rounded once), a bias folded in as beta = 1 on C filled with the bias rounded to bfloat16.
// On it, the GPU's mixed-precision linear of core/kernels.h (operands as they are; db as the ops' sum).
// NOTE: compiled by CI with nvcc and run on the CPU emulator, not yet on a GPU.
#include <cublas_v2.h>

#include <cstddef>
#include <cstdint>
#include <mutex>

#include "core/bfloat16.h"
#include "core/cuda_ops.h"
#include "core/kernels.h"
#include "cuda/check.h"
#include "cuda/dispatch.h"
#include "cuda/launch.h"
#include "cuda/scratch.h"

namespace ember::cuda {
namespace {

// out [batch, rows, cols] (compact, row-major) = in(b, r, c) = in[b * bs + r * rs + c * cs]: a float32
// operand rounded (ember::BFloat16 rounds as __float2bfloat16_rn: nearest even, NaN kept), a bfloat16 one
// copied exactly. A grid-stride loop, a thread per element of out.
template <typename S>
__global__ void to_compact_bf16(const S* in, int64_t bs, int64_t rs, int64_t cs, int64_t rows, int64_t cols,
                                int64_t n, BFloat16* out) {
  EMBER_CUDA_LOOP(i, n) {
    const int64_t c = i % cols, r = (i / cols) % rows, b = i / (cols * rows);
    out[i] = BFloat16(in[b * bs + r * rs + c * cs]);
  }
}

// A compact float32 [rows, cols] block set to the bias on every row.
__global__ void start_from_bias(float* out, const float* bias, int64_t cols, int64_t n) {
  EMBER_CUDA_LOOP(i, n) out[i] = bias[i % cols];
}

// A bfloat16 [rows, cols] block (rows ld apart) set to the bias, rounded to bfloat16, on every row.
__global__ void start_from_bias_bf16(BFloat16* out, int64_t ld, const float* bias, int64_t cols, int64_t n) {
  EMBER_CUDA_LOOP(i, n) out[(i / cols) * ld + i % cols] = BFloat16(bias[i % cols]);
}

cublasHandle_t bf16_handle(int device) {
  static cublasHandle_t handles[16] = {};
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (handles[device] == nullptr) EMBER_CUBLAS_CHECK(cublasCreate(&handles[device]));
  return handles[device];
}

}  // namespace

void gemm_bf16(int device, int64_t batch, int64_t M, int64_t N, int64_t K, const float* A, int64_t a_rs,
               int64_t a_cs, int64_t a_bs, const float* B, int64_t b_rs, int64_t b_cs, int64_t b_bs, double beta,
               float* C, int64_t ldc, int64_t c_bs) {
  if (batch == 0 || M == 0 || N == 0) return;
  cudaStream_t stream = use_device(device);
  cublasHandle_t handle = bf16_handle(device);
  EMBER_CUBLAS_CHECK(cublasSetStream(handle, stream));
  // A broadcast operand (batch stride 0) is rounded once and read with stride 0.
  const int64_t a_count = a_bs == 0 ? 1 : batch, b_count = b_bs == 0 ? 1 : batch;
  const int64_t a_n = a_count * M * K, b_n = b_count * K * N;
  Scratch a16(device, size_t(a_n > 0 ? a_n : 1) * sizeof(BFloat16));
  Scratch b16(device, size_t(b_n > 0 ? b_n : 1) * sizeof(BFloat16));
  auto* a_bf = static_cast<BFloat16*>(a16.ptr);
  auto* b_bf = static_cast<BFloat16*>(b16.ptr);
  if (a_n > 0) {
    to_compact_bf16<<<blocks_for(a_n), kThreads, 0, stream>>>(A, a_bs, a_rs, a_cs, M, K, a_n, a_bf);
    EMBER_CUDA_LAUNCHED("to_compact_bf16");
  }
  if (b_n > 0) {
    to_compact_bf16<<<blocks_for(b_n), kThreads, 0, stream>>>(B, b_bs, b_rs, b_cs, K, N, b_n, b_bf);
    EMBER_CUDA_LAUNCHED("to_compact_bf16");
  }
  // C^T (N x M) = B^T (N x K) A^T (K x M): the compact copies are row-major, so ld = K for A, N for B.
  const float alpha = 1.0f, beta_f = float(beta);
  const int ld_a = int(K > 1 ? K : 1), ld_b = int(N);
  EMBER_CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, int(N), int(M), int(K), &alpha, b_bf,
                                                CUDA_R_16BF, ld_b, b_bs == 0 ? 0 : K * N, a_bf, CUDA_R_16BF, ld_a,
                                                a_bs == 0 ? 0 : M * K, &beta_f, C, CUDA_R_32F, int(ldc), c_bs,
                                                int(batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void gemm_bf16_typed(int device, int64_t M, int64_t N, int64_t K, const void* A, int a_dtype, int64_t a_rs,
                     int64_t a_cs, const void* B, int b_dtype, int64_t b_rs, int64_t b_cs, void* C, int c_dtype,
                     int64_t ldc, const float* bias) {
  if (M == 0 || N == 0) return;
  for (int dtype : {a_dtype, b_dtype, c_dtype})
    if (dtype != kFloat32 && dtype != kBFloat16)
      raise_message("gemm_bf16: operands and result must be float32 or bfloat16 on CUDA");
  cudaStream_t stream = use_device(device);
  cublasHandle_t handle = bf16_handle(device);
  EMBER_CUBLAS_CHECK(cublasSetStream(handle, stream));
  const int64_t a_n = M * K, b_n = K * N;
  // A bfloat16 operand that is already compact and row-major (a bf16 linear's activations, its gradients)
  // is read in place; any other goes into a compact row-major bfloat16 copy of n = rows * cols entries.
  auto in_place = [](int dtype, int64_t rs, int64_t cs, int64_t rows, int64_t cols) {
    return dtype == kBFloat16 && (cs == 1 || cols <= 1) && (rs == cols || rows <= 1);
  };
  const bool a_in_place = in_place(a_dtype, a_rs, a_cs, M, K), b_in_place = in_place(b_dtype, b_rs, b_cs, K, N);
  Scratch a16(device, a_in_place || a_n == 0 ? 1 : size_t(a_n) * sizeof(BFloat16));
  Scratch b16(device, b_in_place || b_n == 0 ? 1 : size_t(b_n) * sizeof(BFloat16));
  auto operand = [&](const void* in, int dtype, int64_t rs, int64_t cs, int64_t rows, int64_t cols, int64_t n,
                     bool as_is, void* copy) -> const void* {
    if (as_is) return in;
    if (n == 0) return copy;
    dispatch_bf16_or_float(dtype, [&](auto tag) {
      using S = decltype(tag);
      to_compact_bf16<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const S*>(in), 0, rs, cs, rows, cols, n,
                                                              static_cast<BFloat16*>(copy));
    });
    EMBER_CUDA_LAUNCHED("to_compact_bf16");
    return copy;
  };
  const void* a_bf = operand(A, a_dtype, a_rs, a_cs, M, K, a_n, a_in_place, a16.ptr);
  const void* b_bf = operand(B, b_dtype, b_rs, b_cs, K, N, b_n, b_in_place, b16.ptr);
  // The sums start from the bias (beta = 1 on C set to it): float32 as it is; a bfloat16 C holds it rounded
  // to bfloat16, so y = round(sum + round(bias)), one more rounding than the CPU's round(sum + bias): at
  // most u |bias| more (docs/precision.md). cuBLAS rounds each bfloat16 entry once from its float32 sum.
  const bool rounded = c_dtype == kBFloat16;
  float beta = 0.0f;
  if (bias != nullptr) {
    if (rounded) {
      start_from_bias_bf16<<<blocks_for(M * N), kThreads, 0, stream>>>(static_cast<BFloat16*>(C), ldc, bias, N, M * N);
      EMBER_CUDA_LAUNCHED("start_from_bias_bf16");
    } else {
      if (ldc != N) raise_message("gemm_bf16: a float32 C with a bias must be compact (ldc = N)");
      start_from_bias<<<blocks_for(M * N), kThreads, 0, stream>>>(static_cast<float*>(C), bias, N, M * N);
      EMBER_CUDA_LAUNCHED("start_from_bias");
    }
    beta = 1.0f;
  }
  // C^T (N x M) = B^T (N x K) A^T (K x M): the compact copies are row-major, so ld = K for A, N for B.
  const float alpha = 1.0f;
  // (A batch of one: the strided-batched call is the one cuda/cublas_loader.cpp already resolves.)
  EMBER_CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, int(N), int(M), int(K), &alpha, b_bf,
                                                CUDA_R_16BF, int(N), 0, a_bf, CUDA_R_16BF, int(K > 1 ? K : 1), 0, &beta,
                                                C, rounded ? CUDA_R_16BF : CUDA_R_32F, int(ldc), 0, 1,
                                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

bool linear_bf16_rounds_first(const On&) { return false; }

void linear_forward_bf16(const On& on, const void* x, const void* w, int w_dtype, const float* bias, void* y,
                         int64_t rows, int64_t K, int64_t N) {
  // W^T(k, n) = W[n, k]: the weight read with swapped strides.
  gemm_bf16_typed(on.device, rows, N, K, x, on.dtype, K, 1, w, w_dtype, 1, K, y, kBFloat16, N, bias);
}

namespace {
// db's reduction as the sum op lays out g [rows, N] over dim 0 (autograd/ops/reduce.cpp's reduce_layout,
// size-1 dims dropped): [outer, R, inner].
struct ColumnSums {
  int64_t outer, R, inner;
};
ColumnSums column_sums_layout(int64_t rows, int64_t N) {
  return rows == 1 ? ColumnSums{N, 1, 1} : ColumnSums{1, rows, N};
}
}  // namespace

int64_t linear_bf16_scratch(const On& on, int64_t rows, int64_t N) {
  const ColumnSums l = column_sums_layout(rows, N);
  return rows * N + reduce_scratch(On{on.device, kFloat32}, l.outer, l.R, l.inner);
}

void linear_backward_bf16(const On& on, const void* g, const void* x, const void* w, int w_dtype, void* dx,
                          int dx_dtype, float* dw, float* db, int64_t rows, int64_t K, int64_t N, float* scratch) {
  if (dx != nullptr)  // dx [rows, K] = g [rows, N] W [N, K]
    gemm_bf16_typed(on.device, rows, K, N, g, kBFloat16, N, 1, w, w_dtype, K, 1, dx, dx_dtype, K, nullptr);
  if (dw != nullptr)  // dW [N, K] = g^T [N, rows] x [rows, K]
    gemm_bf16_typed(on.device, N, K, rows, g, kBFloat16, 1, N, x, on.dtype, K, 1, dw, kFloat32, K, nullptr);
  if (db == nullptr) return;
  // db = sum(g.to(float32), {0}) as the ops would run it: g widened into scratch (one copy), then summed
  // over rows by the reduction kernel (in double, a fixed order), its own scratch after the widened g.
  Shape8 shape;
  shape.ndim = 2;
  shape.size[0] = rows, shape.size[1] = N;
  Operand to, from;
  to.data = scratch, from.data = const_cast<void*>(g);
  to.dtype = kFloat32, from.dtype = kBFloat16;
  to.stride[0] = from.stride[0] = rows == 1 ? 0 : N;
  to.stride[1] = from.stride[1] = N == 1 ? 0 : 1;
  copy(on.device, shape, to, from);
  const ColumnSums l = column_sums_layout(rows, N);
  reduce(On{on.device, kFloat32}, ReduceKind::Sum, scratch, db, l.outer, l.R, l.inner, scratch + rows * N);
}

}  // namespace ember::cuda
