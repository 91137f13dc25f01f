// CPU sliding-window multi-head self-attention (Longformer's pattern), fused per (batch, head): cost and
// memory grow with T x window, not T^2.
//
// Who sees whom: query i sees key j iff |i - j| <= window, or i < global, or j < global (the first
// `global` tokens attend to, and are attended by, every token), and key j is not padding, and, when
// causal, j <= i. window >= T - 1 is full attention. The composed version (full attention with this
// band as a mask) is window_attention_reference() in core/ops/window_attention.cpp; the tests compare.
//
// Layout as core/cpu/attention.h: qkv [B, T, 3 D], head h of q/k/v the [T, Dh] blocks at columns
// h Dh, D + h Dh, 2 D + h Dh (row stride 3 D), read in place.
//
// Per (b, h), queries go in blocks of R rows [i0, i1); the keys a block can see are two ranges:
//   the global keys below its window [0, a) and its window [lo, hi) = [i0 - W, i1 - 1 + W] (clipped),
// so a block's scores are an [R, a + hi - lo] tile, made by two GEMMs and masked to the exact band;
// global queries (i < global) are blocks whose one range is every key [0, L).
// Forward per block:   S = scale Q K^T (masked)   P = softmax(S)   O = P V   lse = log sum_j e^S (per row)
// Backward per block:  P = e^(S - lse), S recomputed (nothing [T, T] is saved)
//                      dV += P^T dO   dP = dO V^T   dS = P * (dP - rowsum(dO * O))
//                      dQ = scale dS K   dK += scale dS^T Q
// (rowsum(dP * P) = rowsum(dO * O) since O = P V: Dh terms per row instead of a row of the band.)
// Each (b, h) is one task on one thread, blocks in order: sums in a fixed order, results independent of
// the thread count. Saved for backward: qkv, the mask, the output and the [B, H, T] log-sum-exps.
// `bf16` (float32 only; the mixed-precision scope): every product's operands rounded to bfloat16 while
// packed, sums in float32 (cpu::gemm_bf16), as the full attention kernel's; the softmax, dS and rowsum(dO O)
// stay float32.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace ember::cpu {

struct AttentionWindow {
  int64_t window;  // keys within `window` positions on either side (>= 0)
  int64_t global;  // the first `global` tokens see and are seen by all (>= 0)
};

// qkv: contiguous [B, T, 3 D] floating; key_padding_mask: contiguous bool [B, T] or undefined. Returns
// out [B, T, D] and sets `lse` to the rows' log-sum-exps [B, H, T] (-inf for a query that sees no key,
// whose output is 0); `probs`, when not null, receives the dense [B, H, T, T] probabilities (0 outside
// the band; O(T^2): for looking at, not for training).
Tensor window_attention_forward(const Tensor& qkv, int64_t heads, AttentionWindow window,
                                const Tensor& key_padding_mask, bool causal, Tensor& lse, Tensor* probs,
                                bool bf16 = false);

// The gradient of qkv [B, T, 3 D] from the output gradient [B, T, D], the forward's output and lse (all
// contiguous).
Tensor window_attention_backward(const Tensor& grad_out, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                 int64_t heads, AttentionWindow window, const Tensor& key_padding_mask, bool causal,
                                 bool bf16 = false);

}  // namespace ember::cpu
