// Multi-head self-attention on a fused QKV projection, two ways:
//   attention_reference: composed from the ops above it (views, matmul, masked_fill, softmax), each
//     with its own backward; the version to read first, and what the tests hold the fused one to.
//   attention: one op with one fused kernel forward and one backward (core/cpu/attention.h), which
//     keeps each head's [T, T] block in cache and never materialises the masked scores.
// Both take qkv [B, T, 3 D] (q | k | v, each H heads of Dh = D / H) and return [B, T, D]:
//   head h: softmax(q_h k_h^T / sqrt(Dh) + masks) v_h, the heads' outputs side by side.
#include <cmath>

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
  Tensor scores = matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(Dh)));  // [B, H, T, T]
  if (key_padding_mask.defined()) scores = masked_fill(scores, key_padding_mask.view({B, 1, 1, T}), -INFINITY);
  if (causal) {
    Tensor future = gt(arange(T).view({1, T}), arange(T).view({T, 1})).to(qkv.device());  // key index > query index
    scores = masked_fill(scores, future, -INFINITY);
  }
  Tensor probs = softmax(scores, -1);
  if (weights != nullptr) *weights = probs.detach();
  return matmul(probs, v).transpose(1, 2).reshape({B, T, D});  // [B, H, T, Dh] -> [B, T, H, Dh] -> [B, T, D]
}

Tensor attention(const Tensor& qkv_in, int64_t heads, const Tensor& key_padding_mask, bool causal, Tensor* weights) {
  check_attention_inputs("attention", qkv_in, heads, key_padding_mask);
  if (qkv_in.dtype() == Dtype::BFloat16) {  // bfloat16 in, bfloat16 out: float32 values, products in bfloat16
    MixedPrecisionGuard bf16(Precision::BFloat16);
    return attention(qkv_in.to(Dtype::Float32), heads, key_padding_mask, causal, weights).to(Dtype::BFloat16);
  }
  // Mixed precision (core/precision.h): the products in bfloat16, the softmax in float32.
  const bool bf16 = product_precision() == Precision::BFloat16 && qkv_in.dtype() == Dtype::Float32;
  // On a GPU: the tiled fused kernels of cuda/attention_kernels.cu when switched on
  // (EMBER_ATTENTION=fused; no [B, H, T, T] tensor is written; head sizes up to 128), else the
  // composed version (cuBLAS strided-batched GEMMs, the masked_fill and softmax kernels). The
  // composed one is the default until the fused one has been checked on a GPU (docs/cuda.md).
  if (qkv_in.device().is_cuda()) {
    if (!cuda::attention_fused() || qkv_in.size(2) / 3 / heads > cuda::attention_max_head_dim())
      return attention_reference(qkv_in, heads, key_padding_mask, causal, weights);
    Tensor qkv = qkv_in.detach().contiguous();
    Tensor mask = key_padding_mask.defined() ? key_padding_mask.contiguous() : Tensor();
    Tensor lse;
    Tensor out = gpu::attention_forward(qkv, heads, mask, causal, lse, weights);
    record("attention", out, {qkv_in},
           [heads, causal, qkv, mask, lse, out_saved = out.detach()](const Tensor& g) -> Grads {
             return {gpu::attention_backward(g, qkv, out_saved, lse, heads, mask, causal)};
           });
    return out;
  }
  Tensor qkv = qkv_in.contiguous();
  Tensor mask = key_padding_mask.defined() ? key_padding_mask.contiguous() : Tensor();
  const bool needs_grad = any_requires_grad({qkv_in});
  cpu::AttentionForward forward = cpu::attention_forward(qkv, heads, mask, causal, needs_grad || weights != nullptr, bf16);
  if (weights != nullptr) *weights = forward.probs;
  // NOTE: detached views of the saved tensors, so that the node does not own its own output's graph.
  record("attention", forward.out, {qkv_in},
         [heads, qkv = qkv.detach(), probs = forward.probs, mask, bf16](const Tensor& g) -> Grads {
           return {cpu::attention_backward(g.contiguous(), qkv, probs, heads, mask, bf16)};
         });
  return forward.out;
}

}  // namespace ember
