// What the fused CPU attention kernels (attention.cpp: full, and over a band) share: what a key padding
// mask tells them, and their products' two precisions. Their operands' layout is core/attention_args.h's.
#pragma once
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/cpu/gemm.h"

namespace ember::cpu::attention_layout {

// Keys past the last unmasked one get probability exactly 0 from every query: the products skip them
// (with trailing padding, a review of L tokens costs L, not S, keys; a review of padding only, 0).
inline int64_t key_extent(const bool* padding, int64_t S) {
  if (padding == nullptr) return S;
  int64_t extent = S;
  while (extent > 0 && padding[extent - 1]) --extent;
  return extent;
}

// The padding mask if a padded key lies before the extent (a hole the mask must still hide), else null:
// right padding, the trainer's, is handled by the extent alone, and the softmax skips the mask pass.
inline const bool* padding_holes(const bool* padding, int64_t extent) {
  return padding != nullptr && std::find(padding, padding + extent, true) != padding + extent ? padding : nullptr;
}

// One product of a kernel: cpu::gemm, or, when `bf16` (the mixed-precision scope, core/precision.h),
// cpu::gemm_bf16: float32 operands rounded to bfloat16 while packed, the sums in float32.
template <typename T>
void product(bool bf16, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t a_rs, int64_t a_cs, const T* B,
             int64_t b_rs, int64_t b_cs, T beta, T* C, int64_t c_rs) {
  if constexpr (std::is_same_v<T, float>)
    if (bf16) return gemm_bf16(M, N, K, alpha, A, a_rs, a_cs, B, b_rs, b_cs, beta, C, c_rs);
  gemm(M, N, K, alpha, A, a_rs, a_cs, B, b_rs, b_cs, beta, C, c_rs);
}

}  // namespace ember::cpu::attention_layout
