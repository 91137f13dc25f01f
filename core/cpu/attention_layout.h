// What the fused CPU attention kernels (attention.cpp, window_attention.cpp) share: the qkv layout
// (head h of q / k / v the [T, Dh] blocks at columns h Dh, D + h Dh, 2 D + h Dh of a [B, T, 3 D] tensor,
// row stride 3 D) and what a review's key padding mask tells them.
#pragma once
#include <algorithm>
#include <cstdint>

#include "core/tensor.h"

namespace ember::cpu::attention_layout {

struct Dims {
  int64_t B, T, D, H, Dh;
  int64_t row() const { return 3 * D; }  // row stride of qkv
};

// qkv [B, T, 3 D] with D divisible by heads: the ops have checked it (core/ops/attention.cpp,
// core/ops/window_attention.cpp).
inline Dims dims_of(const Tensor& qkv, int64_t heads) {
  const int64_t D = qkv.size(2) / 3;
  return {qkv.size(0), qkv.size(1), D, heads, D / heads};
}

// Keys past the last unmasked one get probability exactly 0 from every query: the products skip them
// (with trailing padding, a review of L tokens costs L, not T, keys; a review of padding only, 0).
inline int64_t key_extent(const bool* padding, int64_t T) {
  if (padding == nullptr) return T;
  int64_t extent = T;
  while (extent > 0 && padding[extent - 1]) --extent;
  return extent;
}

// The padding mask if a padded key lies before the extent (a hole the mask must still hide), else null:
// right padding, the trainer's, is handled by the extent alone, and the softmax skips the mask pass.
inline const bool* padding_holes(const bool* padding, int64_t extent) {
  return padding != nullptr && std::find(padding, padding + extent, true) != padding + extent ? padding : nullptr;
}

}  // namespace ember::cpu::attention_layout
