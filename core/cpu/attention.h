// CPU multi-head self-attention, fused per (batch, head), one kernel family for full attention and for
// attention over a band (sliding-window attention, core/attention_band.h). The composed, readable version
// is attention_reference() in core/ops/attention.cpp; the tests compare the two.
//
// Layout: qkv is the fused projection [B, T, 3 * D], D = H * Dh: row t holds q (heads side by
// side), then k, then v. Head h of q is the [T, Dh] strided block at column h * Dh; the GEMMs read
// these blocks in place (row stride 3 D), so no permute or copy is needed, and the output and the
// gradient are written straight into the [B, T, D] and [B, T, 3 D] layouts (attention_layout.h).
// Each (b, h) is one task on one thread, every sum in a fixed order: results do not depend on the
// thread count. Keys after a review's last real token (trailing padding) get probability 0 from
// every query, so the products stop there: a batch padded to T costs each review its own length.
//
// Full attention (no band): the scores, their masks, the softmax and the product with V are computed
// for one head at a time, so that its [T, T] block stays in cache and the [B, H, T, T] intermediates
// of the composed version (scores, masked scores, probabilities, and their gradients) are never
// written out; the probabilities are kept for the backward.
// Forward per (b, h):   P = softmax(scale Q K^T + mask)   O = P V
// Backward per (b, h):  dV = P^T dO   dP = dO V^T   dS = P * (dP - rowsum(dP * P))
//                       dQ = scale dS K   dK = scale dS^T Q
//
// With a band: cost and memory grow with T x window, not T^2, and nothing [T, T] is kept. Per (b, h),
// queries go in blocks of R rows [i0, i1); the keys a block can see are two ranges: the global keys
// below its window [0, a) and its window [lo, hi) = [i0 - W, i1 - 1 + W] (clipped), so a block's scores
// are an [R, a + hi - lo] tile, made by two GEMMs and masked to the exact band; global queries
// (i < global) are blocks whose one range is every key [0, L).
// Forward per block:   S = scale Q K^T (masked)   P = softmax(S)   O = P V   lse = log sum_j e^S (per row)
// Backward per block:  P = e^(S - lse), S recomputed (nothing [T, T] is saved)
//                      dV += P^T dO   dP = dO V^T   dS = P * (dP - rowsum(dO * O))
//                      dQ = scale dS K   dK += scale dS^T Q
// (rowsum(dP * P) = rowsum(dO * O) since O = P V: Dh terms per row instead of a row of the band.)
// Saved for backward: the output and the [B, H, T] log-sum-exps (with qkv and the mask).
#pragma once
#include <cstdint>

#include "core/attention_band.h"
#include "core/tensor.h"

namespace ember::cpu {

struct AttentionForward {
  Tensor out;    // [B, T, D]
  Tensor probs;  // when asked for. Full attention: [B, H, T, T], what the backward reads (and the weights);
                 // bfloat16 when bf16; pair-major [B, H, ceil(T / 2), T, 2] for a bfloat16 qkv
                 // (attention_probs_rows). A band: the dense [B, H, T, T] weights (0 outside the band;
                 // O(T^2): for looking at, not for training), which the backward does not read.
  Tensor stats;  // Full attention: [B, H, T, 2], each row's softmax max and 1 / sum (float32 for bfloat16),
                 // when asked. A band: the rows' log-sum-exps [B, H, T] (-inf for a query that sees no key),
                 // always (the backward reads them).
};

// Whether the backward reads the kept probabilities (full attention) rather than the output and the
// log-sum-exps (a band): what the op keeps for it.
inline bool backward_reads_probs(AttentionBand band) { return !band.on(); }

// qkv: contiguous [B, T, 3 D] floating; key_padding_mask: contiguous bool [B, T] (true = padding)
// or undefined; causal: key j > query i is masked; band: keys outside it are masked (core/attention_band.h).
// A query row whose keys are all masked gets probability 0 on every key: its output row is 0, and no
// gradient flows through it (docs/attention.md).
// bf16 (float32 qkv only): Q K^T and P V (and the backward's four products) take bfloat16 operands and
// sum in float32 (cpu::gemm_bf16); the scores and the softmax are float32, and P V reads that float32 P
// (rounded while packed). The probabilities kept for the backward are rounded to bfloat16: P V rounds
// them so anyway, and the [B, H, T, T] tensor, the step's largest, then costs half the memory and
// half the traffic. The backward widens each head's block to float32 in cache; dS = P (dP - ...) then
// sees P rounded to bfloat16 (relative error <= 2^-9 per element).
// bfloat16 qkv: the same with bfloat16 products throughout (the scores, the softmax and dS in float32),
// a bfloat16 output and gradient, and the probabilities kept as bfloat16, pair-major: rows 2q and 2q + 1 of
// each head's block side by side, so that dV = P^T dO reads P^T in place, unpacked (gemm_bf16_pair_major).
// keep_stats: also return each row's softmax statistics, from which attention_probs rebuilds the
// probabilities without the forward's other passes (what a checkpoint keeps: autograd/recompute_cache.h).
// With a band: the products' operands rounded the same way when bf16 (the softmax, dS and rowsum(dO O) stay
// float32); a bfloat16 qkv is not taken (the op widens it to float32 first); keep_stats is moot (the
// log-sum-exps are always returned).
AttentionForward attention_forward(const Tensor& qkv, int64_t heads, const Tensor& key_padding_mask, bool causal,
                                   AttentionBand band, bool keep_probs, bool bf16 = false, bool keep_stats = false);

// The probabilities attention_forward keeps without a band (the same bits, the same dtype), from the same qkv,
// masks and bf16 and the rows' stats it returned: one product (Q K^T) and one pass over each row, not the max and
// sum passes and P V. A checkpoint's recompute, which takes the output kept from its forward, uses it.
Tensor attention_probs(const Tensor& qkv, int64_t heads, const Tensor& key_padding_mask, bool causal,
                       const Tensor& stats, bool bf16 = false);

// The kept probabilities as [B, H, T, T] rows (a bfloat16 qkv's are pair-major; others are returned as they are).
Tensor attention_probs_rows(const Tensor& probs);

// The gradient of qkv [B, T, 3 D] from the output gradient [B, T, D] (contiguous), what the forward kept
// for it (`kept`: full attention its probs; a band its out and stats, all contiguous) and the forward's
// masks, band and bf16.
Tensor attention_backward(const Tensor& grad_out, const Tensor& qkv, const AttentionForward& kept, int64_t heads,
                          const Tensor& key_padding_mask, bool causal, AttentionBand band, bool bf16 = false);

}  // namespace ember::cpu
