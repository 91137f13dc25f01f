// Multi-head self-attention on a fused QKV projection, with an optional band (sliding-window attention,
// Longformer's pattern: core/attention_band.h), two ways:
//   attention_reference: composed from the ops above it (views, matmul, masked_fill, softmax), each
//     with its own backward; the band is one more mask on the [B, H, T, T] scores, made in full. The
//     version to read first, and what the tests hold the fused one to.
//   attention: one op, one fused kernel forward and one backward, on the device's kernels (core/kernels.h):
//     the CPU's (core/cpu/attention.cpp: full attention keeps each head's [T, T] block in cache and never materialises
//     the masked scores; over a band cost and memory grow with T x window and nothing [T, T] is saved) or
//     the GPU's tiled ones (cuda/attention_kernels.cu, tiles outside the band skipped).
// Both take qkv [B, T, 3 D] (q | k | v, each H heads of Dh = D / H) and return [B, T, D]:
//   head h: softmax(q_h k_h^T / sqrt(Dh) + masks) v_h, the heads' outputs side by side.
// Query i sees key j unless j is padding, or (causal) j > i, or (a band) both are past the first `global`
// tokens and more than `window` apart. window_attention(...) is attention with a band.
// A query row that sees no key (every key masked) has no softmax: both give it output 0 and send no
// gradient through it (FlashAttention's rule), on the CPU and the GPU alike, where a plain softmax of an
// all -inf row would make it NaN (docs/attention.md says why).
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "core/ops/op_support.h"
#include "core/precision.h"

namespace ember {
namespace {

// The op's name, in errors and on its graph node: with a band, "window_attention".
const char* op_name(const char* full, const char* banded, AttentionBand band) { return band.on() ? banded : full; }

void check_attention_inputs(const char* op, const Tensor& qkv, int64_t heads, const Tensor& key_padding_mask,
                            AttentionBand band) {
  EMBER_CHECK(qkv.defined() && qkv.dim() == 3 && qkv.size(2) % 3 == 0, "{}: qkv must be [B, T, 3 * D], got {}", op,
              qkv.defined() ? shape_str(qkv.shape()) : std::string("undefined"));
  EMBER_CHECK(is_real(qkv.dtype()), "{}: qkv must be float32, float64 or bfloat16, got {}", op, dtype_name(qkv.dtype()));
  const int64_t D = qkv.size(2) / 3;
  EMBER_CHECK(heads > 0 && D % heads == 0, "{}: model width {} is not divisible by heads {}", op, D, heads);
  EMBER_CHECK(band.global >= 0, "{}: global must be >= 0 (leading tokens that see all), got {}", op, band.global);
  EMBER_CHECK(band.on() || band.global == 0,
              "{}: {} global tokens but no band (window < 0): global tokens are part of a band (window >= 0)", op,
              band.global);
  if (key_padding_mask.defined())
    EMBER_CHECK(key_padding_mask.dtype() == Dtype::Bool && key_padding_mask.shape() == Shape({qkv.size(0), qkv.size(1)}),
                "{}: key_padding_mask must be bool [{}, {}], got {} {}", op, qkv.size(0), qkv.size(1),
                dtype_name(key_padding_mask.dtype()), shape_str(key_padding_mask.shape()));
  if (key_padding_mask.defined()) check_same_device(op, {&qkv, &key_padding_mask});
}

// window_attention's band: a window is given, so it must be one (window < 0 would mean no band).
AttentionBand window_band(const char* op, int64_t window, int64_t global) {
  EMBER_CHECK(window >= 0, "{}: window must be >= 0 (keys on either side of a query), got {}", op, window);
  return {window, global};
}

// bool [T, T], true where query i may not see key j because of the band.
Tensor band_mask(int64_t T, AttentionBand band) {
  Tensor mask = Tensor::empty({T, T}, Dtype::Bool);
  bool* hidden = mask.data<bool>();
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j)
      hidden[i * T + j] = i >= band.global && j >= band.global && std::abs(i - j) > band.window;
  return mask;
}

// The band on `device`. NOTE: on a GPU, made once per (T, window, global, device) and kept: an upload at
// every forward would be a host-to-device copy inside a CUDA graph's capture, which is refused (the step
// could not be captured; `cuda graphs: with --checkpoint and window attention ...` failed so), and one
// more copy per layer and step besides. The band is read only, never written.
Tensor outside_band(int64_t T, AttentionBand band, Device device) {
  if (device.is_cpu()) return band_mask(T, band);
  static std::mutex mutex;
  static auto* kept = new std::map<std::tuple<int64_t, int64_t, int64_t, int>, Tensor>();  // NOTE: leaked on purpose
  std::lock_guard<std::mutex> lock(mutex);
  Tensor& on_device = (*kept)[{T, band.window, band.global, device.index}];
  if (!on_device.defined()) on_device = band_mask(T, band).to(device);
  return on_device;
}

// The kept probabilities as [B, H, T, T] rows: pair-major ones ([B, H, ceil(T / 2), T, 2], rows 2q and 2q + 1
// side by side: a bfloat16 qkv's on the CPU, AttentionPlan) unpacked, others returned as they are.
Tensor probs_rows(const Tensor& probs) {
  if (probs.dim() == 4) return probs;
  const int64_t B = probs.size(0), H = probs.size(1), T = probs.size(3);
  // (q, j, r) -> (q, r, j): rows 2q + r, then the zero row after an odd T's last dropped.
  return probs.permute({0, 1, 2, 4, 3}).contiguous().view({B, H, 2 * probs.size(2), T}).narrow(2, 0, T);
}

}  // namespace

Tensor attention_reference(const Tensor& qkv, int64_t heads, const Tensor& key_padding_mask, bool causal,
                           Tensor* weights, AttentionBand band) {
  // With a band, a bfloat16 qkv is widened: bfloat16 in, bfloat16 out, as attention.
  if (band.on() && qkv.defined() && qkv.dtype() == Dtype::BFloat16)
    return attention_reference(widened_from_bf16(qkv), heads, key_padding_mask, causal, weights, band)
        .to(Dtype::BFloat16);
  check_attention_inputs(op_name("attention_reference", "window_attention_reference", band), qkv, heads,
                         key_padding_mask, band);
  const int64_t B = qkv.size(0), T = qkv.size(1), D = qkv.size(2) / 3, H = heads, Dh = D / heads;
  // [B, T, 3D] -> [3, B, H, T, Dh]: q, k, v are strided views into the one projection.
  Tensor qkv_heads = qkv.view({B, T, 3, H, Dh}).permute({2, 0, 3, 1, 4});
  Tensor q = qkv_heads.select(0, 0), k = qkv_heads.select(0, 1), v = qkv_heads.select(0, 2);
  // The scale goes on q [B, H, T, Dh], not on the scores [B, H, T, T]: the same products, T / Dh times fewer
  // multiplies, and no [B, H, T, T] tensor made (and its gradient) for the scaling alone.
  Tensor scores = matmul(q * (1.0 / std::sqrt(double(Dh))), k.transpose(-2, -1));  // [B, H, T, T]
  // Which keys each query may not see (true = hidden), broadcasting to [B, H, T, T]: outside the band,
  // padding, the future.
  Tensor hidden = band.on() ? outside_band(T, band, qkv.device()) : Tensor();
  if (key_padding_mask.defined()) {
    Tensor padding = key_padding_mask.view({B, 1, 1, T});
    hidden = hidden.defined() ? where(hidden, hidden, padding) : padding;  // outside the band or padding
  }
  if (causal) {
    Tensor future = gt(arange(T).view({1, T}), arange(T).view({T, 1})).to(qkv.device());  // key index > query index
    hidden = hidden.defined() ? where(future, future, hidden) : future;                   // the future, or the above
  }
  // NOTE: a query that sees no key (every key padding; with the causal mask, every key up to it; outside the
  // band) has no softmax: all -inf would give NaN. Its output is 0 and no gradient flows from it, as in the
  // fused kernels (docs/attention.md): its scores are left unmasked (finite probabilities), and its output
  // row is zeroed.
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

Tensor attention(const Tensor& qkv_in, int64_t heads, const Tensor& key_padding_mask, bool causal, Tensor* weights,
                 AttentionBand band) {
  const char* name = op_name("attention", "window_attention", band);
  check_attention_inputs(name, qkv_in, heads, key_padding_mask, band);
  const int64_t B = qkv_in.size(0), T = qkv_in.size(1), D = qkv_in.size(2) / 3;
  // Mixed precision (core/precision.h): the products in bfloat16, the softmax in float32.
  const bool bf16 = product_precision() == Precision::BFloat16 && qkv_in.dtype() == Dtype::Float32;
  // How the device runs it (core/kernels.h). On a GPU: the tiled fused kernels of cuda/attention_kernels.cu
  // (the default; no [B, H, T, T] tensor is written; head sizes up to 128), or with EMBER_ATTENTION=composed
  // the composed version (cuBLAS strided-batched GEMMs, the masked_fill and softmax kernels). The fused one
  // became the default once it had passed its tests on a GPU and run faster there (docs/cuda.md).
  const AttentionPlan plan = kernel::attention_plan(kernel_on(qkv_in), B, T, heads, D, band.window, bf16);
  // A bfloat16 qkv: the fused kernels read it and write a bfloat16 output themselves (below): the GPU's, and
  // the CPU's without a band. Otherwise (the composed version; the CPU's band kernel) the op runs on the
  // widened values in the scope, its output rounded back.
  if (qkv_in.dtype() == Dtype::BFloat16 && (!plan.fused || !plan.takes_bf16)) {
    MixedPrecisionGuard bf16_scope(Precision::BFloat16);
    return attention(widened_from_bf16(qkv_in), heads, key_padding_mask, causal, weights, band).to(Dtype::BFloat16);
  }
  if (!plan.fused) return attention_reference(qkv_in, heads, key_padding_mask, causal, weights, band);
  const Tensor qkv = qkv_in.detach().contiguous();
  const Tensor mask = key_padding_mask.defined() ? key_padding_mask.contiguous() : Tensor();
  const bool* padding = mask.defined() ? mask.data<bool>() : nullptr;
  // What the backward reads besides qkv and the mask (the plan's): the probabilities the CPU's full-attention
  // kernel kept, or (the GPU's kernels, the CPU's over a band) the output and the rows' log-sum-exps, from
  // which it recomputes them tile by tile.
  const bool needs_grad = any_requires_grad({qkv_in});
  const bool keep_probs = weights != nullptr || (needs_grad && plan.saves_probs);
  const Shape stats_shape = plan.stats_per_row == 1 ? Shape{B, heads, T} : Shape{B, heads, T, plan.stats_per_row};
  const Shape probs_shape = plan.probs_pair_major ? Shape{B, heads, (T + 1) / 2, T, 2} : Shape{B, heads, T, T};
  // In a checkpoint's recompute: the output and the stats its forward kept (autograd/recompute_cache.h): the
  // log-sum-exps, all such a backward needs, or the rows' softmax statistics, from which the probabilities
  // come back in one pass over the scores.
  Tensor out, stats, probs;
  bool taken = false;
  KeptResults r = kept_or_computed(name, {B, T, D}, qkv.dtype(), weights == nullptr, [&] {
    out = Tensor::empty({B, T, D}, qkv.dtype(), qkv.device());
    if (!plan.saves_probs || keeping_results())  // the plan's stats; the CPU's full attention: only to keep
      stats = Tensor::empty(stats_shape, Dtype(plan.stats_dtype), qkv.device());
    if (keep_probs) probs = Tensor::empty(probs_shape, Dtype(plan.probs_dtype), qkv.device());
    kernel::attention_forward(kernel_on(qkv), qkv.raw_data(), padding, B, T, heads, D, causal, band.window, band.global,
                              bf16, out.raw_data(), data_or_null(stats), data_or_null(probs));
    return KeptResults{out, stats};
  }, &taken);
  if (taken) {
    out = r[0];
    stats = r[1];
    if (needs_grad && plan.saves_probs) {
      EMBER_CHECK(stats.defined() && stats.is_contiguous() && stats.dtype() == Dtype(plan.stats_dtype) &&
                      stats.shape() == stats_shape,
                  "{}: the kept row statistics must be contiguous {} {}, got {}", name,
                  dtype_name(Dtype(plan.stats_dtype)), shape_str(stats_shape),
                  stats.defined() ? std::string(dtype_name(stats.dtype())) + " " + shape_str(stats.shape())
                                  : std::string("none"));
      probs = Tensor::empty(probs_shape, Dtype(plan.probs_dtype), qkv.device());
      kernel::attention_probs(kernel_on(qkv), qkv.raw_data(), padding, B, T, heads, D, causal, bf16, stats.raw_data(),
                              probs.raw_data());
    }
  }
  // The weights: qkv's dtype, float32 for bfloat16 (in bfloat16 on the CPU: the kept probabilities, rounded).
  if (weights != nullptr)
    *weights = probs_rows(probs).to(qkv.dtype() == Dtype::BFloat16 ? Dtype::Float32 : qkv.dtype());
  // One backward for every device and band: the device's kernel.
  // NOTE: the probabilities are saved too: `weights` hands them to the caller, who could change them.
  const Tensor none;
  const Tensor lse = plan.saves_probs ? none : stats;
  record(name, out, {qkv_in},
         [B, T, D, heads, causal, band, bf16, scratch_size = plan.scratch, qkv = save(qkv), mask = save(mask),
          probs = save(plan.saves_probs ? probs : none), out = save(plan.saves_probs ? none : out),
          lse](const Tensor& g) -> Grads {
           const Tensor& x = qkv.get();
           const Tensor& m = mask.get();
           const Tensor grad = g.contiguous();
           Tensor dqkv = Tensor::empty(x.shape(), x.dtype(), x.device());
           Tensor scratch = scratch_size > 0 ? Tensor::empty({scratch_size}, Dtype::Float64, x.device()) : Tensor();
           kernel::attention_backward(kernel_on(x), x.raw_data(), m.defined() ? m.data<bool>() : nullptr, B, T, heads,
                                      D, causal, band.window, band.global, bf16, data_or_null(out.get()),
                                      data_or_null(lse), data_or_null(probs.get()), grad.raw_data(),
                                      scratch.defined() ? scratch.data<double>() : nullptr, dqkv.raw_data());
           return {dqkv};
         });
  return out;
}

Tensor window_attention(const Tensor& qkv, int64_t heads, int64_t window, int64_t global,
                        const Tensor& key_padding_mask, bool causal, Tensor* weights) {
  return attention(qkv, heads, key_padding_mask, causal, weights, window_band("window_attention", window, global));
}

Tensor window_attention_reference(const Tensor& qkv, int64_t heads, int64_t window, int64_t global,
                                  const Tensor& key_padding_mask, bool causal, Tensor* weights) {
  return attention_reference(qkv, heads, key_padding_mask, causal, weights,
                             window_band("window_attention_reference", window, global));
}

}  // namespace ember
