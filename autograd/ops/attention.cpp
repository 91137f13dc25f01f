// Scaled dot-product attention, softmax(scale q k^T + mask) v, with an optional band (sliding-window
// attention, Longformer's pattern: core/attention_band.h), two ways:
//   scaled_dot_product_attention_reference: composed from the ops above it (matmul, masked_fill, softmax),
//     each with its own backward; every mask is applied to the [..., T, S] scores, made in full. The version
//     to read first, and what the tests hold the fused one to.
//   scaled_dot_product_attention: one op, one fused kernel forward and one backward, on the device's kernels
//     (core/kernels.h): the CPU's (core/cpu/attention.cpp: full attention keeps each head's [T, S] block in
//     cache and never materialises the masked scores; over a band cost and memory grow with T x window and
//     nothing [T, S] is saved) or the GPU's tiled ones (cuda/attention_kernels.cu, tiles outside the band
//     skipped).
// q [..., T, Dh], k [..., S, Dh], v [..., S, Dv] -> [..., T, Dv]; the kernels read each through its strides
// (core/attention_args.h), so the heads of a [B, T, H, Dh] view, q k v of one fused projection, or a
// key/value cache's first S rows cost no copy.
// Query i sees key j unless the mask hides it, or (causal, aligned top-left) j > i, or (a band) both are past
// the first `global` positions and more than `window` apart.
// A query row that sees no key (every key masked) has no softmax: both give it output 0 and send no
// gradient through it (FlashAttention's rule), on the CPU and the GPU alike, where a plain softmax of an
// all -inf row would make it NaN (docs/attention.md says why).
// attention(qkv, heads, ...) is the same op on a fused [B, T, 3 D] projection: one call of the same kernels
// with q, k and v read in place, recording one node whose backward writes one [B, T, 3 D] gradient.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "autograd/ops/op_support.h"
#include "core/online_softmax.h"
#include "core/precision.h"

namespace ember {
namespace {

// The op's name, in errors and on its graph node: with a band, the windowed one.
const char* op_name(const char* full, const char* banded, AttentionBand band) { return band.on() ? banded : full; }

std::string describe(const Tensor& t) {
  return t.defined() ? std::string(dtype_name(t.dtype())) + " " + shape_str(t.shape()) : std::string("undefined");
}

// ---- The shapes the kernels take: every operand as [B, H, rows, cols].

// x's stride along dim d (negative from the end).
int64_t stride(const Tensor& x, int64_t d) { return x.strides()[size_t(d < 0 ? x.dim() + d : d)]; }

// x [..., R, C] as a [B, H, R, C] tensor over the same storage where the strides allow (leading dims
// beyond two merged into B, by a copy when they do not merge); with `unit_last`, the last dim contiguous.
Tensor as_4d(const Tensor& x, bool unit_last = true) {
  Tensor y = unit_last && x.size(-1) > 1 && stride(x, -1) != 1 ? x.contiguous() : x;
  switch (y.dim()) {
    case 2: return y.unsqueeze(0).unsqueeze(0);
    case 3: return y.unsqueeze(0);
    case 4: return y;
    default: {
      int64_t lead = 1;
      for (int64_t i = 0; i + 3 < y.dim(); ++i) lead *= y.size(i);
      return y.reshape({lead, y.size(-3), y.size(-2), y.size(-1)});
    }
  }
}

AttentionIn operand_in(const Tensor& x4) { return {x4.raw_data(), stride(x4, 0), stride(x4, 1), stride(x4, 2)}; }
AttentionOut operand_out(const Tensor& x4) { return {x4.raw_data(), stride(x4, 0), stride(x4, 1), stride(x4, 2)}; }

// A new [B, H, R, C] tensor laid out as `like` is (PyTorch's preserve_format): heads side by side in each
// row ([B, R, H, C] in memory) when like's rows are further apart than its heads, as in a [B, T, H, Dh] view
// (so its gradient, or the output, goes back through transpose and view without a copy); else contiguous.
Tensor empty_4d_like(const Tensor& like4, int64_t R, int64_t C) {
  const int64_t B = like4.size(0), H = like4.size(1);
  if (H > 1 && R > 1 && stride(like4, 2) > stride(like4, 1))
    return Tensor::empty({B, R, H, C}, like4.dtype(), like4.device()).permute({0, 2, 1, 3});
  return Tensor::empty({B, H, R, C}, like4.dtype(), like4.device());
}

// The mask as the kernels read it: a [B, H, T, S] view (stride 0 where it broadcasts) and its kind.
struct MaskArg {
  Tensor view;  // [B, H, T, S], or undefined
  MaskKind kind = MaskKind::None;
};

AttentionMask mask_of(const MaskArg& m) {
  if (!m.view.defined() || m.kind == MaskKind::None) return {};
  return {m.view.raw_data(), m.kind, stride(m.view, 0), stride(m.view, 1), stride(m.view, 2), stride(m.view, 3)};
}

// ---- The inputs' checks.

struct Checked {
  Shape lead;  // q's leading dims
  int64_t T, S, Dh, Dv;
};

Checked check_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                     AttentionBand band, std::optional<double> scale) {
  EMBER_CHECK(q.defined() && k.defined() && v.defined(), "{}: q, k and v must be defined, got q {}, k {}, v {}", op,
              describe(q), describe(k), describe(v));
  EMBER_CHECK(is_real(q.dtype()), "{}: q must be float32, float64 or bfloat16, got {}", op, dtype_name(q.dtype()));
  EMBER_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), "{}: q, k and v must have one dtype, got q {}, k {}, v {}",
              op, dtype_name(q.dtype()), dtype_name(k.dtype()), dtype_name(v.dtype()));
  EMBER_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(),
              "{}: q [..., T, Dh], k [..., S, Dh] and v [..., S, Dv] must have one rank (2 or more), got q {}, k {}, "
              "v {}", op, shape_str(q.shape()), shape_str(k.shape()), shape_str(v.shape()));
  const Shape lead(q.shape().begin(), q.shape().end() - 2);
  const bool same_lead = Shape(k.shape().begin(), k.shape().end() - 2) == lead &&
                         Shape(v.shape().begin(), v.shape().end() - 2) == lead;
  EMBER_CHECK(same_lead && k.size(-1) == q.size(-1) && v.size(-2) == k.size(-2),
              "{}: q [..., T, Dh], k [..., S, Dh] and v [..., S, Dv] must agree (the same leading dims, one Dh, one "
              "S), got q {}, k {}, v {}", op, shape_str(q.shape()), shape_str(k.shape()), shape_str(v.shape()));
  check_same_device(op, {&q, &k, &v});
  const int64_t T = q.size(-2), S = k.size(-2);
  if (mask.defined()) {
    EMBER_CHECK(mask.dtype() == Dtype::Bool || mask.dtype() == q.dtype(),
                "{}: the mask must be bool (true = may attend) or q's dtype {} (added to the scores), got {}", op,
                dtype_name(q.dtype()), dtype_name(mask.dtype()));
    check_same_device(op, {&q, &mask});
    Shape full = lead;
    full.push_back(T);
    full.push_back(S);
    bool fits = mask.dim() <= int64_t(full.size());
    for (int64_t i = 1; fits && i <= mask.dim(); ++i)
      fits = mask.size(-i) == 1 || mask.size(-i) == full[full.size() - size_t(i)];
    EMBER_CHECK(fits, "{}: the mask {} does not broadcast to the scores [..., T, S] = {}", op,
                shape_str(mask.shape()), shape_str(full));
  }
  EMBER_CHECK(band.global >= 0, "{}: global must be >= 0 (leading tokens that see all), got {}", op, band.global);
  EMBER_CHECK(band.on() || band.global == 0,
              "{}: {} global tokens but no band (window < 0): global tokens are part of a band (window >= 0)", op,
              band.global);
  EMBER_CHECK(!scale || std::isfinite(*scale), "{}: scale must be finite, got {}", op, scale ? *scale : 0.0);
  return {lead, T, S, q.size(-1), v.size(-1)};
}

// The mask broadcast to [lead..., T, S] and viewed as [B, H, T, S] (no copy unless leading dims beyond two
// do not merge).
MaskArg user_mask(const Tensor& mask, const Checked& c) {
  if (!mask.defined()) return {};
  Shape full = c.lead;
  full.push_back(c.T);
  full.push_back(c.S);
  return {as_4d(mask.detach().expand(full), /*unit_last=*/false),
          mask.dtype() == Dtype::Bool ? MaskKind::Allows : MaskKind::Adds};
}

// bool [T, S], true where query i may not see key j because of the band (or, `causal`, j > i).
Tensor hidden_mask(int64_t T, int64_t S, AttentionBand band, bool causal) {
  Tensor mask = Tensor::empty({T, S}, Dtype::Bool);
  bool* hidden = mask.data<bool>();
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < S; ++j)
      hidden[i * S + j] = (causal && j > i) || attn::outside_window(band.window, band.global, i, j);
  return mask;
}

// That mask on `device`. NOTE: on a GPU, made once per (T, S, window, global, causal, device) and kept: an
// upload at every forward would be a host-to-device copy inside a CUDA graph's capture, which is refused
// (the step could not be captured; `cuda graphs: with --checkpoint and window attention ...` failed so), and
// one more copy per layer and step besides. The mask is read only, never written.
Tensor structural_mask(int64_t T, int64_t S, AttentionBand band, bool causal, Device device) {
  if (device.is_cpu()) return hidden_mask(T, S, band, causal);
  static std::mutex mutex;
  static auto* kept = new std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, bool, int>, Tensor>();  // NOTE: leaked on purpose
  std::lock_guard<std::mutex> lock(mutex);
  Tensor& on_device = (*kept)[{T, S, band.window, band.global, causal, device.index}];
  if (!on_device.defined()) on_device = hidden_mask(T, S, band, causal).to(device);
  return on_device;
}

// The kept probabilities as [B, H, T, S] rows: pair-major ones ([B, H, ceil(T / 2), S, 2], rows 2q and 2q + 1
// side by side: bfloat16 operands' on the CPU, AttentionPlan) unpacked, others returned as they are.
Tensor probs_rows(const Tensor& probs, int64_t T) {
  if (probs.dim() == 4) return probs;
  const int64_t B = probs.size(0), H = probs.size(1), S = probs.size(3);
  // (q, j, r) -> (q, r, j): rows 2q + r, then the zero row after an odd T's last dropped.
  return probs.permute({0, 1, 2, 4, 3}).contiguous().view({B, H, 2 * probs.size(2), S}).narrow(2, 0, T);
}

// ---- The composed version, on [..., T, S] scores.

Tensor reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                 const Tensor& key_padding_mask, bool causal, AttentionBand band, std::optional<double> scale,
                 Tensor* weights) {
  const int64_t T = q.size(-2), S = k.size(-2);
  const double factor = scale ? *scale : 1.0 / std::sqrt(double(q.size(-1)));
  // The scale goes on q [..., T, Dh], not on the scores [..., T, S]: the same products, S / Dh times fewer
  // multiplies, and no scores-sized tensor made (and its gradient) for the scaling alone.
  Tensor scores = matmul(q * factor, k.transpose(-2, -1));  // [..., T, S]
  const Tensor no = scalar(0, Dtype::Bool, q.device()), zero = scalar(0, q.dtype(), q.device());
  // Which keys each query may not see (true = hidden), broadcasting to the scores: the band and the future,
  // padding, a boolean mask's false entries, an additive mask's -inf.
  Tensor hidden = band.on() || causal ? structural_mask(T, S, band, causal, q.device()) : Tensor();
  const auto hide = [&](const Tensor& more) { hidden = hidden.defined() ? where(hidden, hidden, more) : more; };
  if (key_padding_mask.defined()) hide(key_padding_mask.view({key_padding_mask.size(0), 1, 1, S}));
  const bool additive = mask.defined() && mask.dtype() != Dtype::Bool;
  if (mask.defined()) hide(additive ? eq(mask, scalar(-INFINITY, q.dtype(), q.device())) : eq(mask, no));
  // NOTE: a query that sees no key has no softmax: all -inf would give NaN. Its output is 0 and no gradient
  // flows from it, as in the fused kernels (docs/attention.md): its scores are left unmasked (finite
  // probabilities), and its output row is zeroed.
  Tensor blind;  // bool, the queries that see no key (last dim 1)
  if (hidden.defined()) {
    Tensor seen = sum(where(hidden, zero, scalar(1, q.dtype(), q.device())), {-1}, /*keepdim=*/true);
    blind = eq(seen, zero);
    if (additive) scores = scores + where(hidden, zero, mask);
    scores = masked_fill(scores, where(blind, no, hidden), -INFINITY);
  } else if (additive) {
    scores = scores + mask;
  }
  Tensor probs = softmax(scores, -1);
  Tensor out = matmul(probs, v);  // [..., T, Dv]
  if (blind.defined()) out = masked_fill(out, blind, 0.0);
  if (weights != nullptr) {
    // The probabilities, differentiable when q, k or v are (the fused op's are read-only).
    *weights = blind.defined() ? masked_fill(probs, blind, 0.0) : probs;
  }
  return out;
}

// ---- The fused op.

// What the forward keeps for the backward, and the backward, which both entry points run: it writes the
// gradients into dq, dk, dv ([B, H, rows, cols] views of the caller's buffers).
struct FusedBackward {
  const char* name;
  AttentionDims dims;
  MaskKind mask_kind;
  SavedTensor q, k, v, mask, out, probs;
  Tensor stats;  // the forward's own, never handed out
  int64_t scratch;

  void run(const Tensor& grad_out4, const Tensor& dq, const Tensor& dk, const Tensor& dv) const {
    const Tensor& q4 = q.get();
    AttentionArgs args{dims, operand_in(q4), operand_in(k.get()), operand_in(v.get()), mask_of({mask.get(), mask_kind})};
    const Tensor g = as_4d(grad_out4);
    Tensor scratch_buffer = scratch > 0 ? Tensor::empty({scratch}, Dtype::Float64, q4.device()) : Tensor();
    const Tensor& o = out.get();
    kernel::attention_backward(kernel_on(q4), args, o.defined() ? operand_in(o) : AttentionIn{}, data_or_null(stats),
                               data_or_null(probs.get()), operand_in(g),
                               scratch_buffer.defined() ? scratch_buffer.data<double>() : nullptr, operand_out(dq),
                               operand_out(dk), operand_out(dv));
  }
};

struct FusedForward {
  Tensor out_buffer;  // as allocate_out made it (or a checkpoint's recompute took it back)
  Tensor weights;     // [B, H, T, S], when asked for
  FusedBackward backward;
};

// Runs the fused forward on q4, k4, v4 ([B, H, rows, cols], detached) and the mask. allocate_out makes the
// output's buffer (of out_shape), out_view gives its [B, H, T, Dv] view (a checkpoint's recompute hands back
// the forward's buffer).
template <typename Allocate, typename View>
FusedForward fused_forward(const char* name, const AttentionDims& dims, const AttentionPlan& plan, const Tensor& q4,
                           const Tensor& k4, const Tensor& v4, const MaskArg& mask, bool needs_grad, bool want_weights,
                           const Shape& out_shape, Allocate&& allocate_out, View&& out_view) {
  const AttentionArgs args{dims, operand_in(q4), operand_in(k4), operand_in(v4), mask_of(mask)};
  const On on = kernel_on(q4);
  const int64_t B = dims.B, H = dims.H, T = dims.T, S = dims.S;
  // What the backward reads besides q, k, v and the mask (the plan's): the probabilities the CPU's
  // full-attention kernel kept, or (the GPU's kernels, the CPU's over a band) the output and the rows'
  // log-sum-exps, from which it recomputes them tile by tile.
  const bool keep_probs = want_weights || (needs_grad && plan.saves_probs);
  const Shape stats_shape = plan.stats_per_row == 1 ? Shape{B, H, T} : Shape{B, H, T, plan.stats_per_row};
  const Shape probs_shape = plan.probs_pair_major ? Shape{B, H, (T + 1) / 2, S, 2} : Shape{B, H, T, S};
  // In a checkpoint's recompute: the output and the stats its forward kept (autograd/recompute_cache.h): the
  // log-sum-exps, all such a backward needs, or the rows' softmax statistics, from which the probabilities
  // come back in one pass over the scores.
  Tensor buffer, stats, probs;
  bool taken = false;
  KeptResults r = kept_or_computed(name, out_shape, q4.dtype(), !want_weights, [&] {
    buffer = allocate_out();
    if (!plan.saves_probs || keeping_results())  // the plan's stats; the CPU's full attention: only to keep
      stats = Tensor::empty(stats_shape, Dtype(plan.stats_dtype), q4.device());
    if (keep_probs) probs = Tensor::empty(probs_shape, Dtype(plan.probs_dtype), q4.device());
    kernel::attention_forward(on, args, operand_out(out_view(buffer)), data_or_null(stats), data_or_null(probs));
    return KeptResults{buffer, stats};
  }, &taken);
  if (taken) {
    buffer = r[0];
    stats = r[1];
    if (needs_grad && plan.saves_probs) {
      EMBER_CHECK(stats.defined() && stats.is_contiguous() && stats.dtype() == Dtype(plan.stats_dtype) &&
                      stats.shape() == stats_shape,
                  "{}: the kept row statistics must be contiguous {} {}, got {}", name,
                  dtype_name(Dtype(plan.stats_dtype)), shape_str(stats_shape), describe(stats));
      probs = Tensor::empty(probs_shape, Dtype(plan.probs_dtype), q4.device());
      kernel::attention_probs(on, args, stats.raw_data(), probs.raw_data());
    }
  }
  FusedForward f;
  f.out_buffer = buffer;
  // The weights: the operands' dtype, float32 for bfloat16 (in bfloat16 on the CPU: the kept probabilities, rounded).
  if (want_weights) f.weights = probs_rows(probs, T).to(q4.dtype() == Dtype::BFloat16 ? Dtype::Float32 : q4.dtype());
  // NOTE: the probabilities are saved too: `weights` hands them to the caller, who could change them.
  const Tensor none;
  f.backward = {name, dims, mask.kind, save(q4), save(k4), save(v4), save(mask.view),
                save(plan.saves_probs ? none : out_view(buffer)), save(plan.saves_probs ? probs : none),
                plan.saves_probs ? none : stats, plan.scratch};
  return f;
}

AttentionDims dims_of(const Tensor& q4, const Tensor& k4, const Tensor& v4, bool causal, AttentionBand band,
                      std::optional<double> scale, bool bf16) {
  AttentionDims d;
  d.B = q4.size(0), d.H = q4.size(1), d.T = q4.size(2), d.S = k4.size(2), d.Dh = q4.size(3), d.Dv = v4.size(3);
  d.causal = causal, d.window = band.window, d.global = band.global;
  d.custom_scale = scale.has_value(), d.scale = scale.value_or(0.0);
  d.bf16 = bf16;
  return d;
}

// Mixed precision (core/precision.h): the products in bfloat16, the softmax in float32.
bool mixed_precision_for(const Tensor& x) {
  return product_precision() == Precision::BFloat16 && x.dtype() == Dtype::Float32;
}

Tensor widened_mask(const Tensor& mask) {
  return mask.defined() && mask.dtype() == Dtype::BFloat16 ? widened_from_bf16(mask) : mask;
}

// key_padding_mask: bool [B, S] (true = padding) for 4-D q, k, v, checked by the caller, or undefined.
Tensor sdpa(const char* name, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
            const Tensor& key_padding_mask, bool causal, AttentionBand band, std::optional<double> scale,
            Tensor* weights) {
  const Checked c = check_inputs(name, q, k, v, mask, band, scale);
  if (mask.defined() && key_padding_mask.defined()) {  // one mask for the kernels: hidden where either hides
    const Tensor padding = key_padding_mask.view({key_padding_mask.size(0), 1, 1, c.S});
    const Tensor hidden = mask.dtype() == Dtype::Bool ? scalar(0, Dtype::Bool, q.device())
                                                      : scalar(-INFINITY, q.dtype(), q.device());
    return sdpa(name, q, k, v, where(padding, hidden, mask), Tensor(), causal, band, scale, weights);
  }
  const Tensor q4 = as_4d(q.detach()), k4 = as_4d(k.detach()), v4 = as_4d(v.detach());
  const AttentionDims dims = dims_of(q4, k4, v4, causal, band, scale, mixed_precision_for(q));
  MaskArg m = user_mask(mask, c);
  if (key_padding_mask.defined())  // true = padding: read in place, once per key
    m = {key_padding_mask.detach().view({dims.B, 1, 1, c.S}).expand({dims.B, dims.H, c.T, c.S}), MaskKind::Hides};
  const AttentionPlan plan = kernel::attention_plan(kernel_on(q), AttentionArgs{dims, {}, {}, {}, mask_of(m)});
  // A mask that wants a gradient needs the scores in full: the composed version; and empty operands (no
  // query, no key, a zero-size head) have nothing to fuse: the composed version's rules.
  const bool needs_grad = any_requires_grad({q, k, v});
  const bool composed = !plan.fused || (mask.defined() && any_requires_grad({mask})) || q.numel() == 0 ||
                        k.numel() == 0 || v.numel() == 0;
  // bfloat16 operands the fused kernels do not read as they are (the CPU's band kernel), or for the composed
  // version: the op runs on the widened values in the mixed-precision scope, its output rounded back.
  if (q.dtype() == Dtype::BFloat16 && (composed || !plan.takes_bf16)) {
    MixedPrecisionGuard bf16_scope(Precision::BFloat16);
    return sdpa(name, widened_from_bf16(q), widened_from_bf16(k), widened_from_bf16(v), widened_mask(mask),
                key_padding_mask, causal, band, scale, weights)
        .to(Dtype::BFloat16);
  }
  if (composed) return reference(q, k, v, mask, key_padding_mask, causal, band, scale, weights);
  const int64_t B = dims.B, H = dims.H, T = dims.T, S = dims.S, Dv = dims.Dv;
  FusedForward f = fused_forward(
      name, dims, plan, q4, k4, v4, m, needs_grad, weights != nullptr, Shape{B, H, T, Dv},
      [&] { return empty_4d_like(q4, T, Dv); }, [](const Tensor& buffer) { return buffer; });
  Shape out_shape = c.lead;
  out_shape.push_back(T);
  out_shape.push_back(Dv);
  Tensor out = f.out_buffer.reshape(out_shape);
  if (weights != nullptr) {
    Shape w_shape = c.lead;
    w_shape.push_back(T);
    w_shape.push_back(S);
    *weights = f.weights.reshape(w_shape);
  }
  // One node for q, k and v; the gradients laid out as the inputs are (empty_4d_like), so that a
  // [B, T, H, Dh] view's goes back through transpose and view without a copy.
  record("scaled_dot_product_attention", out, {q, k, v},
         [backward = f.backward, qs = q.shape(), ks = k.shape(), vs = v.shape()](const Tensor& g) -> Grads {
           const AttentionDims& d = backward.dims;
           Tensor dq = empty_4d_like(backward.q.get(), d.T, d.Dh), dk = empty_4d_like(backward.k.get(), d.S, d.Dh),
                  dv = empty_4d_like(backward.v.get(), d.S, d.Dv);
           backward.run(g.reshape({d.B, d.H, d.T, d.Dv}), dq, dk, dv);
           return {dq.reshape(qs), dk.reshape(ks), dv.reshape(vs)};
         });
  return out;
}

void check_fused_qkv(const char* op, const Tensor& qkv, int64_t heads, const Tensor& key_padding_mask,
                     AttentionBand band) {
  EMBER_CHECK(qkv.defined() && qkv.dim() == 3 && qkv.size(2) % 3 == 0, "{}: qkv must be [B, T, 3 * D], got {}", op,
              qkv.defined() ? shape_str(qkv.shape()) : std::string("undefined"));
  EMBER_CHECK(is_real(qkv.dtype()), "{}: qkv must be float32, float64 or bfloat16, got {}", op, dtype_name(qkv.dtype()));
  const int64_t D = qkv.size(2) / 3;
  EMBER_CHECK(heads > 0 && D % heads == 0, "{}: model width {} is not divisible by heads {}", op, D, heads);
  if (key_padding_mask.defined()) {
    EMBER_CHECK(key_padding_mask.dtype() == Dtype::Bool && key_padding_mask.shape() == Shape({qkv.size(0), qkv.size(1)}),
                "{}: key_padding_mask must be bool [{}, {}], got {} {}", op, qkv.size(0), qkv.size(1),
                dtype_name(key_padding_mask.dtype()), shape_str(key_padding_mask.shape()));
    check_same_device(op, {&qkv, &key_padding_mask});
  }
  EMBER_CHECK(band.global >= 0, "{}: global must be >= 0 (leading tokens that see all), got {}", op, band.global);
  EMBER_CHECK(band.on() || band.global == 0,
              "{}: {} global tokens but no band (window < 0): global tokens are part of a band (window >= 0)", op,
              band.global);
}

// q, k, v of a fused projection [B, T, 3 D] as [B, H, T, Dh] views (q | k | v, each `heads` heads).
std::vector<Tensor> split_qkv(const Tensor& qkv, int64_t heads) {
  const int64_t B = qkv.size(0), T = qkv.size(1), D = qkv.size(2) / 3;
  const Tensor parts = qkv.view({B, T, 3, heads, D / heads}).permute({2, 0, 3, 1, 4});  // [3, B, H, T, Dh]
  return {parts.select(0, 0), parts.select(0, 1), parts.select(0, 2)};
}

// A key padding mask for 4-D q [B, H, T, Dh] and k [B, H, S, Dh]: bool [B, S].
void check_key_padding(const char* name, const Tensor& q, const Tensor& k, const Tensor& pad) {
  EMBER_CHECK(pad.dtype() == Dtype::Bool && pad.dim() == 2 && q.defined() && q.dim() == 4 && k.defined() &&
                  k.dim() == 4 && pad.size(0) == q.size(0) && pad.size(1) == k.size(-2),
              "{}: key_padding_mask must be bool [B, S] for q [B, H, T, Dh] and k [B, H, S, Dh], got {} for q {}, k {}",
              name, describe(pad), q.defined() ? shape_str(q.shape()) : "undefined",
              k.defined() ? shape_str(k.shape()) : "undefined");
  check_same_device(name, {&q, &pad});
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal,
                                    AttentionBand band, std::optional<double> scale, Tensor* weights) {
  return sdpa(op_name("scaled_dot_product_attention", "scaled_dot_product_attention (window)", band), q, k, v, mask,
              Tensor(), causal, band, scale, weights);
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  const char* name = op_name("scaled_dot_product_attention", "scaled_dot_product_attention (window)", o.band);
  if (o.key_padding_mask.defined()) check_key_padding(name, q, k, o.key_padding_mask);
  return sdpa(name, q, k, v, o.mask, o.key_padding_mask, o.causal, o.band, o.scale, o.weights);
}

Tensor scaled_dot_product_attention_reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                              bool causal, AttentionBand band, std::optional<double> scale,
                                              Tensor* weights) {
  const char* name = "scaled_dot_product_attention_reference";
  // With a band, bfloat16 operands are widened: bfloat16 in, bfloat16 out, as the fused op.
  if (band.on() && q.defined() && q.dtype() == Dtype::BFloat16)
    return scaled_dot_product_attention_reference(
               widened_from_bf16(q), widened_from_bf16(k), widened_from_bf16(v),
               mask.defined() && mask.dtype() == Dtype::BFloat16 ? mask.to(Dtype::Float32) : mask, causal, band, scale,
               weights)
        .to(Dtype::BFloat16);
  check_inputs(name, q, k, v, mask, band, scale);
  return reference(q, k, v, mask, Tensor(), causal, band, scale, weights);
}

Tensor scaled_dot_product_attention_reference(const Tensor& q, const Tensor& k, const Tensor& v,
                                              const AttentionOptions& o) {
  const char* name = "scaled_dot_product_attention_reference";
  if (!o.key_padding_mask.defined())
    return scaled_dot_product_attention_reference(q, k, v, o.mask, o.causal, o.band, o.scale, o.weights);
  check_key_padding(name, q, k, o.key_padding_mask);
  check_inputs(name, q, k, v, o.mask, o.band, o.scale);
  if (o.band.on() && q.dtype() == Dtype::BFloat16) {
    AttentionOptions wide = o;
    wide.mask = widened_mask(o.mask);
    return scaled_dot_product_attention_reference(widened_from_bf16(q), widened_from_bf16(k), widened_from_bf16(v), wide)
        .to(Dtype::BFloat16);
  }
  return reference(q, k, v, o.mask, o.key_padding_mask, o.causal, o.band, o.scale, o.weights);
}

Tensor attention(const Tensor& qkv, int64_t heads, const Tensor& key_padding_mask, bool causal, Tensor* weights,
                 AttentionBand band) {
  AttentionOptions o;
  o.key_padding_mask = key_padding_mask, o.causal = causal, o.band = band, o.weights = weights;
  return attention(qkv, heads, o);
}

Tensor attention(const Tensor& qkv, int64_t heads, const AttentionOptions& o) {
  const char* name = op_name("attention", "window_attention", o.band);
  check_fused_qkv(name, qkv, heads, o.key_padding_mask, o.band);
  const int64_t B = qkv.size(0), T = qkv.size(1), D = qkv.size(2) / 3;
  if (o.mask.defined() && o.key_padding_mask.defined()) {  // one mask for the kernels: hidden where either hides
    AttentionOptions one = o;
    const Tensor hidden = o.mask.dtype() == Dtype::Bool ? scalar(0, Dtype::Bool, qkv.device())
                                                        : scalar(-INFINITY, qkv.dtype(), qkv.device());
    one.mask = where(o.key_padding_mask.view({B, 1, 1, T}), hidden, o.mask);
    one.key_padding_mask = Tensor();
    return attention(qkv, heads, one);
  }
  const std::vector<Tensor> parts = split_qkv(qkv.detach().contiguous(), heads);
  const Checked c = check_inputs(name, parts[0], parts[1], parts[2], o.mask, o.band, o.scale);
  const AttentionDims dims = dims_of(parts[0], parts[1], parts[2], o.causal, o.band, o.scale, mixed_precision_for(qkv));
  const MaskArg m = o.key_padding_mask.defined()
                        ? MaskArg{o.key_padding_mask.detach().view({B, 1, 1, T}).expand({B, heads, T, T}), MaskKind::Hides}
                        : user_mask(o.mask, c);
  const AttentionPlan plan = kernel::attention_plan(kernel_on(qkv), AttentionArgs{dims, {}, {}, {}, mask_of(m)});
  const bool needs_grad = any_requires_grad({qkv});
  // Not fused here (the GPU's composed setting, a head too large, a mask that wants a gradient, no element):
  // the composed version on q, k, v as views; bfloat16 the kernels do not read as it is: widened, in the
  // mixed-precision scope.
  const bool composed = !plan.fused || (o.mask.defined() && any_requires_grad({o.mask})) || qkv.numel() == 0;
  if (qkv.dtype() == Dtype::BFloat16 && (composed || !plan.takes_bf16)) {
    MixedPrecisionGuard bf16_scope(Precision::BFloat16);
    AttentionOptions wide = o;
    wide.mask = widened_mask(o.mask);
    return attention(widened_from_bf16(qkv), heads, wide).to(Dtype::BFloat16);
  }
  if (composed) {
    const std::vector<Tensor> views = split_qkv(qkv, heads);
    return reference(views[0], views[1], views[2], o.mask, o.key_padding_mask, o.causal, o.band, o.scale, o.weights)
        .transpose(1, 2)
        .reshape({B, T, D});  // [B, H, T, Dh] -> [B, T, H, Dh] -> [B, T, D]
  }
  // The output [B, T, D] (heads side by side, as the projection after it reads them) and its [B, H, T, Dh] view.
  const auto heads_of = [heads](const Tensor& merged) {
    return merged.view({merged.size(0), merged.size(1), heads, merged.size(2) / heads}).permute({0, 2, 1, 3});
  };
  FusedForward f = fused_forward(
      name, dims, plan, parts[0], parts[1], parts[2], m, needs_grad, o.weights != nullptr, Shape{B, T, D},
      [&] { return Tensor::empty({B, T, D}, qkv.dtype(), qkv.device()); }, heads_of);
  Tensor out = f.out_buffer;
  if (o.weights != nullptr) *o.weights = f.weights;
  // One backward for every device and band: the device's kernel, writing one [B, T, 3 D] gradient.
  record(name, out, {qkv}, [backward = f.backward, heads, heads_of](const Tensor& g) -> Grads {
    const AttentionDims& d = backward.dims;
    Tensor dqkv = Tensor::empty({d.B, d.T, 3 * d.H * d.Dh}, backward.q.get().dtype(), backward.q.get().device());
    const std::vector<Tensor> grads = split_qkv(dqkv, heads);
    backward.run(heads_of(g.contiguous()), grads[0], grads[1], grads[2]);
    return {dqkv};
  });
  return out;
}

Tensor attention_reference(const Tensor& qkv, int64_t heads, const Tensor& key_padding_mask, bool causal,
                           Tensor* weights, AttentionBand band) {
  const char* name = op_name("attention_reference", "window_attention_reference", band);
  check_fused_qkv(name, qkv, heads, key_padding_mask, band);
  const int64_t B = qkv.size(0), T = qkv.size(1), D = qkv.size(2) / 3;
  // With a band, a bfloat16 qkv is widened: bfloat16 in, bfloat16 out, as attention.
  if (band.on() && qkv.dtype() == Dtype::BFloat16)
    return attention_reference(widened_from_bf16(qkv), heads, key_padding_mask, causal, weights, band)
        .to(Dtype::BFloat16);
  // [B, T, 3D] -> [3, B, H, T, Dh]: q, k, v are strided views into the one projection.
  const std::vector<Tensor> parts = split_qkv(qkv, heads);
  Tensor out = reference(parts[0], parts[1], parts[2], Tensor(), key_padding_mask, causal, band, std::nullopt, weights);
  return out.transpose(1, 2).reshape({B, T, D});  // [B, H, T, Dh] -> [B, T, H, Dh] -> [B, T, D]
}

namespace {
// window_attention's band: a window is given, so it must be one (window < 0 would mean no band).
AttentionBand window_band(const char* op, int64_t window, int64_t global) {
  EMBER_CHECK(window >= 0, "{}: window must be >= 0 (keys on either side of a query), got {}", op, window);
  return {window, global};
}
}  // namespace

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
