// The CPU's product kernels (declared in core/kernels.h): linear and the strided batched matmul, on
// the packed GEMM of core/cpu/gemm.h, which reads operands through any strides (a transposed operand
// is swapped strides, never a copy) and adds a linear layer's bias to each tile of y as it is stored
// (no pass of its own). Each product sums in a fixed order: the same result for any thread count.
#include <cstdint>
#include <type_traits>

#include "core/cpu/gemm.h"
#include "core/dtype.h"
#include "core/kernels.h"

namespace ember::cpu {

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
