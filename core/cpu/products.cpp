// The CPU's product kernels (declared in core/kernels.h): linear and the strided batched matmul, on
// the packed GEMM of core/cpu/gemm.h, which reads operands through any strides (a transposed operand
// is swapped strides, never a copy) and adds a linear layer's bias to each tile of y as it is stored
// (no pass of its own). Each product sums in a fixed order: the same result for any thread count.
// The mixed-precision linear takes its operands as bfloat16 (the op rounds them first: half the bytes
// kept for the backward, read in place by gemm_bf16) and adds the float32 bias before the one rounding.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/bfloat16.h"
#include "core/cpu/gemm.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/kernels.h"
#include "core/parallel.h"

namespace ember::cpu {

namespace {

// db [N] (float32) = the column sums of a bfloat16 g [rows, N]: blocks of 256 rows are summed on any
// thread, then the blocks in order: the same result for any number of threads.
void column_sums(const BFloat16* data, int64_t rows, int64_t N, float* out) {
  constexpr int64_t kBlock = 256;
  const int64_t blocks = (rows + kBlock - 1) / kBlock;
  std::vector<float> partial(size_t(blocks * N), 0.0f);
  parallel_for(0, blocks, 1, [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) {
      float* sums = partial.data() + b * N;
      for (int64_t r = b * kBlock; r < std::min(rows, (b + 1) * kBlock); ++r)
        for (int64_t n = 0; n < N; ++n) sums[n] += float(data[r * N + n]);
    }
  });
  for (int64_t n = 0; n < N; ++n) out[n] = 0.0f;
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t n = 0; n < N; ++n) out[n] += partial[size_t(b * N + n)];
}

}  // namespace

void linear_forward(const On& on, const void* x, const void* w, const void* bias, void* y, int64_t rows, int64_t K,
                    int64_t N) {
  dispatch_floating(Dtype(on.dtype), "linear", [&](auto tag) {
    using T = typename decltype(tag)::type;
    // W^T(k, n) = W[n, k]: the weight read with swapped strides.
    gemm(rows, N, K, T(1), static_cast<const T*>(x), K, 1, static_cast<const T*>(w), 1, K, T(0), static_cast<T*>(y),
         N, static_cast<const T*>(bias));
  });
}

void linear_backward(const On& on, const void* g, const void* x, const void* w, void* dx, void* dw, int64_t rows,
                     int64_t K, int64_t N) {
  dispatch_floating(Dtype(on.dtype), "linear", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* gd = static_cast<const T*>(g);
    if (dx != nullptr)  // dx [rows, K] = g [rows, N] W [N, K]
      gemm(rows, K, N, T(1), gd, N, 1, static_cast<const T*>(w), K, 1, T(0), static_cast<T*>(dx), K);
    if (dw != nullptr)  // dW [N, K] = g^T [N, rows] x [rows, K]; element (n, r) of g^T is g[r, n]
      gemm(N, K, rows, T(1), gd, 1, N, static_cast<const T*>(x), K, 1, T(0), static_cast<T*>(dw), K);
  });
}

bool linear_bf16_rounds_first(const On&) { return true; }

void linear_forward_bf16(const On& on, const void* x, const void* w, int w_dtype, const float* bias, void* y,
                         int64_t rows, int64_t K, int64_t N) {
  EMBER_CHECK(on.dtype == int(Dtype::BFloat16) && w_dtype == int(Dtype::BFloat16),
              "linear: the CPU's mixed-precision kernel takes bfloat16 operands (linear_bf16_rounds_first)");
  // W^T(k, n) = W[n, k]: the weight read with swapped strides.
  gemm_bf16(rows, N, K, 1.0f, static_cast<const BFloat16*>(x), K, 1, static_cast<const BFloat16*>(w), 1, K,
            static_cast<BFloat16*>(y), N, bias);
}

int64_t linear_bf16_scratch(const On&, int64_t, int64_t) { return 0; }

void linear_backward_bf16(const On& on, const void* g, const void* x, const void* w, int w_dtype, void* dx,
                          int dx_dtype, float* dw, float* db, int64_t rows, int64_t K, int64_t N, float*) {
  EMBER_CHECK((x == nullptr || on.dtype == int(Dtype::BFloat16)) && (w == nullptr || w_dtype == int(Dtype::BFloat16)),
              "linear: the CPU's mixed-precision kernel takes bfloat16 operands (linear_bf16_rounds_first)");
  const BFloat16* gd = static_cast<const BFloat16*>(g);
  const BFloat16* wd = static_cast<const BFloat16*>(w);
  if (dx != nullptr && dx_dtype == int(Dtype::BFloat16))  // dx [rows, K] = g [rows, N] W [N, K]
    gemm_bf16(rows, K, N, 1.0f, gd, N, 1, wd, K, 1, static_cast<BFloat16*>(dx), K);
  else if (dx != nullptr)
    gemm_bf16(rows, K, N, 1.0f, gd, N, 1, wd, K, 1, 0.0f, static_cast<float*>(dx), K);
  if (dw != nullptr)  // dW [N, K] = g^T [N, rows] x [rows, K]; element (n, r) of g^T is g[r, n]
    gemm_bf16(N, K, rows, 1.0f, gd, 1, N, static_cast<const BFloat16*>(x), K, 1, 0.0f, dw, K);
  if (db != nullptr) column_sums(gd, rows, N, db);
}

void matmul(const On& on, bool bf16, int64_t batch, int64_t M, int64_t N, int64_t K, const void* A, int64_t a_bs,
            int64_t a_rs, int64_t a_cs, const void* B, int64_t b_bs, int64_t b_rs, int64_t b_cs, void* C, int64_t c_bs,
            int64_t ldc) {
  dispatch_floating(Dtype(on.dtype), "matmul", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* a = static_cast<const T*>(A);
    const T* b = static_cast<const T*>(B);
    T* c = static_cast<T*>(C);
    if constexpr (std::is_same_v<T, float>) {
      if (bf16 && batch == 1) return gemm_bf16(M, N, K, 1.0f, a, a_rs, a_cs, b, b_rs, b_cs, 0.0f, c, ldc);
      if (bf16)
        return gemm_bf16_batched(batch, M, N, K, 1.0f, a, a_bs, a_rs, a_cs, b, b_bs, b_rs, b_cs, 0.0f, c, c_bs, ldc);
    }
    if (batch == 1) gemm(M, N, K, T(1), a, a_rs, a_cs, b, b_rs, b_cs, T(0), c, ldc);
    else gemm_batched(batch, M, N, K, T(1), a, a_bs, a_rs, a_cs, b, b_bs, b_rs, b_cs, T(0), c, c_bs, ldc);
  });
}

// Any strides: the packing reads them (an operand with no unit stride is copied by the op first).
// Outer batch dims are walked by the op, a call per index: a call costs next to nothing on the host.
MatmulReads matmul_reads(const On&) { return MatmulReads{false, false}; }

}  // namespace ember::cpu
