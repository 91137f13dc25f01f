// Sliding-window multi-head self-attention (Longformer's pattern), two ways:
//   window_attention_reference: attention_reference with the band as one more mask (the [B, H, T, T]
//     scores made in full, then hidden): the readable version, and what the tests hold the fused one to.
//   window_attention: on the CPU one op with the fused kernel of core/cpu/window_attention.h, whose cost
//     and memory grow with T x window; nothing [T, T] is saved for backward (it recomputes each block's
//     scores and gets P back from the saved log-sum-exps).
// Query i sees key j iff |i - j| <= window, or i < global, or j < global; then padding and causal as in
// attention(). A query that sees no key gets output 0 and no gradient (docs/attention.md).
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "core/cpu/window_attention.h"
#include "core/ops/op_support.h"
#include "core/precision.h"

namespace ember {
namespace {

void check_window_inputs(const char* op, const Tensor& qkv, int64_t heads, int64_t window, int64_t global,
                         const Tensor& key_padding_mask) {
  EMBER_CHECK(qkv.defined() && qkv.dim() == 3 && qkv.size(2) % 3 == 0, "{}: qkv must be [B, T, 3 * D], got {}", op,
              qkv.defined() ? shape_str(qkv.shape()) : std::string("undefined"));
  EMBER_CHECK(is_floating(qkv.dtype()), "{}: qkv must be float32 or float64, got {}", op, dtype_name(qkv.dtype()));
  const int64_t D = qkv.size(2) / 3;
  EMBER_CHECK(heads > 0 && D % heads == 0, "{}: model width {} is not divisible by heads {}", op, D, heads);
  EMBER_CHECK(window >= 0, "{}: window must be >= 0 (keys on either side of a query), got {}", op, window);
  EMBER_CHECK(global >= 0, "{}: global must be >= 0 (leading tokens that see all), got {}", op, global);
  if (key_padding_mask.defined()) {
    EMBER_CHECK(key_padding_mask.dtype() == Dtype::Bool && key_padding_mask.shape() == Shape({qkv.size(0), qkv.size(1)}),
                "{}: key_padding_mask must be bool [{}, {}], got {} {}", op, qkv.size(0), qkv.size(1),
                dtype_name(key_padding_mask.dtype()), shape_str(key_padding_mask.shape()));
    check_same_device(op, {&qkv, &key_padding_mask});
  }
}

// bool [T, T], true where query i may not see key j because of the band.
Tensor band_mask(int64_t T, int64_t window, int64_t global) {
  Tensor band = Tensor::empty({T, T}, Dtype::Bool);
  bool* hidden = band.data<bool>();
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j) hidden[i * T + j] = i >= global && j >= global && std::abs(i - j) > window;
  return band;
}

// The band on `device`. NOTE: on a GPU, made once per (T, window, global, device) and kept: an upload at
// every forward would be a host-to-device copy inside a CUDA graph's capture, which is refused (the step
// could not be captured; `cuda graphs: with --checkpoint and window attention ...` failed so), and one
// more copy per layer and step besides. The band is read only, never written.
Tensor outside_band(int64_t T, int64_t window, int64_t global, Device device) {
  if (device.is_cpu()) return band_mask(T, window, global);
  static std::mutex mutex;
  static auto* kept = new std::map<std::tuple<int64_t, int64_t, int64_t, int>, Tensor>();  // NOTE: leaked on purpose
  std::lock_guard<std::mutex> lock(mutex);
  Tensor& on_device = (*kept)[{T, window, global, device.index}];
  if (!on_device.defined()) on_device = band_mask(T, window, global).to(device);
  return on_device;
}

}  // namespace

Tensor window_attention_reference(const Tensor& qkv, int64_t heads, int64_t window, int64_t global,
                                  const Tensor& key_padding_mask, bool causal, Tensor* weights) {
  if (qkv.defined() && qkv.dtype() == Dtype::BFloat16)  // bfloat16 in, bfloat16 out, as attention
    return window_attention_reference(widened_from_bf16(qkv), heads, window, global, key_padding_mask, causal, weights)
        .to(Dtype::BFloat16);
  check_window_inputs("window_attention_reference", qkv, heads, window, global, key_padding_mask);
  const int64_t B = qkv.size(0), T = qkv.size(1), D = qkv.size(2) / 3, H = heads, Dh = D / heads;
  Tensor qkv_heads = qkv.view({B, T, 3, H, Dh}).permute({2, 0, 3, 1, 4});  // [3, B, H, T, Dh]
  Tensor q = qkv_heads.select(0, 0), k = qkv_heads.select(0, 1), v = qkv_heads.select(0, 2);
  Tensor scores = matmul(q * (1.0 / std::sqrt(double(Dh))), k.transpose(-2, -1));  // [B, H, T, T]
  // What each query may not see, broadcasting to [B, H, T, T]: outside the band, padding, the future.
  Tensor hidden = outside_band(T, window, global, qkv.device());
  if (key_padding_mask.defined()) hidden = where(hidden, hidden, key_padding_mask.view({B, 1, 1, T}));
  if (causal) {
    Tensor future = gt(arange(T).view({1, T}), arange(T).view({T, 1})).to(qkv.device());
    hidden = where(future, future, hidden);
  }
  // NOTE: as in attention_reference: a query that sees no key keeps finite scores, and its output is zeroed.
  Tensor seen = sum(where(hidden, scalar(0, qkv.dtype(), qkv.device()), scalar(1, qkv.dtype(), qkv.device())), {-1},
                    /*keepdim=*/true);
  Tensor blind = eq(seen, scalar(0, qkv.dtype(), qkv.device()));
  scores = masked_fill(scores, where(blind, scalar(0, Dtype::Bool, qkv.device()), hidden), -INFINITY);
  Tensor probs = softmax(scores, -1);
  Tensor out = masked_fill(matmul(probs, v), blind, 0.0);  // [B, H, T, Dh]
  if (weights != nullptr) {
    NoGradGuard no_grad;
    *weights = masked_fill(probs, blind, 0.0);
  }
  return out.transpose(1, 2).reshape({B, T, D});
}

Tensor window_attention(const Tensor& qkv_in, int64_t heads, int64_t window, int64_t global,
                        const Tensor& key_padding_mask, bool causal, Tensor* weights) {
  if (qkv_in.defined() && qkv_in.dtype() == Dtype::BFloat16) {  // bfloat16 in, bfloat16 out, products in
    MixedPrecisionGuard bf16(Precision::BFloat16);                // bfloat16, as attention()
    return window_attention(widened_from_bf16(qkv_in), heads, window, global, key_padding_mask, causal, weights)
        .to(Dtype::BFloat16);
  }
  check_window_inputs("window_attention", qkv_in, heads, window, global, key_padding_mask);
  // On a GPU: the tiled kernels of cuda/attention_kernels.cu with the band (tiles outside it skipped) when the
  // fused attention is switched on (EMBER_ATTENTION=fused, as attention()), else the composed version.
  if (qkv_in.device().is_cuda()) {
    if (!cuda::attention_fused() || qkv_in.size(2) / 3 / heads > cuda::attention_max_head_dim())
      return window_attention_reference(qkv_in, heads, window, global, key_padding_mask, causal, weights);
    Tensor qkv = qkv_in.detach().contiguous();
    Tensor mask = key_padding_mask.defined() ? key_padding_mask.contiguous() : Tensor();
    KeptResults r = kept_or_computed("window_attention", {qkv.size(0), qkv.size(1), qkv.size(2) / 3}, qkv.dtype(),
                                     weights == nullptr, [&] {  // as on the CPU, below
                                       Tensor lse;
                                       Tensor out = gpu::window_attention_forward(qkv, heads, window, global, mask,
                                                                                  causal, lse, weights);
                                       return KeptResults{out, lse};
                                     });
    Tensor out = r[0], lse = r[1];
    record("window_attention", out, {qkv_in},
           [heads, window, global, causal, qkv = save(qkv), mask = save(mask), lse, out = save(out)](const Tensor& g)
               -> Grads {
             return {gpu::window_attention_backward(g, qkv.get(), out.get(), lse, heads, window, global, mask.get(),
                                                    causal)};
           });
    return out;
  }
  Tensor qkv = qkv_in.contiguous();
  Tensor mask = key_padding_mask.defined() ? key_padding_mask.contiguous() : Tensor();
  const cpu::AttentionWindow band{window, global};
  // Mixed precision (core/precision.h): the products in bfloat16, the softmax in float32, as attention().
  const bool bf16 = product_precision() == Precision::BFloat16 && qkv.dtype() == Dtype::Float32;
  // In a checkpoint's recompute: the output and log-sum-exps its forward kept (autograd/recompute_cache.h),
  // all the backward needs, so the kernel does not run again.
  KeptResults r = kept_or_computed("window_attention", {qkv.size(0), qkv.size(1), qkv.size(2) / 3}, qkv.dtype(),
                                   weights == nullptr, [&] {
                                     Tensor lse;
                                     Tensor out = cpu::window_attention_forward(qkv, heads, band, mask, causal, lse,
                                                                                weights, bf16);
                                     return KeptResults{out, lse};
                                   });
  Tensor out = r[0], lse = r[1];
  record("window_attention", out, {qkv_in},
         [heads, band, causal, qkv = save(qkv), mask = save(mask), lse, out = save(out), bf16](const Tensor& g)
             -> Grads {
           return {cpu::window_attention_backward(g.contiguous(), qkv.get(), out.get(), lse, heads, band, mask.get(),
                                                  causal, bf16)};
         });
  return out;
}

}  // namespace ember
