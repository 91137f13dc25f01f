// Cross-attention, the decoder block, the encoder-decoder model and incremental decoding: the module against
// the attention written out head by head, the cache against a full recompute (float64, 1e-12), greedy
// decoding against argmax of full recomputes, gradchecks, bad inputs.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "autograd/grad_mode.h"
#include "nn/attention.h"
#include "nn/decoder.h"
#include "nn/seq2seq.h"
#include "tests/helpers.h"

using namespace ember;
using namespace ember::testing;

namespace {

Tensor rnd(const Shape& shape, uint64_t seed, Dtype dtype = Dtype::Float64) {
  Generator gen(seed);
  return uniform(shape, -1, 1, gen, dtype);
}

// Cross-attention written out from the module's weights, head by head (the seed's formula, no fused op).
Tensor cross_attention_by_hand(const nn::MultiHeadAttention& mha, const Tensor& query, const Tensor& kv,
                               const Tensor& memory_padding) {
  const int64_t B = query.size(0), T = query.size(1), S = kv.size(1), D = mha.embed_dim, H = mha.heads,
                Dh = mha.head_dim;
  const Tensor& W = mha.qkv->weight;
  const Tensor& bias = mha.qkv->bias;
  Tensor q = matmul(query, W.narrow(0, 0, D).transpose(0, 1)) + bias.narrow(0, 0, D);
  Tensor k = matmul(kv, W.narrow(0, D, D).transpose(0, 1)) + bias.narrow(0, D, D);
  Tensor v = matmul(kv, W.narrow(0, 2 * D, D).transpose(0, 1)) + bias.narrow(0, 2 * D, D);
  std::vector<Tensor> heads;
  for (int64_t h = 0; h < H; ++h) {
    Tensor qh = q.narrow(2, h * Dh, Dh), kh = k.narrow(2, h * Dh, Dh), vh = v.narrow(2, h * Dh, Dh);
    Tensor scores = matmul(qh, kh.transpose(1, 2)) / std::sqrt(double(Dh));  // [B, T, S]
    if (memory_padding.defined()) scores = masked_fill(scores, memory_padding.view({B, 1, S}), -INFINITY);
    heads.push_back(matmul(softmax(scores, -1), vh));
  }
  Tensor merged = cat(heads, 2);  // [B, T, D]
  (void)T;
  return mha.proj->forward(merged);
}

Tensor padding_rows(const std::vector<int64_t>& lengths, int64_t S) {
  Tensor pad = Tensor::empty({int64_t(lengths.size()), S}, Dtype::Bool);
  for (size_t b = 0; b < lengths.size(); ++b)
    for (int64_t j = 0; j < S; ++j) pad.data<bool>()[int64_t(b) * S + j] = j >= lengths[b];
  return pad;
}

}  // namespace

TEST_CASE("nn: cross-attention (T != S) equals the attention written out head by head, with memory padding") {
  Generator gen(1);
  nn::MultiHeadAttention mha(8, 2, gen);
  mha.to(Dtype::Float64);
  Tensor query = rnd({2, 3, 8}, 2), memory = rnd({2, 5, 8}, 3);
  Tensor pad = padding_rows({5, 3}, 5);
  nn::AttentionMasks masks;
  masks.key_padding_mask = pad;
  Tensor out = mha.forward(query, memory, memory, masks).out;
  check_close(out, cross_attention_by_hand(mha, query, memory, pad), 1e-12);
  // key and value given apart (two projections) give the same.
  Tensor memory_copy = memory.clone();
  check_close(mha.forward(query, memory, memory_copy, masks).out, out, 1e-12);
}

TEST_CASE("nn: MultiHeadAttention with kdim and vdim has separate projections and per-head weights") {
  Generator gen(4);
  nn::MultiHeadAttention mha(6, 3, gen, /*kdim=*/4, /*vdim=*/5);
  CHECK(mha.qkv == nullptr);
  CHECK(mha.k_proj->weight.shape() == Shape({6, 4}));
  CHECK(mha.v_proj->weight.shape() == Shape({6, 5}));
  mha.to(Dtype::Float64);
  Tensor query = rnd({2, 3, 6}, 5), key = rnd({2, 4, 4}, 6), value = rnd({2, 4, 5}, 7);
  nn::MultiHeadAttention::Output o = mha.forward(query, key, value, {}, /*need_weights=*/true);
  CHECK(o.out.shape() == Shape({2, 3, 6}));
  CHECK(o.weights.shape() == Shape({2, 3, 3, 4}));
  // Each query's weights sum to 1, per head.
  check_close(sum(o.weights, {-1}), ones({2, 3, 3}, Dtype::Float64), 1e-12);
  check_error([&] { mha.forward(query, rnd({2, 4, 6}, 8), value, {}); }, "key [2, 4, 6] and value [2, 4, 5] must be");
  check_gradient([&](const std::vector<Tensor>& in) { return mha.forward(in[0], in[1], in[2], {}).out; },
                 {rnd({1, 2, 6}, 9), rnd({1, 3, 4}, 10), rnd({1, 3, 5}, 11)});
}

TEST_CASE("nn: self-attention through forward(q, k, v) with an attention mask equals the fused self-attention") {
  Generator gen(12);
  nn::MultiHeadAttention mha(8, 4, gen);
  mha.to(Dtype::Float64);
  Tensor x = rnd({2, 5, 8}, 13);
  nn::AttentionMasks masks;
  masks.causal = true;
  check_close(mha.forward(x, x, x, masks).out, mha.forward(x, Tensor(), true).out, 1e-14);
  // A boolean mask of the causal pattern is the same as causal.
  Tensor tril = Tensor::empty({5, 5}, Dtype::Bool);
  for (int64_t i = 0; i < 25; ++i) tril.data<bool>()[i] = i % 5 <= i / 5;
  nn::AttentionMasks as_mask;
  as_mask.attn_mask = tril;
  check_close(mha.forward(x, x, x, as_mask).out, mha.forward(x, Tensor(), true).out, 1e-12);
  // The weights the module returns carry a gradient.
  Tensor xr = x.clone().requires_grad_();
  nn::MultiHeadAttention::Output o = mha.forward(xr, xr, xr, masks, true);
  CHECK(o.weights.requires_grad());
  sum(o.weights * rnd(o.weights.shape(), 14)).backward();
  CHECK(xr.grad().defined());
}

TEST_CASE("gradcheck: the decoder block (float64), with target and memory padding") {
  Generator gen(15);
  nn::TransformerDecoderLayer layer(4, 2, 8, 0.0, gen);
  layer.to(Dtype::Float64);
  Tensor memory_pad = padding_rows({3, 2}, 3), target_pad = padding_rows({2, 1}, 2);
  check_gradient([&](const std::vector<Tensor>& in) { return layer.forward(in[0], in[1], target_pad, memory_pad); },
                 {rnd({2, 2, 4}, 16), rnd({2, 3, 4}, 17)});
}

TEST_CASE("nn: the decoder block is causal: a position's output does not depend on later positions") {
  Generator gen(18);
  nn::TransformerDecoderLayer layer(8, 2, 16, 0.0, gen);
  layer.to(Dtype::Float64);
  Tensor memory = rnd({1, 4, 8}, 19), x = rnd({1, 6, 8}, 20);
  Tensor changed = x.clone();
  changed.narrow(1, 4, 2).copy_(rnd({1, 2, 8}, 21));
  check_close(layer.forward(x, memory).narrow(1, 0, 4), layer.forward(changed, memory).narrow(1, 0, 4), 1e-14);
}

TEST_CASE("nn: incremental decoding with the key/value cache equals a full recompute (float64, 1e-12)") {
  Generator gen(22);
  nn::EncoderDecoderConfig c;
  c.source_vocab = 11, c.target_vocab = 13, c.max_len = 12, c.dim = 16, c.heads = 4, c.ffn_dim = 32, c.dropout = 0.0;
  nn::EncoderDecoder model(c, gen);
  model.to(Dtype::Float64);
  model.eval();
  // Two sources of different lengths (0 = padding), a target of 7 tokens fed 1, then 3, then 1, 1, 1 at a time.
  Tensor source = tensor({3, 4, 5, 6, 7, 2, 9, 0, 0, 0}, {2, 5}, Dtype::Int64);
  Tensor target = tensor({1, 5, 6, 7, 8, 9, 10, 1, 3, 3, 4, 12, 2, 11}, {2, 7}, Dtype::Int64);
  NoGradGuard no_grad;
  Tensor full_logits = model.forward(source, target);  // [2, 7, 13]
  nn::EncoderDecoder::Generation state = model.start(source);
  int64_t at = 0;
  for (int64_t n : {1, 3, 1, 1, 1}) {
    CAPTURE(at);
    Tensor step = model.decode_step(target.narrow(1, at, n).contiguous(), state);
    check_close(step, full_logits.narrow(1, at, n), 1e-12);
    at += n;
  }
  CHECK(state.length == 7);
  check_error([&] { model.decode_step(ones({2, 6}, Dtype::Int64), state); }, "target length 13 exceeds max_len 12");
}

TEST_CASE("nn: greedy decoding picks each step's argmax of a full recompute, and stops at eos") {
  Generator gen(23);
  nn::EncoderDecoderConfig c;
  c.source_vocab = 9, c.target_vocab = 9, c.max_len = 10, c.dim = 16, c.heads = 2, c.ffn_dim = 32, c.dropout = 0.0;
  nn::EncoderDecoder model(c, gen);
  model.to(Dtype::Float64);  // a fresh model's logits are close: float64, so that no near-tie flips between
  model.eval();              // the batched decoding and the one-review recompute
  Tensor source = tensor({3, 4, 5, 6, 2, 7, 0, 0}, {2, 4}, Dtype::Int64);
  const int64_t bos = 1, eos = 2;
  Tensor generated = model.greedy_decode(source, bos, eos, 6);
  REQUIRE(generated.dim() == 2);
  REQUIRE(generated.size(0) == 2);
  // The same sequence by recomputing the whole target at each step.
  NoGradGuard no_grad;
  for (int64_t b = 0; b < 2; ++b) {
    std::vector<int64_t> seq{bos};
    const std::vector<int64_t> got = generated.narrow(0, b, 1).contiguous().to_vector<int64_t>();
    Tensor src = source.narrow(0, b, 1).contiguous();
    for (size_t step = 0; step < got.size(); ++step) {
      if (!seq.empty() && seq.back() == eos) {
        CHECK(got[step] == 0);  // after eos: padding
        continue;
      }
      Tensor logits = model.forward(src, from_vector(seq, {1, int64_t(seq.size())}));
      Tensor last = logits.narrow(1, int64_t(seq.size()) - 1, 1).reshape({c.target_vocab});
      const int64_t best = 1 + argmax(last.narrow(0, 1, c.target_vocab - 1), 0).item<int64_t>();  // never padding
      CHECK(got[step] == best);
      seq.push_back(best);
    }
  }
  check_error([&] { model.greedy_decode(source, bos, eos, 10); }, "max_new 10 must be in [0, 10)");
}

TEST_CASE("nn: forward_cached is inference only, and its cache has a capacity") {
  Generator gen(24);
  nn::MultiHeadAttention mha(8, 2, gen);
  nn::KVCache cache;
  check_error([&] { mha.forward_cached(rnd({1, 2, 8}, 25, Dtype::Float32), cache, 4); }, "inference only");
  NoGradGuard no_grad;
  mha.forward_cached(rnd({1, 3, 8}, 26, Dtype::Float32), cache, 4);
  check_error([&] { mha.forward_cached(rnd({1, 2, 8}, 27, Dtype::Float32), cache, 4); },
              "3 cached and 2 new positions exceed the capacity 4");
}
