// Multi-head attention, as PyTorch's nn.MultiheadAttention: queries from one sequence, keys and values from
// the same one (self-attention) or another (cross-attention). heads = 1 is single-head attention.
//
//   B = batch, T = query length, S = key length, D = embed_dim, H = heads, Dh = D / H (head size)
//   q = query Wq^T + bq           [B, T, D] -> [B, H, T, Dh] (a strided view, no copy); k, v likewise [B, H, S, Dh]
//   scores = q k^T / sqrt(Dh)     [B, H, T, S]; hidden keys (padding, the future if causal, the mask's) -> -inf
//   weights = softmax(scores)     each query's distribution over keys
//   out = (weights v) merged      [B, T, D] -> output projection
// The four steps after the projections are one fused op (scaled_dot_product_attention, autograd/ops.h); the
// seeds' transcriptions (examples/seed_attention.cpp) write them out and agree with this module.
//
// Parameters: with kdim = vdim = embed_dim (the default), one packed projection `qkv` [3 D, D] (Wq | Wk | Wv,
// PyTorch's in_proj_weight): self-attention projects x once into [B, T, 3 D] and attends on it in place;
// cross-attention applies its rows to query and to key / value apart. Otherwise q_proj, k_proj, v_proj.
// The output projection is `proj`.
#pragma once
#include <cstdint>
#include <memory>
#include <utility>

#include "nn/layers.h"

namespace ember::nn {

// What a query may not see, beyond the keys it is given (PyTorch's names; Ember's one convention for
// booleans: true = may attend in a mask, true = padding in a padding mask).
struct AttentionMasks {
  Tensor attn_mask;         // bool [T, S] or broadcasting to [B, H, T, S], true = may attend; or float, added
  Tensor key_padding_mask;  // bool [B, S], true where the key is padding
  bool causal = false;      // query i sees keys 0 .. i (aligned top-left, as PyTorch's is_causal)
};

// Keys and values kept across calls of incremental decoding (MultiHeadAttention::forward_cached): each new
// query attends to every key so far without the earlier ones projected again. Buffers [B, H, capacity, Dh],
// filled up to `length`. Inference only (no gradient flows into the cache).
struct KVCache {
  Tensor k, v;
  int64_t length = 0;
  void clear() { k = v = Tensor(), length = 0; }
};

class MultiHeadAttention : public Module {
 public:
  // kdim, vdim: the widths of key and value (0: embed_dim).
  MultiHeadAttention(int64_t embed_dim, int64_t heads, Generator& gen, int64_t kdim = 0, int64_t vdim = 0);

  struct Output {
    Tensor out;      // [B, T, D]
    Tensor weights;  // [B, H, T, S], per head, only when asked for; asked for in grad mode, they carry a
                     // gradient (the composed op runs then; under NoGradGuard, the fused one)
  };
  // Self-attention on x [B, T, D]. key_padding_mask: bool [B, T], true where the token is padding (its key
  // gets no attention). causal: query t attends to keys <= t only.
  Output forward(const Tensor& x, const Tensor& key_padding_mask = Tensor(), bool causal = false,
                 bool need_weights = false) const;
  // query [B, T, D], key [B, S, kdim], value [B, S, vdim] (the seeds' forward(Q, K, V, mask)). Called with
  // one tensor three times, it is self-attention's one projection.
  Output forward(const Tensor& query, const Tensor& key, const Tensor& value, const AttentionMasks& masks,
                 bool need_weights = false) const;
  // Incremental decoding: self-attention of the new positions x [B, T_new, D] over the cache's keys and their
  // own (causal among themselves; the cache grows by T_new, up to `capacity` positions). Equal to forward()
  // over the whole sequence, causal, at the new positions.
  Tensor forward_cached(const Tensor& x, KVCache& cache, int64_t capacity) const;
  // Cross-attention of x over `memory` [B, S, kdim], its keys and values projected once into `cache` on the
  // first call (cache.length == 0) and reused after.
  Tensor forward_cached(const Tensor& x, const Tensor& memory, const Tensor& memory_padding, KVCache& cache) const;

  int64_t embed_dim, heads, head_dim, kdim, vdim;
  // Sliding-window attention (the band in autograd/ops.h): keys within `window` positions of a query, plus the
  // first `global` tokens; window < 0 (the default) is full attention.
  int64_t window = -1, global = 0;
  std::shared_ptr<Linear> qkv;                      // packed, when kdim = vdim = embed_dim
  std::shared_ptr<Linear> q_proj, k_proj, v_proj;  // otherwise
  std::shared_ptr<Linear> proj;

 private:
  AttentionBand band() const { return window < 0 ? AttentionBand{} : AttentionBand{window, global}; }
  Tensor project_query(const Tensor& query) const;                         // [B, T, D]
  std::pair<Tensor, Tensor> project_key_value(const Tensor& key, const Tensor& value) const;  // [B, S, D] each
  Tensor split_heads(const Tensor& x) const;   // [B, T, D] -> [B, H, T, Dh], a view
  Tensor merge_heads(const Tensor& x) const;   // [B, H, T, Dh] -> [B, T, D]
};

}  // namespace ember::nn
