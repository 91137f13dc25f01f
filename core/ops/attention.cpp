// Multi-head self-attention on a fused QKV projection, two ways:
//   attention_reference: composed from the ops above it (views, matmul, masked_fill, softmax), each
//     with its own backward; the version to read first, and what the tests hold the fused one to.
//   attention: one op with one fused kernel forward and one backward (core/cpu/attention.h), which
//     keeps each head's [T, T] block in cache and never materialises the masked scores.
// Both take qkv [B, T, 3 D] (q | k | v, each H heads of Dh = D / H) and return [B, T, D]:
//   head h: softmax(q_h k_h^T / sqrt(Dh) + masks) v_h, the heads' outputs side by side.
// A query row that sees no key (every key masked) has no softmax: both give it output 0 and send no
// gradient through it (FlashAttention's rule), on the CPU and the GPU alike, where a plain softmax of an
// all -inf row would make it NaN (docs/attention.md says why).
#include <cmath>
#include <cstdint>
#include <string>

#include "core/cpu/attention.h"
#include "core/ops/op_support.h"
#include "core/precision.h"

namespace ember {
namespace {

void check_attention_inputs(const char* op, const Tensor& qkv, int64_t heads, const Tensor& key_padding_mask) {
  EMBER_CHECK(qkv.defined() && qkv.dim() == 3 && qkv.size(2) % 3 == 0, "{}: qkv must be [B, T, 3 * D], got {}", op,
              qkv.defined() ? shape_str(qkv.shape()) : std::string("undefined"));
  EMBER_CHECK(is_real(qkv.dtype()), "{}: qkv must be float32, float64 or bfloat16, got {}", op, dtype_name(qkv.dtype()));
  const int64_t D = qkv.size(2) / 3;
  EMBER_CHECK(heads > 0 && D % heads == 0, "{}: model width {} is not divisible by heads {}", op, D, heads);
  if (key_padding_mask.defined())
    EMBER_CHECK(key_padding_mask.dtype() == Dtype::Bool && key_padding_mask.shape() == Shape({qkv.size(0), qkv.size(1)}),
                "{}: key_padding_mask must be bool [{}, {}], got {} {}", op, qkv.size(0), qkv.size(1),
                dtype_name(key_padding_mask.dtype()), shape_str(key_padding_mask.shape()));
  if (key_padding_mask.defined()) check_same_device(op, {&qkv, &key_padding_mask});
}

}  // namespace

Tensor attention_reference(const Tensor& qkv, int64_t heads, const Tensor& key_padding_mask, bool causal,
                           Tensor* weights) {
  check_attention_inputs("attention_reference", qkv, heads, key_padding_mask);
  const int64_t B = qkv.size(0), T = qkv.size(1), D = qkv.size(2) / 3, H = heads, Dh = D / heads;
  // [B, T, 3D] -> [3, B, H, T, Dh]: q, k, v are strided views into the one projection.
  Tensor qkv_heads = qkv.view({B, T, 3, H, Dh}).permute({2, 0, 3, 1, 4});
  Tensor q = qkv_heads.select(0, 0), k = qkv_heads.select(0, 1), v = qkv_heads.select(0, 2);
  // The scale goes on q [B, H, T, Dh], not on the scores [B, H, T, T]: the same products, T / Dh times fewer
  // multiplies, and no [B, H, T, T] tensor made (and its gradient) for the scaling alone.
  Tensor scores = matmul(q * (1.0 / std::sqrt(double(Dh))), k.transpose(-2, -1));  // [B, H, T, T]
  // Which keys each query may not see (true = hidden), broadcasting to [B, H, T, T]: padding, the future.
  Tensor hidden = key_padding_mask.defined() ? key_padding_mask.view({B, 1, 1, T}) : Tensor();
  if (causal) {
    Tensor future = gt(arange(T).view({1, T}), arange(T).view({T, 1})).to(qkv.device());  // key index > query index
    hidden = hidden.defined() ? where(future, future, hidden) : future;                   // future or padding
  }
  // NOTE: a query that sees no key (every key padding; with the causal mask, every key up to it) has no
  // softmax: all -inf would give NaN. Its output is 0 and no gradient flows from it, as in the fused kernels
  // (docs/attention.md): its scores are left unmasked (finite probabilities), and its output row is zeroed.
  Tensor blind;  // bool [B, 1, T or 1, 1]: the queries that see no key
  if (hidden.defined()) {
    Tensor seen = sum(where(hidden, scalar(0, qkv.dtype(), qkv.device()), scalar(1, qkv.dtype(), qkv.device())), {-1},
                      /*keepdim=*/true);
    blind = eq(seen, scalar(0, qkv.dtype(), qkv.device()));
    scores = masked_fill(scores, where(blind, scalar(0, Dtype::Bool, qkv.device()), hidden), -INFINITY);
  }
  Tensor probs = softmax(scores, -1);
  Tensor out = matmul(probs, v);  // [B, H, T, Dh]
  if (blind.defined()) out = masked_fill(out, blind, 0.0);
  if (weights != nullptr) {
    NoGradGuard no_grad;
    *weights = blind.defined() ? masked_fill(probs, blind, 0.0) : probs.detach();
  }
  return out.transpose(1, 2).reshape({B, T, D});  // [B, H, T, Dh] -> [B, T, H, Dh] -> [B, T, D]
}

Tensor attention(const Tensor& qkv_in, int64_t heads, const Tensor& key_padding_mask, bool causal, Tensor* weights) {
  check_attention_inputs("attention", qkv_in, heads, key_padding_mask);
  // On a GPU: the tiled fused kernels of cuda/attention_kernels.cu (the default; no [B, H, T, T] tensor is
  // written; head sizes up to 128), or with EMBER_ATTENTION=composed the composed version (cuBLAS
  // strided-batched GEMMs, the masked_fill and softmax kernels). The fused one became the default once it had
  // passed its tests on a GPU and run faster there (docs/cuda.md).
  const bool fused_on_gpu = qkv_in.device().is_cuda() && cuda::attention_fused() &&
                            qkv_in.size(2) / 3 / heads <= cuda::attention_max_head_dim();
  // A bfloat16 qkv: the fused kernels read it and write a bfloat16 output themselves (below), as the CPU's
  // do; the composed version runs on the widened values in the scope, its output rounded back.
  if (qkv_in.dtype() == Dtype::BFloat16 && qkv_in.device().is_cuda() && !fused_on_gpu) {
    MixedPrecisionGuard bf16(Precision::BFloat16);
    return attention(qkv_in.to(Dtype::Float32), heads, key_padding_mask, causal, weights).to(Dtype::BFloat16);
  }
  // Mixed precision (core/precision.h): the products in bfloat16, the softmax in float32.
  const bool bf16 = product_precision() == Precision::BFloat16 && qkv_in.dtype() == Dtype::Float32;
  if (qkv_in.device().is_cuda()) {
    if (!fused_on_gpu) return attention_reference(qkv_in, heads, key_padding_mask, causal, weights);
    Tensor qkv = qkv_in.detach().contiguous();
    Tensor mask = key_padding_mask.defined() ? key_padding_mask.contiguous() : Tensor();
    // In a checkpoint's recompute: the output and log-sum-exps its forward kept, all the backward needs
    // (autograd/recompute_cache.h).
    auto forward = [&] {
      Tensor lse;
      Tensor out = gpu::attention_forward(qkv, heads, mask, causal, lse, weights, bf16);
      return KeptResults{out, lse};
    };
    KeptResults r = kept_or_computed("attention", {qkv.size(0), qkv.size(1), qkv.size(2) / 3}, qkv.dtype(),
                                     weights == nullptr, forward);
    Tensor out = r[0], lse = r[1];
    record("attention", out, {qkv_in},
           [heads, causal, qkv = save(qkv), mask = save(mask), lse, out = save(out), bf16](const Tensor& g) -> Grads {
             return {gpu::attention_backward(g, qkv.get(), out.get(), lse, heads, mask.get(), causal, bf16)};
           });
    return out;
  }
  Tensor qkv = qkv_in.contiguous();
  Tensor mask = key_padding_mask.defined() ? key_padding_mask.contiguous() : Tensor();
  const bool needs_grad = any_requires_grad({qkv_in});
  // In a checkpoint's recompute: the output and the rows' softmax statistics its forward kept
  // (autograd/recompute_cache.h); the probabilities come back from those in one pass over the scores.
  cpu::AttentionForward forward;
  bool taken = false;
  KeptResults r = kept_or_computed("attention", {qkv.size(0), qkv.size(1), qkv.size(2) / 3}, qkv.dtype(),
                                   weights == nullptr, [&] {
                                     forward = cpu::attention_forward(qkv, heads, mask, causal,
                                                                      needs_grad || weights != nullptr, bf16,
                                                                      keeping_results());
                                     return KeptResults{forward.out, forward.stats};
                                   }, &taken);
  if (taken) {
    forward.out = r[0];
    if (needs_grad) forward.probs = cpu::attention_probs(qkv, heads, mask, causal, r[1], bf16);
  }
  if (weights != nullptr)  // qkv's dtype, float32 for bfloat16 (in bfloat16: the kept probabilities, rounded)
    *weights = cpu::attention_probs_rows(forward.probs).to(qkv.dtype() == Dtype::BFloat16 ? Dtype::Float32 : qkv.dtype());
  // NOTE: the probabilities are saved too: `weights` hands them to the caller, who could change them.
  record("attention", forward.out, {qkv_in},
         [heads, qkv = save(qkv), probs = save(forward.probs), mask = save(mask), bf16](const Tensor& g) -> Grads {
           return {cpu::attention_backward(g.contiguous(), qkv.get(), probs.get(), heads, mask.get(), bf16)};
         });
  return forward.out;
}

}  // namespace ember
