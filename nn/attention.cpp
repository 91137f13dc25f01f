// Multi-head attention: the projections, the fused attention op, the output projection; and the cached
// forms for incremental decoding.
#include <cstdint>
#include <memory>
#include <utility>

#include "nn/attention.h"

#include "autograd/grad_mode.h"
#include "core/error.h"
#include "core/shape.h"

namespace ember::nn {

MultiHeadAttention::MultiHeadAttention(int64_t embed_dim, int64_t heads, Generator& gen, int64_t kdim, int64_t vdim)
    : embed_dim(embed_dim),
      heads(heads),
      head_dim(heads > 0 ? embed_dim / heads : 0),
      kdim(kdim > 0 ? kdim : embed_dim),
      vdim(vdim > 0 ? vdim : embed_dim) {
  EMBER_CHECK(heads > 0 && embed_dim > 0 && embed_dim % heads == 0,
              "MultiHeadAttention: embed_dim {} is not divisible by heads {}", embed_dim, heads);
  EMBER_CHECK(kdim >= 0 && vdim >= 0, "MultiHeadAttention: kdim and vdim must be >= 0 (0: embed_dim), got {} and {}",
              kdim, vdim);
  if (this->kdim == embed_dim && this->vdim == embed_dim) {
    qkv = register_module("qkv", std::make_shared<Linear>(embed_dim, 3 * embed_dim, gen));
  } else {
    q_proj = register_module("q_proj", std::make_shared<Linear>(embed_dim, embed_dim, gen));
    k_proj = register_module("k_proj", std::make_shared<Linear>(this->kdim, embed_dim, gen));
    v_proj = register_module("v_proj", std::make_shared<Linear>(this->vdim, embed_dim, gen));
  }
  proj = register_module("proj", std::make_shared<Linear>(embed_dim, embed_dim, gen));
}

Tensor MultiHeadAttention::split_heads(const Tensor& x) const {
  return x.view({x.size(0), x.size(1), heads, head_dim}).transpose(1, 2);
}

Tensor MultiHeadAttention::merge_heads(const Tensor& x) const {
  return x.transpose(1, 2).reshape({x.size(0), x.size(2), embed_dim});  // a view: the op lays its output so
}

// The packed projection's rows [first, first + count) applied to x: one GEMM, no copy of the weights.
namespace {
Tensor packed_rows(const Linear& packed, const Tensor& x, int64_t first, int64_t count) {
  return linear(x, packed.weight.narrow(0, first, count), packed.bias.narrow(0, first, count));
}
}  // namespace

Tensor MultiHeadAttention::project_query(const Tensor& query) const {
  return qkv ? packed_rows(*qkv, query, 0, embed_dim) : q_proj->forward(query);
}

std::pair<Tensor, Tensor> MultiHeadAttention::project_key_value(const Tensor& key, const Tensor& value) const {
  if (!qkv) return {k_proj->forward(key), v_proj->forward(value)};
  if (key.impl() == value.impl()) {  // one GEMM for both: [B, S, 2 D], k and v its halves (views)
    Tensor kv = packed_rows(*qkv, key, embed_dim, 2 * embed_dim);
    return {kv.narrow(2, 0, embed_dim), kv.narrow(2, embed_dim, embed_dim)};
  }
  return {packed_rows(*qkv, key, embed_dim, embed_dim), packed_rows(*qkv, value, 2 * embed_dim, embed_dim)};
}

MultiHeadAttention::Output MultiHeadAttention::forward(const Tensor& x, const Tensor& key_padding_mask, bool causal,
                                                       bool need_weights) const {
  AttentionMasks masks;
  masks.key_padding_mask = key_padding_mask;
  masks.causal = causal;
  return forward(x, x, x, masks, need_weights);
}

MultiHeadAttention::Output MultiHeadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                                       const AttentionMasks& masks, bool need_weights) const {
  auto scope = forward_scope();
  EMBER_CHECK(query.defined() && query.dim() == 3 && query.size(2) == embed_dim,
              "MultiHeadAttention: query {} is not [B, T, {}]", query.defined() ? shape_str(query.shape()) : "undefined",
              embed_dim);
  EMBER_CHECK(key.defined() && value.defined() && key.dim() == 3 && value.dim() == 3 && key.size(2) == kdim &&
                  value.size(2) == vdim && key.size(0) == query.size(0) && value.size(0) == query.size(0) &&
                  key.size(1) == value.size(1),
              "MultiHeadAttention: key {} and value {} must be [B, S, {}] and [B, S, {}] for query {}",
              key.defined() ? shape_str(key.shape()) : "undefined",
              value.defined() ? shape_str(value.shape()) : "undefined", kdim, vdim, shape_str(query.shape()));
  Tensor weights;
  AttentionOptions o;
  o.mask = masks.attn_mask, o.key_padding_mask = masks.key_padding_mask, o.causal = masks.causal, o.band = band();
  o.weights = need_weights ? &weights : nullptr;
  Tensor merged;
  if (need_weights && grad_enabled()) {
    // Weights that carry a gradient (as the seeds' classes return them) need the scores in full: the composed
    // op (as PyTorch's MultiheadAttention leaves its fused path when asked for weights).
    auto [k, v] = project_key_value(key, value);
    merged = merge_heads(scaled_dot_product_attention_reference(split_heads(project_query(query)), split_heads(k),
                                                                split_heads(v), o));
  } else if (qkv && query.impl() == key.impl() && key.impl() == value.impl()) {
    // Self-attention: one projection [B, T, 3 D], attended on in place (one fused op, one node; its backward
    // writes one [B, T, 3 D] gradient). attention_reference (autograd/ops/attention.cpp) is the same computation
    // composed from views, matmul and softmax.
    merged = attention(qkv->forward(query), heads, o);
  } else {
    auto [k, v] = project_key_value(key, value);
    merged = merge_heads(scaled_dot_product_attention(split_heads(project_query(query)), split_heads(k),
                                                      split_heads(v), o));
  }
  return {proj->forward(merged), weights};
}

Tensor MultiHeadAttention::forward_cached(const Tensor& x, KVCache& cache, int64_t capacity) const {
  auto scope = forward_scope();
  EMBER_CHECK(qkv, "MultiHeadAttention::forward_cached: self-attention needs the packed projection (kdim = vdim = "
              "embed_dim)");
  EMBER_CHECK(!grad_enabled(), "MultiHeadAttention::forward_cached: incremental decoding is inference only (use "
              "NoGradGuard)");
  EMBER_CHECK(x.dim() == 3 && x.size(2) == embed_dim, "MultiHeadAttention::forward_cached: x {} is not [B, T, {}]",
              shape_str(x.shape()), embed_dim);
  const int64_t B = x.size(0), T_new = x.size(1), past = cache.length;
  EMBER_CHECK(past + T_new <= capacity, "MultiHeadAttention::forward_cached: {} cached and {} new positions exceed the "
              "capacity {}", past, T_new, capacity);
  if (!cache.k.defined()) {
    cache.k = zeros({B, heads, capacity, head_dim}, x.dtype(), x.device());
    cache.v = zeros({B, heads, capacity, head_dim}, x.dtype(), x.device());
  }
  EMBER_CHECK(cache.k.size(0) == B && cache.k.size(2) == capacity,
              "MultiHeadAttention::forward_cached: the cache holds {} for batch {} and capacity {}",
              shape_str(cache.k.shape()), B, capacity);
  Tensor projected = qkv->forward(x);  // [B, T_new, 3 D]
  Tensor q = split_heads(projected.narrow(2, 0, embed_dim));
  cache.k.narrow(2, past, T_new).copy_(split_heads(projected.narrow(2, embed_dim, embed_dim)));
  cache.v.narrow(2, past, T_new).copy_(split_heads(projected.narrow(2, 2 * embed_dim, embed_dim)));
  cache.length = past + T_new;
  // The new query i sits at position past + i: it sees keys 0 .. past + i (causal aligned bottom-right, as
  // the whole sequence's causal mask at these rows). One new query sees every key: no mask.
  Tensor mask;
  if (T_new > 1) {
    mask = Tensor::empty({T_new, cache.length}, Dtype::Bool);
    bool* allowed = mask.data<bool>();
    for (int64_t i = 0; i < T_new; ++i)
      for (int64_t j = 0; j < cache.length; ++j) allowed[i * cache.length + j] = j <= past + i;
    mask = mask.to(x.device());
  }
  Tensor out = scaled_dot_product_attention(q, cache.k.narrow(2, 0, cache.length), cache.v.narrow(2, 0, cache.length),
                                            mask, false, band());
  return proj->forward(merge_heads(out));
}

Tensor MultiHeadAttention::forward_cached(const Tensor& x, const Tensor& memory, const Tensor& memory_padding,
                                          KVCache& cache) const {
  auto scope = forward_scope();
  EMBER_CHECK(!grad_enabled(), "MultiHeadAttention::forward_cached: incremental decoding is inference only (use "
              "NoGradGuard)");
  if (cache.length == 0) {  // the memory's keys and values, once per sequence
    auto [k, v] = project_key_value(memory, memory);
    cache.k = split_heads(k);
    cache.v = split_heads(v);
    cache.length = memory.size(1);
  }
  AttentionOptions o;
  o.key_padding_mask = memory_padding;
  return proj->forward(merge_heads(scaled_dot_product_attention(split_heads(project_query(x)), cache.k, cache.v, o)));
}

}  // namespace ember::nn
