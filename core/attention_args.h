// What the fused attention kernels are given (core/kernels.h), on every device: the sizes, the masks'
// rules, and each operand as a strided [B, H, rows, cols] block, so that q, k and v are read where they
// lie (a view of one fused projection, a transposed [B, T, H, Dh] view, a key/value cache's first S rows)
// and the results are written where the op wants them. C++17, free of Tensor: cuda/*.cu include it.
//
//   q [B, H, T, Dh]   k [B, H, S, Dh]   v [B, H, S, Dv]   out [B, H, T, Dv]
//   out = softmax(scale q k^T + mask) v, per (b, h); query i sees key j unless the mask hides it, or
//   (causal) j > i, or (a band) both are past the first `global` positions and |i - j| > window.
// Causal with T != S is aligned top-left, as PyTorch's is_causal: query i sees keys 0 .. i (a query past
// the last key sees every key).
#pragma once
#include <cmath>
#include <cstdint>

#include "core/hd.h"

namespace ember {

// A block of one operand: element (b, h, r, c) at data + b * batch + h * head + r * row + c (strides in
// elements; the last dim is contiguous).
template <typename P>
struct AttentionOperand {
  P data = nullptr;
  int64_t batch = 0, head = 0, row = 0;
  template <typename S>
  EMBER_HD S* at(int64_t b, int64_t h, int64_t r) const {
    return static_cast<S*>(data) + b * batch + h * head + r * row;
  }
};
using AttentionIn = AttentionOperand<const void*>;
using AttentionOut = AttentionOperand<void*>;

// The mask: none, boolean (true = the key may be attended to, as PyTorch's attn_mask; or, for a key padding
// mask, true = hidden), or additive (added to the scaled scores: q's dtype; -inf hides). Its element
// (b, h, i, j) lies at data + b * batch + h * head + i * row + j * col: a stride 0 broadcasts that dim.
enum class MaskKind : int { None = 0, Allows = 1, Hides = 2, Adds = 3 };
struct AttentionMask {
  const void* data = nullptr;
  MaskKind kind = MaskKind::None;
  int64_t batch = 0, head = 0, row = 0, col = 0;
  EMBER_HD bool on() const { return kind != MaskKind::None; }
  EMBER_HD bool additive() const { return kind == MaskKind::Adds; }
  // A boolean mask that is the same for every query (a key padding mask, [B, 1, 1, S]): the kernels read it
  // once per key, skip the keys past the last visible one, and skip key tiles it hides whole.
  EMBER_HD bool per_key() const { return (kind == MaskKind::Allows || kind == MaskKind::Hides) && row == 0; }
  EMBER_HD int64_t offset(int64_t b, int64_t h, int64_t i, int64_t j) const {
    return b * batch + h * head + i * row + j * col;
  }
  // Whether a boolean mask hides key j from query i.
  EMBER_HD bool hides(int64_t b, int64_t h, int64_t i, int64_t j) const {
    const bool value = static_cast<const bool*>(data)[offset(b, h, i, j)];
    return kind == MaskKind::Hides ? value : !value;
  }
  // An additive mask's value at (b, h, i, j), as S (the operands' element type).
  template <typename S>
  EMBER_HD S added(int64_t b, int64_t h, int64_t i, int64_t j) const {
    return static_cast<const S*>(data)[offset(b, h, i, j)];
  }
};

struct AttentionDims {
  int64_t B = 0, H = 0, T = 0, S = 0, Dh = 0, Dv = 0;
  bool causal = false;
  int64_t window = -1, global = 0;  // the band (core/attention_band.h); window < 0: none
  bool custom_scale = false;        // false: scale = 1 / sqrt(Dh), computed in the kernels' type
  double scale = 0;
  bool bf16 = false;  // mixed precision (core/precision.h): the products' operands rounded to bfloat16
};

// The scores' factor in the compute type T: the given scale, or 1 / sqrt(Dh) computed in T.
template <typename T>
EMBER_HD inline T attention_scale(const AttentionDims& d) {
  return d.custom_scale ? T(d.scale) : T(1) / std::sqrt(T(d.Dh));
}

// Everything the forward, the probabilities and the backward kernels read.
struct AttentionArgs {
  AttentionDims dims;
  AttentionIn q, k, v;
  AttentionMask mask;
};

}  // namespace ember
