// The seeds' MultiHeadAttention classes written in Ember (examples/seed_attention.h) against
// nn::MultiHeadAttention with the same weights, in float64: outputs, per-head weights and every gradient,
// for 1, 4 and 8 heads, with and without a mask, and (seed 001) with keys from another sequence (T != S).
#include <cmath>
#include <cstdint>
#include <vector>

#include "autograd/grad_mode.h"
#include "examples/seed_attention.h"
#include "nn/attention.h"
#include "tests/helpers.h"

using namespace ember;
using namespace ember::testing;

namespace {

Tensor rnd(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return uniform(shape, -1, 1, gen, Dtype::Float64);
}

// The seeds' mask: 1 where a key may be seen, 0 where hidden (review 1's last two keys), [B, 1, 1, keys].
Tensor seed_mask(int64_t B, int64_t keys) {
  Tensor m = ones({B, 1, 1, keys}, Dtype::Int64);
  m.narrow(0, 1, 1).narrow(3, keys - 2, 2).fill_(0);
  return m;
}

}  // namespace

TEST_CASE("seed 001 (view / transpose / matmul, W_q W_k W_v) equals nn::MultiHeadAttention, T != S, masks") {
  const int64_t B = 2, T = 3, S = 5, D = 16;
  for (int64_t heads : {1, 4, 8}) {
    for (bool masked : {false, true}) {
      CAPTURE(heads);
      CAPTURE(masked);
      Generator gen(static_cast<uint64_t>(heads));
      seeds::ViewMultiHeadAttention seed(D, heads, gen);
      nn::MultiHeadAttention mha(D, heads, gen);
      seed.to(Dtype::Float64);
      mha.to(Dtype::Float64);
      {
        NoGradGuard no_grad;  // the packed projection is W_q, W_k, W_v stacked (PyTorch's in_proj_weight)
        mha.qkv->weight.copy_(cat({seed.W_q->weight, seed.W_k->weight, seed.W_v->weight}, 0));
        mha.qkv->bias.copy_(cat({seed.W_q->bias, seed.W_k->bias, seed.W_v->bias}, 0));
        mha.proj->weight.copy_(seed.W_o->weight);
        mha.proj->bias.copy_(seed.W_o->bias);
      }
      Tensor q1 = rnd({B, T, D}, 1).requires_grad_(), kv1 = rnd({B, S, D}, 2).requires_grad_();
      Tensor q2 = q1.detach().clone().requires_grad_(), kv2 = kv1.detach().clone().requires_grad_();
      auto [seed_out, seed_weights] = seed.forward(q1, kv1, kv1, masked ? seed_mask(B, S) : Tensor());
      nn::AttentionMasks masks;
      if (masked) masks.attn_mask = seed_mask(B, S) != 0;
      nn::MultiHeadAttention::Output ours = mha.forward(q2, kv2, kv2, masks, /*need_weights=*/true);
      // The seed divides by torch.sqrt(torch.tensor(d_k, dtype=torch.float32)), a float32 root: exact for
      // d_k = 16 and 4, rounded (relative 2^-24) for d_k = 2 at 8 heads, which the tolerance then allows.
      const float root = std::sqrt(float(D / heads));
      const double tol = double(root) * double(root) == double(D / heads) ? 1e-12 : 1e-9;
      check_close(ours.out, seed_out, tol);
      check_close(ours.weights, seed_weights, tol);
      Tensor g = rnd(seed_out.shape(), 3);
      sum(seed_out * g).backward();
      sum(ours.out * g).backward();
      check_close(q2.grad(), q1.grad(), tol);
      check_close(kv2.grad(), kv1.grad(), tol);
      check_close(mha.qkv->weight.grad(),
                  cat({seed.W_q->weight.grad(), seed.W_k->weight.grad(), seed.W_v->weight.grad()}, 0), tol);
      check_close(mha.qkv->bias.grad(), cat({seed.W_q->bias.grad(), seed.W_k->bias.grad(), seed.W_v->bias.grad()}, 0),
                  tol);
      check_close(mha.proj->weight.grad(), seed.W_o->weight.grad(), tol);
    }
  }
}

TEST_CASE("seed 000 (chunk, rearrange, einsum) equals nn::MultiHeadAttention's self-attention, with a mask") {
  const int64_t B = 2, T = 6, D = 16;
  for (int64_t heads : {1, 4, 8}) {
    for (bool masked : {false, true}) {
      CAPTURE(heads);
      CAPTURE(masked);
      Generator gen(static_cast<uint64_t>(10 + heads));
      seeds::EinopsMultiHeadAttention seed(D, heads, gen);
      nn::MultiHeadAttention mha(D, heads, gen);
      seed.to(Dtype::Float64);
      mha.to(Dtype::Float64);
      {
        NoGradGuard no_grad;
        mha.qkv->weight.copy_(seed.qkv_proj->weight);
        mha.qkv->bias.copy_(seed.qkv_proj->bias);
        mha.proj->weight.copy_(seed.out_proj->weight);
        mha.proj->bias.copy_(seed.out_proj->bias);
      }
      Tensor x1 = rnd({B, T, D}, 4).requires_grad_(), x2 = x1.detach().clone().requires_grad_();
      auto [seed_out, seed_weights] = seed.forward(x1, masked ? seed_mask(B, T) : Tensor());
      // Without weights: the fused self-attention (one op on the packed projection); with them, the composed.
      nn::AttentionMasks masks;
      if (masked) masks.attn_mask = seed_mask(B, T) != 0;
      Tensor fused = mha.forward(x2, x2, x2, masks).out;
      check_close(fused, seed_out, 1e-12);
      Tensor g = rnd(seed_out.shape(), 5);
      sum(seed_out * g).backward();
      sum(fused * g).backward();
      check_close(x2.grad(), x1.grad(), 1e-12);
      check_close(mha.qkv->weight.grad(), seed.qkv_proj->weight.grad(), 1e-12);
      check_close(mha.proj->weight.grad(), seed.out_proj->weight.grad(), 1e-12);
      {
        NoGradGuard no_grad;
        check_close(mha.forward(x2, x2, x2, masks, /*need_weights=*/true).weights, seed_weights, 1e-12);
      }
    }
  }
}
