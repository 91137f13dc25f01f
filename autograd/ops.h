// Every op, grouped by kind. Each one is defined, forward next to backward, in the autograd/ops/ file
// named in its group's heading, and records its backward with autograd/node.h: the ops sit above
// autograd. Their kernels live in core/cpu/ and cuda/, declared in core/kernels.h.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/attention_band.h"
#include "core/creation.h"
#include "core/gpu_stream.h"
#include "core/random.h"
#include "core/tensor.h"
#include "core/type_promotion.h"

namespace ember {

// ---- Creation: core/creation.h (zeros, ones, full, arange, from_vector, tensor, scalar, ...), included
// above; they record nothing, so they live in core, which makes tensors with them too.

// ---- Random (autograd/ops/random.cpp): counter-based, so results do not depend on the thread count
Tensor rand(const Shape& shape, Generator& gen = default_generator(), Dtype dtype = Dtype::Float32);
Tensor randn(const Shape& shape, Generator& gen = default_generator(), Dtype dtype = Dtype::Float32);
Tensor uniform(const Shape& shape, double low, double high, Generator& gen = default_generator(),
               Dtype dtype = Dtype::Float32);
Tensor normal(const Shape& shape, double mean, double std, Generator& gen = default_generator(),
              Dtype dtype = Dtype::Float32);
Tensor& uniform_(Tensor& t, double low, double high, Generator& gen = default_generator());
Tensor& normal_(Tensor& t, double mean, double std, Generator& gen = default_generator());

// ---- Element-wise arithmetic with NumPy broadcasting (autograd/ops/binary.cpp)
// Type promotion, PyTorch's (core/type_promotion.h): a C++ number or a 0-dim tensor takes the dtype of the tensor
// with dims it meets unless its category is higher (bool < integer < floating): x * 2 keeps x's dtype, int64 * 2.5
// is float32. Tensors with dims must share a dtype (but bfloat16 with float32/64: the wider). bool + bool: refused.
// So x + 1, 2 * x and scores / 8.0 keep the tensor's dtype, ids * 2.5 is float32, mask * 2 int64, eq(mask, 0)
// compares in mask's dtype. div is true division, as torch.div: integers and bools divide as float32. -x of an
// integer tensor is 0 - x, of a bool tensor an error.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, Scalar b);
Tensor operator-(const Tensor& a, Scalar b);
Tensor operator*(const Tensor& a, Scalar b);
Tensor operator/(const Tensor& a, Scalar b);
Tensor operator+(Scalar a, const Tensor& b);
Tensor operator-(Scalar a, const Tensor& b);
Tensor operator*(Scalar a, const Tensor& b);
Tensor operator/(Scalar a, const Tensor& b);
Tensor operator-(const Tensor& a);
// Comparisons (not differentiable): bool tensors, the operands promoted as above; NaN compares unequal to
// everything, itself too. The operators are the same ops: mask == 0 is eq(mask, 0).
Tensor eq(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, Scalar b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, Scalar b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, Scalar b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, Scalar b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, Scalar b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, Scalar b);
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, Scalar b);
Tensor operator!=(const Tensor& a, Scalar b);
Tensor operator<(const Tensor& a, Scalar b);
Tensor operator<=(const Tensor& a, Scalar b);
Tensor operator>(const Tensor& a, Scalar b);
Tensor operator>=(const Tensor& a, Scalar b);
Tensor operator==(Scalar a, const Tensor& b);
Tensor operator!=(Scalar a, const Tensor& b);
Tensor operator<(Scalar a, const Tensor& b);
Tensor operator<=(Scalar a, const Tensor& b);
Tensor operator>(Scalar a, const Tensor& b);
Tensor operator>=(Scalar a, const Tensor& b);
// Logical ops (not differentiable): bool results, broadcasting; an operand of another dtype counts as true
// where it is nonzero (torch.logical_and). &, |, ^ and ~ are the same ops on bool tensors (masks) only.
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& x);
Tensor operator&(const Tensor& a, const Tensor& b);
Tensor operator|(const Tensor& a, const Tensor& b);
Tensor operator^(const Tensor& a, const Tensor& b);
Tensor operator~(const Tensor& x);

// ---- Element-wise math (autograd/ops/unary.cpp; the formulas are in core/unary_math.h)
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x);  // erf form: x * Phi(x)
Tensor softplus(const Tensor& x);  // log(1 + e^x): the op added in docs/adding-an-op.md
Tensor abs(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);  // PyTorch's rules at 0 and below 0: core/unary_math.h
Tensor add_scalar(const Tensor& x, double value);
Tensor mul_scalar(const Tensor& x, double value);

// ---- Reductions over `dims` ({} = all dims) (autograd/ops/reduce.cpp). Over an empty dim, as in PyTorch:
// a sum is 0, a mean NaN, a max or argmax an error.
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor max(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// Variance with `correction` (1 = unbiased, like torch.var; 0 = population).
Tensor var(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false, int64_t correction = 1);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);  // int64, not differentiable
// Sums a broadcast result back down to `shape` (the gradient of broadcasting).
Tensor sum_to(const Tensor& x, const Shape& shape);

// ---- Linear algebra (autograd/ops/matmul.cpp, autograd/ops/linear.cpp)
// [.., M, K] @ [.., K, N] -> [.., M, N], batch dims broadcast; 1-D operands like NumPy.
// Transposed (strided) operands are read in place, never copied.
Tensor matmul(const Tensor& a, const Tensor& b);
// x [..., K] @ weight^T + bias, weight [N, K], bias [N] or undefined -> [..., N]: a Linear layer
// as one op, the bias added inside the GEMM (autograd/ops/linear.cpp).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);

// ---- Softmax and normalisation (autograd/ops/softmax.cpp, autograd/ops/layer_norm.cpp)
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// Normalises over the last dim: (x - mean) / sqrt(var + eps) * weight + bias. Fused forward and backward.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
// Normalises over the last dim by the root mean square: x / sqrt(mean(x^2) + eps) * weight (weight [D] or undefined).
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6);

// ---- Attention (autograd/ops/attention.cpp; docs/attention.md)
// scaled_dot_product_attention(q, k, v): softmax(scale q k^T + mask) v, as PyTorch's
// F.scaled_dot_product_attention. q [..., T, Dh], k [..., S, Dh], v [..., S, Dv] -> [..., T, Dv] (the same
// leading dims, e.g. [B, H]; any strides: a view().transpose(1, 2) costs no copy). scale: 1 / sqrt(Dh) by
// default. The mask broadcasts to [..., T, S]: bool, true = may attend (PyTorch's attn_mask), or of q's dtype,
// added to the scaled scores (-inf hides). causal: key j > query i hidden, aligned top-left as PyTorch's
// is_causal (with T != S, query i sees keys 0 .. i). band (core/attention_band.h; none by default):
// sliding-window attention (Longformer), query i sees key j only if |i - j| <= band.window or either is one
// of the first band.global positions; with one, the CPU kernel costs T x window, not T S.
// A query that sees no key (every key masked) gets output 0 and no gradient, not NaN (PyTorch gives NaN).
// `weights`, if given, receives the probabilities [..., T, S] (0 outside the band): read-only, not
// differentiable (the reference's below carry a gradient; nn::MultiHeadAttention's, asked for in grad mode,
// come from it). One fused op on the device's kernels (core/kernels.h); a mask that requires grad (a learned
// bias) runs the composed version, which gives it its gradient.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask = Tensor(),
                                    bool causal = false, AttentionBand band = {},
                                    std::optional<double> scale = std::nullopt, Tensor* weights = nullptr);
// The same with every option named, and a key padding mask: bool [B, S], true = padding (nn.MultiheadAttention's
// key_padding_mask), for 4-D q, k, v; read once per key (with no other mask) by the fused kernels.
struct AttentionOptions {
  Tensor mask;              // as above: bool (true = may attend) or additive
  Tensor key_padding_mask;  // bool [B, S], true = padding
  bool causal = false;
  AttentionBand band;
  std::optional<double> scale;
  Tensor* weights = nullptr;
};
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options);
// The same computation composed from matmul, masked_fill and softmax (the [..., T, S] scores made in full):
// the version to read first, and what the tests hold the fused op to.
Tensor scaled_dot_product_attention_reference(const Tensor& q, const Tensor& k, const Tensor& v,
                                              const Tensor& mask = Tensor(), bool causal = false,
                                              AttentionBand band = {}, std::optional<double> scale = std::nullopt,
                                              Tensor* weights = nullptr);
Tensor scaled_dot_product_attention_reference(const Tensor& q, const Tensor& k, const Tensor& v,
                                              const AttentionOptions& options);
// Multi-head self-attention on a fused projection qkv [B, T, 3 D] (q | k | v, each `heads` heads of
// D / heads) -> [B, T, D], the heads side by side: scaled_dot_product_attention's kernels reading q, k, v in
// place, one graph node whose backward writes one [B, T, 3 D] gradient. key_padding_mask: bool [B, T], true =
// padding (or undefined). `weights`: [B, heads, T, T], as above. attention_reference composes it.
Tensor attention(const Tensor& qkv, int64_t heads, const Tensor& key_padding_mask, bool causal = false,
                 Tensor* weights = nullptr, AttentionBand band = {});
// The same with every option (a mask of [B, H, T, T], a key padding mask [B, T], a scale, ...).
Tensor attention(const Tensor& qkv, int64_t heads, const AttentionOptions& options);
Tensor attention_reference(const Tensor& qkv, int64_t heads, const Tensor& key_padding_mask, bool causal = false,
                           Tensor* weights = nullptr, AttentionBand band = {});
// Sliding-window attention: attention(qkv, heads, key_padding_mask, causal, weights, {window, global}),
// with window >= 0 checked (its graph node and errors are named window_attention).
Tensor window_attention(const Tensor& qkv, int64_t heads, int64_t window, int64_t global,
                        const Tensor& key_padding_mask, bool causal = false, Tensor* weights = nullptr);
Tensor window_attention_reference(const Tensor& qkv, int64_t heads, int64_t window, int64_t global,
                                  const Tensor& key_padding_mask, bool causal = false, Tensor* weights = nullptr);

// ---- Indexing, masking and joining (autograd/ops/embedding.cpp, autograd/ops/masking.cpp, autograd/ops/join.cpp)
// Rows of `weight` [V, D] picked by integer `ids` [...] -> [..., D]; backward sums repeated ids.
Tensor embedding(const Tensor& weight, const Tensor& ids);
// Ids already on a GPU for a CUDA graph's step, which cannot check or bucket them on the host at
// each replay: stage_ids() checks the host ids (each in [0, bound)) and copies them, and with
// `with_buckets` the embedding backward's buckets, into `into`'s GPU tensors (made on the first
// call, rewritten in place after, through pinned staging: no wait for the GPU). The embedding and
// cross_entropy overloads below read them there (no ignored targets).
struct DeviceIds {
  Tensor ids;      // int64 on the GPU, the host ids' shape, each in [0, bound)
  Tensor buckets;  // int64 [3n + 2]: the number of distinct ids, rows [n], starts [n + 1], positions [n]
  int64_t bound = 0;
};
// `stream`: the GPU's compute stream, or its copy stream (core/gpu_stream.h) for an upload that
// runs while the compute stream works (the caller orders the two with events).
void stage_ids(const Tensor& host_ids, int64_t bound, bool with_buckets, Device device, DeviceIds& into,
               GpuStream stream = GpuStream::Compute);
// Copies `bytes` of host memory into `dst`, a contiguous GPU tensor of exactly that many bytes,
// through pinned staging: one asynchronous copy, no kernel, no wait (autograd/ops/views.cpp).
void upload_into(const Tensor& dst, const void* host, int64_t bytes, GpuStream stream = GpuStream::Compute);
Tensor embedding(const Tensor& weight, const DeviceIds& ids);
// x where mask is false, `value` where it is true; mask (bool) broadcasts to x.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
// a where cond, else b; all three broadcast together.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// torch.tril / torch.triu: the lower (upper) triangle of the last two dims, element [i, j] kept where
// j - i <= k (>= k), zero elsewhere; k = 0 is the main diagonal, k > 0 above it. Any leading batch dims, any
// dtype; differentiable for floating x (the gradient masked the same way). causal = triu(ones({T, T}, Dtype::Bool), 1).
Tensor tril(const Tensor& x, int64_t k = 0);
Tensor triu(const Tensor& x, int64_t k = 0);
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim);

// ---- Splitting into views (autograd/ops/views.cpp): each piece a narrow (or, for unbind, a select) of x, no
// copy. Their backward writes each piece's gradient into its slice of one buffer for x (docs/autograd.md).
// torch.chunk: `chunks` pieces of ceil(size / chunks) along dim, the last smaller (there may be fewer).
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
// torch.split: pieces of split_size along dim, the last smaller; or one piece per size of `sizes`, which
// sum to the dim's size. (NOTE: split(x, {n}) is split_size n; one size alone is std::vector<int64_t>{n}.)
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
// torch.unbind: x.select(dim, i) for every i.
std::vector<Tensor> unbind(const Tensor& x, int64_t dim = 0);

// ---- einops (autograd/ops/rearrange.cpp, autograd/ops/einsum.cpp, patterns read by autograd/ops/axis_pattern.h):
// compositions of views, permute, reshape, sum and matmul, recording no node of their own (differentiable,
// every device). A bad pattern is an error naming the pattern and the axis.
// rearrange(x, "b s (h d) -> b h s d", {{"h", 4}}): named axes, parenthesised groups split (left) and merged
// (right), 1 and () for a dim of size 1, "..." for the dims not named. Each axis is on both sides; an axis's
// size comes from `sizes` or from the input (one unknown axis per group). A view whenever the strides allow.
Tensor rearrange(const Tensor& x, std::string_view pattern,
                 const std::vector<std::pair<std::string, int64_t>>& sizes = {});
// einsum("b h i d, b h j d -> b h i j", q, k): einops's spacing (axes named by words, spaces between them) or
// torch's compact form ("bhid,bhjd->bhij", a letter an axis); "..." for unnamed leading dims, on the output
// too. The output after "->" is required. An axis in one operand only and not in the output is summed; an
// axis of size 1 broadcasts against the other operand's. Lowered to permutes, reshapes, sums and one
// batched matmul (floating operands); no diagonals ("ii->i").
Tensor einsum(std::string_view spec, const Tensor& a);
Tensor einsum(std::string_view spec, const Tensor& a, const Tensor& b);

// ---- Regularisation (autograd/ops/dropout.cpp)
// Zeroes each element with probability p and scales the rest by 1/(1-p) in training; identity otherwise.
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen = default_generator());

// ---- Losses (autograd/ops/cross_entropy.cpp)
// Mean over rows of -log softmax(logits)[target]; logits [N, C], targets int [N]; rows whose target
// is ignore_index are left out of the mean.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100);
// The same with targets staged on the GPU (stage_ids, bound = C): every row counts.
Tensor cross_entropy(const Tensor& logits, const DeviceIds& targets);

// In-place updates outside autograd (copy_, fill_, add_, mul_) are members of Tensor (core/tensor.h).

// ---- Optimiser steps, in place, outside autograd (autograd/ops/optimizer_steps.cpp): one pass over
// each parameter on the CPU, one fused launch per GPU and dtype, with the per-element rules and the
// step's numbers (SgdHyper, AdamHyper) of core/update_rules.h. One gradient, weight decay and (when
// the optimiser keeps one) state buffer per parameter, each of its parameter's device, dtype and shape.
struct SgdHyper;
struct AdamHyper;
// velocities: SGD's momentum buffers, or none (no momentum).
void sgd_step_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
               const std::vector<Tensor>& velocities, const std::vector<double>& weight_decays, const SgdHyper& hyper);
// exp_avg, exp_avg_sq: Adam's first and second moments.
// device_hyper (optional): an int64 GPU tensor holding an AdamHyper's bytes, which the GPU's kernel
// reads instead of `hyper` (a CUDA graph's step, optim::Adam::keep_hyper_on_device).
void adam_step_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const std::vector<Tensor>& exp_avg,
                const std::vector<Tensor>& exp_avg_sq, const std::vector<double>& weight_decays,
                const AdamHyper& hyper, const Tensor& device_hyper = Tensor());
// Gradient clipping: the sum of the squares of every element (in double, the same on every run), and
// t *= value for every tensor.
double sum_of_squares(const std::vector<Tensor>& tensors);
void scale_all_(const std::vector<Tensor>& tensors, double value);
// Clipping by the global norm: when the L2 norm of all the elements exceeds max_norm, every tensor
// is scaled by max_norm / (norm + 1e-6). Returns the norm as a float64 scalar on the tensors'
// device: on one GPU the norm and the factor are computed there and nothing is read back (the host
// does not wait); read the result only when you need it.
Tensor clip_by_norm_(const std::vector<Tensor>& tensors, double max_norm);

}  // namespace ember
