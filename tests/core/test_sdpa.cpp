// scaled_dot_product_attention: known numbers, the fused op against the composed reference (values, weights,
// gradients) over every mask form, T != S, strided and broadcast operands, causal (aligned top-left), the
// band and a custom scale; float64 gradchecks; queries that see no key; the output's layout; bfloat16;
// the CPU against the (emulated) GPU; bad inputs.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/grad_mode.h"
#include "tests/helpers.h"

using namespace ember;
using namespace ember::testing;

namespace {

Tensor rnd(const Shape& shape, uint64_t seed, Dtype dtype = Dtype::Float32, double scale = 1.0) {
  Generator gen(seed);
  return uniform(shape, -scale, scale, gen, dtype);
}

// A bool tensor from 0/1 values.
Tensor bools(const std::vector<int>& values, const Shape& shape) {
  Tensor t = Tensor::empty(shape, Dtype::Bool);
  for (size_t i = 0; i < values.size(); ++i) t.data<bool>()[i] = values[i] != 0;
  return t;
}

// A random bool mask of `shape` where each entry may attend with probability 3/4.
Tensor random_allows(const Shape& shape, uint64_t seed) {
  Tensor u = rnd(shape, seed);
  return gt(u, full({1}, -0.5));
}

// The masks of the comparisons: none, bool [T, S], bool [B, 1, 1, S] (key padding), bool [B, H, T, S],
// additive [T, S] with -inf entries, additive [B, 1, T, S].
struct MaskCase {
  std::string name;
  std::function<Tensor(int64_t B, int64_t H, int64_t T, int64_t S, Dtype dtype)> make;
};

std::vector<MaskCase> mask_cases() {
  return {
      {"none", [](int64_t, int64_t, int64_t, int64_t, Dtype) { return Tensor(); }},
      {"bool [T, S]", [](int64_t, int64_t, int64_t T, int64_t S, Dtype) { return random_allows({T, S}, 31); }},
      {"bool key padding [B, 1, 1, S]",
       [](int64_t B, int64_t, int64_t, int64_t S, Dtype) {
         Tensor m = Tensor::empty({B, 1, 1, S}, Dtype::Bool);
         for (int64_t b = 0; b < B; ++b)
           for (int64_t j = 0; j < S; ++j) m.data<bool>()[b * S + j] = j < S - b % 3;  // trailing padding
         return m;
       }},
      {"bool [B, H, T, S]", [](int64_t B, int64_t H, int64_t T, int64_t S, Dtype) { return random_allows({B, H, T, S}, 32); }},
      {"additive [T, S]",
       [](int64_t, int64_t, int64_t T, int64_t S, Dtype dtype) {
         Tensor add = rnd({T, S}, 33, Dtype::Float64, 2.0);
         add = where(random_allows({T, S}, 34), add, full({1}, -INFINITY, Dtype::Float64));
         return add.to(dtype);
       }},
      {"additive [B, 1, T, S]",
       [](int64_t B, int64_t, int64_t T, int64_t S, Dtype dtype) {
         return rnd({B, 1, T, S}, 35, Dtype::Float64, 2.0).to(dtype);
       }},
  };
}

struct Shapes {
  int64_t B, H, T, S, Dh, Dv;
};

}  // namespace

DEVICE_TEST_CASE("sdpa: known numbers: one query over two keys, a mask, causal, a custom scale") {
  // q = [1, 0]; keys [1, 0] and [0, 1]; values [1, 2] and [3, 4]. scores / sqrt(2): [1/sqrt(2), 0].
  Tensor q = tensor({1, 0}, {1, 1, 2}).to(device), k = tensor({1, 0, 0, 1}, {1, 2, 2}).to(device);
  Tensor v = tensor({1, 2, 3, 4}, {1, 2, 2}).to(device);
  const double p = std::exp(M_SQRT1_2) / (std::exp(M_SQRT1_2) + 1);
  Tensor weights;
  Tensor out = scaled_dot_product_attention(q, k, v, Tensor(), false, {}, std::nullopt, &weights);
  check_values(weights, {p, 1 - p});
  check_values(out, {p * 1 + (1 - p) * 3, p * 2 + (1 - p) * 4});
  // A mask hiding key 0: all weight on key 1.
  out = scaled_dot_product_attention(q, k, v, bools({0, 1}, {1, 1, 2}).to(device), false, {}, std::nullopt, &weights);
  check_values(weights, {0, 1});
  check_values(out, {3, 4});
  // Causal with T = 1 < S = 2, aligned top-left: query 0 sees key 0 only.
  out = scaled_dot_product_attention(q, k, v, Tensor(), true, {}, std::nullopt, &weights);
  check_values(weights, {1, 0});
  check_values(out, {1, 2});
  // scale 2: scores [2, 0], p = e^2 / (e^2 + 1).
  const double p2 = std::exp(2.0) / (std::exp(2.0) + 1);
  out = scaled_dot_product_attention(q, k, v, Tensor(), false, {}, 2.0, &weights);
  check_values(weights, {p2, 1 - p2});
  // An additive mask of [0, 1/sqrt(2)]: the scores become equal.
  out = scaled_dot_product_attention(q, k, v, tensor({0, M_SQRT1_2}, {1, 1, 2}).to(device), false, {}, std::nullopt,
                                     &weights);
  check_values(weights, {0.5, 0.5});
  check_values(out, {2, 3});
}

DEVICE_TEST_CASE("sdpa: the fused op matches the composed reference over every mask form, T != S and Dh != Dv") {
  for (const Shapes& s : {Shapes{2, 3, 5, 7, 4, 6}, Shapes{1, 2, 9, 4, 8, 8}, Shapes{3, 1, 17, 17, 16, 16},
                          Shapes{2, 2, 1, 33, 8, 4}}) {
    for (const MaskCase& m : mask_cases()) {
      for (bool causal : {false, true}) {
        CAPTURE(s.T);
        CAPTURE(s.S);
        CAPTURE(m.name);
        CAPTURE(causal);
        Tensor mask = m.make(s.B, s.H, s.T, s.S, Dtype::Float32);
        if (mask.defined()) mask = mask.to(device);
        Tensor q = rnd({s.B, s.H, s.T, s.Dh}, 1).to(device).requires_grad_();
        Tensor k = rnd({s.B, s.H, s.S, s.Dh}, 2).to(device).requires_grad_();
        Tensor v = rnd({s.B, s.H, s.S, s.Dv}, 3).to(device).requires_grad_();
        Tensor q2 = q.detach().clone().requires_grad_(), k2 = k.detach().clone().requires_grad_(),
               v2 = v.detach().clone().requires_grad_();
        Tensor wa, wb;
        Tensor fused = scaled_dot_product_attention(q, k, v, mask, causal);
        {
          NoGradGuard no_grad;  // the weights of the fused kernels (asked for without a gradient)
          scaled_dot_product_attention(q.detach(), k.detach(), v.detach(), mask, causal, {}, std::nullopt, &wa);
        }
        Tensor reference = scaled_dot_product_attention_reference(q2, k2, v2, mask, causal, {}, std::nullopt, &wb);
        check_close(fused, reference, 1e-5);
        check_close(wa, wb.detach(), 1e-5);
        Tensor g = rnd(fused.shape(), 4).to(device);
        sum(fused * g).backward();
        sum(reference * g).backward();
        check_close(q.grad(), q2.grad(), 2e-5);
        check_close(k.grad(), k2.grad(), 2e-5);
        check_close(v.grad(), v2.grad(), 2e-5);
      }
    }
  }
}

DEVICE_TEST_CASE("gradcheck: sdpa (fused) in float64 over every mask form, T != S, causal and the band") {
  // Small on the CUDA emulator (each finite difference runs the kernels again).
  const Shapes s = cuda_emulated() ? Shapes{1, 2, 3, 4, 2, 3} : Shapes{2, 2, 4, 5, 3, 2};
  for (const MaskCase& m : mask_cases()) {
    for (int variant = 0; variant < 3; ++variant) {  // plain, causal, a band of 1 with one global position
      CAPTURE(m.name);
      CAPTURE(variant);
      const bool causal = variant == 1;
      const AttentionBand band = variant == 2 ? AttentionBand{1, 1} : AttentionBand{};
      Tensor mask = m.make(s.B, s.H, s.T, s.S, Dtype::Float64);
      if (mask.defined()) mask = mask.to(device);
      check_gradient(device,
                     [&](const std::vector<Tensor>& in) {
                       return scaled_dot_product_attention(in[0], in[1], in[2], mask, causal, band);
                     },
                     {random64({s.B, s.H, s.T, s.Dh}, 5), random64({s.B, s.H, s.S, s.Dh}, 6),
                      random64({s.B, s.H, s.S, s.Dv}, 7)});
    }
  }
}

DEVICE_TEST_CASE("sdpa: the band over T != S matches the reference, with each mask form") {
  for (const MaskCase& m : mask_cases()) {
    for (bool causal : {false, true}) {
      CAPTURE(m.name);
      CAPTURE(causal);
      const Shapes s{2, 2, 11, 9, 4, 4};
      Tensor mask = m.make(s.B, s.H, s.T, s.S, Dtype::Float32);
      if (mask.defined()) mask = mask.to(device);
      Tensor q = rnd({s.B, s.H, s.T, s.Dh}, 8).to(device).requires_grad_();
      Tensor k = rnd({s.B, s.H, s.S, s.Dh}, 9).to(device).requires_grad_();
      Tensor v = rnd({s.B, s.H, s.S, s.Dv}, 10).to(device).requires_grad_();
      Tensor q2 = q.detach().clone().requires_grad_();
      const AttentionBand band{2, 1};
      Tensor fused = scaled_dot_product_attention(q, k, v, mask, causal, band);
      Tensor reference = scaled_dot_product_attention_reference(q2, k.detach(), v.detach(), mask, causal, band);
      check_close(fused, reference, 1e-5);
      sum(fused * fused).backward();
      sum(reference * reference).backward();
      check_close(q.grad(), q2.grad(), 2e-5);
    }
  }
}

TEST_CASE("sdpa: causal with T != S is aligned top-left, as PyTorch's is_causal: query i sees keys 0 .. i") {
  for (auto [T, S] : {std::pair<int64_t, int64_t>{3, 6}, {6, 3}, {4, 4}}) {
    CAPTURE(T);
    CAPTURE(S);
    Tensor q = rnd({1, 2, T, 4}, 11, Dtype::Float64), k = rnd({1, 2, S, 4}, 12, Dtype::Float64);
    Tensor v = rnd({1, 2, S, 3}, 13, Dtype::Float64);
    Tensor tril = Tensor::empty({T, S}, Dtype::Bool);
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < S; ++j) tril.data<bool>()[i * S + j] = j <= i;  // torch.ones(T, S).tril()
    check_close(scaled_dot_product_attention(q, k, v, Tensor(), true), scaled_dot_product_attention(q, k, v, tril),
                1e-14);
  }
}

DEVICE_TEST_CASE("sdpa: a query that sees no key gets 0 and sends no gradient, never NaN") {
  // Query 1 of 3 sees nothing: a boolean mask's row of false, and an additive mask's row of -inf.
  Tensor allows = bools({1, 1, 0, 0, 0, 0, 1, 0, 1}, {3, 3});
  Tensor added = where(allows, zeros({1}), full({1}, -INFINITY));
  for (const Tensor& mask : {allows, added}) {
    Tensor q = rnd({1, 1, 3, 2}, 14).to(device).requires_grad_();
    Tensor k = rnd({1, 1, 3, 2}, 15).to(device).requires_grad_();
    Tensor v = rnd({1, 1, 3, 2}, 16).to(device).requires_grad_();
    Tensor weights;
    {
      NoGradGuard no_grad;
      scaled_dot_product_attention(q.detach(), k.detach(), v.detach(), mask.to(device), false, {}, std::nullopt,
                                   &weights);
    }
    Tensor out = scaled_dot_product_attention(q, k, v, mask.to(device));
    sum(out).backward();
    const std::vector<float> o = out.to(Device::cpu()).to_vector<float>(), w = weights.to(Device::cpu()).to_vector<float>();
    CHECK(o[2] == 0.0f);
    CHECK(o[3] == 0.0f);
    CHECK(w[3] == 0.0f);
    CHECK(w[4] == 0.0f);
    CHECK(w[5] == 0.0f);
    const std::vector<float> dq = q.grad().to(Device::cpu()).to_vector<float>();
    CHECK(dq[2] == 0.0f);
    CHECK(dq[3] == 0.0f);
    for (const Tensor& g : {q.grad(), k.grad(), v.grad()})
      for (float x : g.to(Device::cpu()).to_vector<float>()) CHECK(std::isfinite(x));
  }
}

DEVICE_TEST_CASE("sdpa: heads of a [B, T, H, Dh] view are read in place; the output is laid out [B, T, H, Dv]") {
  // The seeds' q = W_q(x).view(B, T, H, Dh).transpose(1, 2): the op reads it in place; its output, transposed
  // back and viewed as [B, T, D], shares the output's memory (no copy); the input's gradient comes back dense.
  const int64_t B = 2, T = 5, H = 3, Dh = 4;
  Tensor x = rnd({B, T, H * Dh}, 17).to(device).requires_grad_();
  Tensor q = x.view({B, T, H, Dh}).transpose(1, 2);
  REQUIRE_FALSE(q.is_contiguous());
  Tensor out = scaled_dot_product_attention(q, q, q);
  Tensor merged = out.transpose(1, 2).view({B, T, H * Dh});  // view(): an error if a copy were needed
  CHECK(merged.raw_data() == out.raw_data());
  Tensor expected = scaled_dot_product_attention_reference(q.detach().contiguous(), q.detach().contiguous(),
                                                           q.detach().contiguous());
  check_close(out, expected, 1e-5);
  sum(merged * merged).backward();
  CHECK(x.grad().is_contiguous());
}

DEVICE_TEST_CASE("sdpa: any leading dims: none, one, two, three") {
  for (const Shape& lead : {Shape{}, Shape{3}, Shape{2, 3}, Shape{2, 1, 3}}) {
    CAPTURE(shape_str(lead));
    Shape qs = lead, ks = lead, vs = lead;
    qs.insert(qs.end(), {4, 5});
    ks.insert(ks.end(), {6, 5});
    vs.insert(vs.end(), {6, 2});
    Tensor q = rnd(qs, 18).to(device), k = rnd(ks, 19).to(device), v = rnd(vs, 20).to(device);
    Tensor mask = random_allows({4, 6}, 21).to(device);
    Tensor out = scaled_dot_product_attention(q, k, v, mask, true);
    Shape os = lead;
    os.insert(os.end(), {4, 2});
    CHECK(out.shape() == os);
    check_close(out, scaled_dot_product_attention_reference(q, k, v, mask, true), 1e-5);
  }
}

DEVICE_TEST_CASE("sdpa: a key padding mask (AttentionOptions) equals the boolean mask that hides the same keys") {
  const int64_t B = 3, H = 2, T = 6, S = 7;
  Tensor pad = Tensor::empty({B, S}, Dtype::Bool);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < S; ++j) pad.data<bool>()[b * S + j] = j >= S - b || j == 1;  // a hole and a tail
  Tensor allows = eq(pad, zeros({1}, Dtype::Bool)).view({B, 1, 1, S});
  Tensor q = rnd({B, H, T, 4}, 22).to(device), k = rnd({B, H, S, 4}, 23).to(device), v = rnd({B, H, S, 4}, 24).to(device);
  AttentionOptions o;
  o.key_padding_mask = pad.to(device);
  o.causal = true;
  check_close(scaled_dot_product_attention(q, k, v, o), scaled_dot_product_attention(q, k, v, allows.to(device), true),
              1e-6);
  // With a boolean mask too: hidden where either hides.
  Tensor extra = random_allows({T, S}, 25);
  o.mask = extra.to(device);
  Tensor both = where(allows, extra, zeros({1}, Dtype::Bool));
  check_close(scaled_dot_product_attention(q, k, v, o), scaled_dot_product_attention(q, k, v, both.to(device), true),
              1e-6);
}

DEVICE_TEST_CASE("sdpa: attention(qkv, heads, options) with a mask equals sdpa on q, k, v viewed from qkv") {
  const int64_t B = 2, T = 6, D = 8, H = 2;
  Tensor qkv = rnd({B, T, 3 * D}, 26).to(device).requires_grad_();
  Tensor qkv2 = qkv.detach().clone().requires_grad_();
  Tensor mask = random_allows({B, 1, T, T}, 27).to(device);
  AttentionOptions o;
  o.mask = mask;
  Tensor fused = attention(qkv, H, o);
  Tensor parts = qkv2.view({B, T, 3, H, D / H}).permute({2, 0, 3, 1, 4});
  Tensor viewed = scaled_dot_product_attention(parts.select(0, 0), parts.select(0, 1), parts.select(0, 2), mask)
                      .transpose(1, 2)
                      .reshape({B, T, D});
  check_close(fused, viewed, 1e-6);
  sum(fused * fused).backward();
  sum(viewed * viewed).backward();
  check_close(qkv.grad(), qkv2.grad(), 1e-5);
}

DEVICE_TEST_CASE("sdpa: the fused op's weights are read-only; the reference's carry a gradient") {
  Tensor q = rnd({1, 2, 3, 4}, 28, Dtype::Float64).to(device).requires_grad_();
  Tensor k = rnd({1, 2, 5, 4}, 29, Dtype::Float64).to(device), v = rnd({1, 2, 5, 3}, 30, Dtype::Float64).to(device);
  Tensor fused_weights, weights;
  scaled_dot_product_attention(q, k, v, Tensor(), false, {}, std::nullopt, &fused_weights);
  CHECK_FALSE(fused_weights.requires_grad());
  scaled_dot_product_attention_reference(q, k, v, Tensor(), false, {}, std::nullopt, &weights);
  CHECK(weights.requires_grad());
  CHECK(weights.shape() == Shape({1, 2, 3, 5}));
  check_close(weights, fused_weights, 1e-12);
  check_gradient(device,
                 [&](const std::vector<Tensor>& in) {
                   Tensor w;
                   scaled_dot_product_attention_reference(in[0], k, v, Tensor(), false, {}, std::nullopt, &w);
                   return w;
                 },
                 {random64({1, 2, 3, 4}, 31)});
}

DEVICE_TEST_CASE("gradcheck: an additive mask that requires grad gets its gradient (a learned bias)") {
  Tensor q = random64({1, 2, 3, 4}, 32).to(device), k = random64({1, 2, 4, 4}, 33).to(device);
  Tensor v = random64({1, 2, 4, 2}, 34).to(device);
  check_gradient(device,
                 [&](const std::vector<Tensor>& in) { return scaled_dot_product_attention(q, k, v, in[0], true); },
                 {random64({2, 3, 4}, 35)});
}

DEVICE_TEST_CASE("sdpa: bfloat16 operands run the fused kernels, within bfloat16's error of float32") {
  const Shapes s{2, 2, 9, 13, 8, 8};
  for (const MaskCase& m : mask_cases()) {
    CAPTURE(m.name);
    Tensor mask = m.make(s.B, s.H, s.T, s.S, Dtype::BFloat16);
    if (mask.defined()) mask = mask.to(device);
    Tensor q = rnd({s.B, s.H, s.T, s.Dh}, 36).to(Dtype::BFloat16).to(device);
    Tensor k = rnd({s.B, s.H, s.S, s.Dh}, 37).to(Dtype::BFloat16).to(device);
    Tensor v = rnd({s.B, s.H, s.S, s.Dv}, 38).to(Dtype::BFloat16).to(device);
    Tensor out = scaled_dot_product_attention(q, k, v, mask, true);
    CHECK(out.dtype() == Dtype::BFloat16);
    Tensor wide_mask = mask.defined() && mask.dtype() == Dtype::BFloat16 ? mask.to(Dtype::Float32) : mask;
    Tensor reference = scaled_dot_product_attention_reference(q.to(Dtype::Float32), k.to(Dtype::Float32),
                                                              v.to(Dtype::Float32), wide_mask, true);
    check_close(out.to(Dtype::Float32), reference, 2e-2);
  }
}

CUDA_TEST_CASE("sdpa: the GPU's kernels agree with the CPU's, forward and backward, over the mask forms") {
  const Device gpu = Device::cuda(0);
  const Shapes s{2, 2, 7, 10, 8, 4};
  for (const MaskCase& m : mask_cases()) {
    for (bool causal : {false, true}) {
      CAPTURE(m.name);
      CAPTURE(causal);
      Tensor mask = m.make(s.B, s.H, s.T, s.S, Dtype::Float32);
      Tensor q = rnd({s.B, s.H, s.T, s.Dh}, 39).requires_grad_(), k = rnd({s.B, s.H, s.S, s.Dh}, 40).requires_grad_();
      Tensor v = rnd({s.B, s.H, s.S, s.Dv}, 41).requires_grad_();
      Tensor qg = q.detach().to(gpu).requires_grad_(), kg = k.detach().to(gpu).requires_grad_(),
             vg = v.detach().to(gpu).requires_grad_();
      Tensor cpu_out = scaled_dot_product_attention(q, k, v, mask, causal);
      Tensor gpu_out = scaled_dot_product_attention(qg, kg, vg, mask.defined() ? mask.to(gpu) : mask, causal);
      check_close(gpu_out.to(Device::cpu()), cpu_out, 1e-5);
      Tensor g = rnd(cpu_out.shape(), 42);
      sum(cpu_out * g).backward();
      sum(gpu_out * g.to(gpu)).backward();
      check_close(qg.grad().to(Device::cpu()), q.grad(), 2e-5);
      check_close(kg.grad().to(Device::cpu()), k.grad(), 2e-5);
      check_close(vg.grad().to(Device::cpu()), v.grad(), 2e-5);
    }
  }
}

TEST_CASE("sdpa: bad inputs are errors that name the op and the shapes") {
  Tensor q = rnd({2, 2, 3, 4}, 43), k = rnd({2, 2, 5, 4}, 44), v = rnd({2, 2, 5, 6}, 45);
  check_error([&] { scaled_dot_product_attention(q, rnd({2, 2, 5, 3}, 1), v); },
              "scaled_dot_product_attention: q [..., T, Dh], k [..., S, Dh] and v [..., S, Dv] must agree");
  check_error([&] { scaled_dot_product_attention(q, k, rnd({2, 2, 4, 6}, 1)); }, "must agree");
  check_error([&] { scaled_dot_product_attention(q, rnd({2, 5, 4}, 1), v); }, "must have one rank");
  check_error([&] { scaled_dot_product_attention(q, rnd({3, 2, 5, 4}, 1), rnd({3, 2, 5, 6}, 1)); },
              "the same leading dims");
  check_error([&] { scaled_dot_product_attention(q.to(Dtype::Float64), k, v); }, "must have one dtype");
  check_error([&] { scaled_dot_product_attention(q.to(Dtype::Int64), k.to(Dtype::Int64), v.to(Dtype::Int64)); },
              "q must be float32, float64 or bfloat16, got int64");
  check_error([&] { scaled_dot_product_attention(q, k, v, random_allows({3, 4}, 1)); },
              "the mask [3, 4] does not broadcast to the scores [..., T, S] = [2, 2, 3, 5]");
  check_error([&] { scaled_dot_product_attention(q, k, v, rnd({3, 5}, 1, Dtype::Float64)); },
              "the mask must be bool (true = may attend) or q's dtype float32");
  check_error([&] { scaled_dot_product_attention(q, k, v, Tensor(), false, AttentionBand{-1, 2}); },
              "global tokens are part of a band");
  check_error([&] { scaled_dot_product_attention(q, k, v, Tensor(), false, {}, NAN); }, "scale must be finite");
  check_error([&] { scaled_dot_product_attention(rnd({4}, 1), rnd({4}, 1), rnd({4}, 1)); }, "(2 or more)");
  AttentionOptions o;
  o.key_padding_mask = zeros({2, 4}, Dtype::Bool);
  check_error([&] { scaled_dot_product_attention(q, k, v, o); }, "key_padding_mask must be bool [B, S]");
  check_error([&] { scaled_dot_product_attention_reference(q, k, rnd({2, 2, 4, 6}, 1)); },
              "scaled_dot_product_attention_reference: q [..., T, Dh]");
}

CUDA_TEST_CASE("sdpa: operands on different devices are an error") {
  Tensor q = rnd({1, 1, 2, 4}, 46), k = rnd({1, 1, 2, 4}, 47);
  check_error([&] { scaled_dot_product_attention(q, k.to(Device::cuda(0)), k); }, "scaled_dot_product_attention");
  check_error([&] { scaled_dot_product_attention(q, k, k, zeros({2, 2}, Dtype::Bool).to(Device::cuda(0))); },
              "scaled_dot_product_attention");
}
