// The attention op: known numbers, the fused kernel against the composed reference (values, weights
// and gradients, with padding and causal masks), float64 gradchecks, and bad inputs.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

#include "autograd/node.h"
#include "core/allocator.h"
#include "core/kernels.h"
#include "core/parallel.h"
#include "tests/attention_args.h"
#include "tests/helpers.h"

using namespace ember;
using namespace ember::testing;

namespace {

Tensor random_qkv(int64_t B, int64_t T, int64_t D, uint64_t seed, Dtype dtype = Dtype::Float32) {
  Generator gen(seed);
  return uniform({B, T, 3 * D}, -2.0, 2.0, gen, dtype);
}

// Padding at the end of each review: review b keeps T - b % T_pad tokens.
// What the CPU's fused kernels keep (core/kernels.h): out, and the probabilities and the rows' stats when
// asked for, in attention_plan's dtypes and layouts (without a band).
struct Kept {
  Tensor out, probs, stats;
};
Kept cpu_attention(const Tensor& qkv, int64_t H, const Tensor& mask, bool causal, bool keep_probs, bool bf16 = false,
                   bool keep_stats = false) {
  const int64_t B = qkv.size(0), T = qkv.size(1), D = qkv.size(2) / 3;
  const On on{-1, int(qkv.dtype())};
  const AttentionArgs args = fused_qkv_args(qkv, H, mask, causal, -1, 0, bf16);
  const AttentionPlan plan = kernel::attention_plan(on, args);
  Kept kept;
  kept.out = Tensor::empty({B, T, D}, qkv.dtype());
  if (keep_probs)
    kept.probs = Tensor::empty(plan.probs_pair_major ? Shape{B, H, (T + 1) / 2, T, 2} : Shape{B, H, T, T},
                               Dtype(plan.probs_dtype));
  if (keep_stats) kept.stats = Tensor::empty({B, H, T, plan.stats_per_row}, Dtype(plan.stats_dtype));
  kernel::attention_forward(on, args, merged_out(kept.out, H), keep_stats ? kept.stats.raw_data() : nullptr,
                            keep_probs ? kept.probs.raw_data() : nullptr);
  return kept;
}

// The probabilities again from the kept stats (kernel::attention_probs), shaped as cpu_attention keeps them.
Tensor cpu_attention_probs(const Tensor& qkv, int64_t H, const Tensor& mask, bool causal, const Tensor& stats,
                          bool bf16) {
  const int64_t B = qkv.size(0), T = qkv.size(1);
  const On on{-1, int(qkv.dtype())};
  const AttentionArgs args = fused_qkv_args(qkv, H, mask, causal, -1, 0, bf16);
  const AttentionPlan plan = kernel::attention_plan(on, args);
  Tensor probs = Tensor::empty(plan.probs_pair_major ? Shape{B, H, (T + 1) / 2, T, 2} : Shape{B, H, T, T},
                               Dtype(plan.probs_dtype));
  kernel::attention_probs(on, args, stats.raw_data(), probs.raw_data());
  return probs;
}

Tensor tail_padding(int64_t B, int64_t T) {
  std::vector<uint8_t> pad(size_t(B * T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) pad[size_t(b * T + t)] = t >= T - (b % 3);
  Tensor mask = Tensor::empty({B, T}, Dtype::Bool);
  for (int64_t i = 0; i < B * T; ++i) mask.data<bool>()[i] = pad[size_t(i)] != 0;
  return mask;
}

}  // namespace

DEVICE_TEST_CASE("attention: known numbers for one head of two tokens") {
  // q = k = v rows: token 0 = [1, 0], token 1 = [0, 1]; scores / sqrt(2): diag 1/sqrt(2), off 0.
  // softmax([a, 0]) with a = 1/sqrt(2): p = e^a / (e^a + 1) = 0.66976..., the other 0.33023...
  Tensor qkv = tensor({1, 0, 1, 0, 1, 0, 0, 1, 0, 1, 0, 1}, {1, 2, 6}).to(device);
  Tensor weights;
  Tensor out = attention(qkv, 1, Tensor(), false, &weights);
  const double p = std::exp(M_SQRT1_2) / (std::exp(M_SQRT1_2) + 1);
  check_values(weights, {p, 1 - p, 1 - p, p});
  check_values(out, {p, 1 - p, 1 - p, p});
  CHECK(out.device() == device);
  CHECK(weights.device() == device);
  // Causal: token 0 sees only itself; token 1 as before.
  out = attention(qkv, 1, Tensor(), true, &weights);
  check_values(weights, {1, 0, 1 - p, p});
  check_values(out, {1, 0, 1 - p, p});
  // Padding token 1: both queries see only token 0.
  Tensor pad = Tensor::empty({1, 2}, Dtype::Bool);
  pad.data<bool>()[0] = false;
  pad.data<bool>()[1] = true;
  out = attention(qkv, 1, pad.to(device), false, &weights);
  check_values(weights, {1, 0, 1, 0});
  check_values(out, {1, 0, 1, 0});
}

DEVICE_TEST_CASE("attention: the fused kernel matches the composed reference, values and gradients") {
  struct Case {
    int64_t B, T, D, heads;
    bool padded, causal;
  };
  for (Case c : {Case{2, 5, 8, 1, false, false}, Case{3, 7, 8, 2, true, false}, Case{2, 6, 12, 4, true, true},
                 Case{4, 33, 16, 8, true, false}, Case{1, 17, 6, 3, false, true}}) {
    CAPTURE(c.B);
    CAPTURE(c.T);
    CAPTURE(c.heads);
    CAPTURE(c.causal);
    Tensor mask = c.padded ? tail_padding(c.B, c.T).to(device) : Tensor();
    Tensor a = random_qkv(c.B, c.T, c.D, 7 + c.T).to(device).requires_grad_();
    Tensor b = a.detach().clone().requires_grad_();
    Tensor wa, wb;
    Tensor fused = attention(a, c.heads, mask, c.causal, &wa);
    Tensor reference = attention_reference(b, c.heads, mask, c.causal, &wb);
    check_close(fused, reference, 1e-5);
    check_close(wa, wb, 1e-5);
    Generator gen(3);
    Tensor g = uniform(fused.shape(), -1, 1, gen).to(device);
    sum(fused * g).backward();
    sum(reference * g).backward();
    check_close(a.grad(), b.grad(), 2e-5);
  }
}

DEVICE_TEST_CASE("attention: a non-contiguous qkv (a transposed view) gives the same result") {
  Tensor qkv = random_qkv(2, 5, 4, 11).to(device);
  Tensor transposed = qkv.transpose(0, 1).contiguous().transpose(0, 1);  // same values, other strides
  REQUIRE_FALSE(transposed.is_contiguous());
  check_close(attention(transposed, 2, Tensor()), attention(qkv, 2, Tensor()), 1e-6);
}

DEVICE_TEST_CASE("gradcheck: attention (fused) in float64 with padding and causal masks") {
  // On the CUDA emulator 2 reviews of 4 tokens (each of the 2 * 72 finite differences runs ~20 kernels).
  const int64_t B = cuda_emulated() ? 2 : 3, T = cuda_emulated() ? 4 : 5;
  Tensor mask = tail_padding(B, T).to(device);
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    check_gradient(device, [&](const std::vector<Tensor>& in) { return attention(in[0], 2, mask, causal); },
                   {random_qkv(B, T, 4, 21, Dtype::Float64)});
    check_gradient(device, [&](const std::vector<Tensor>& in) { return attention_reference(in[0], 2, mask, causal); },
                   {random_qkv(B, T, 4, 22, Dtype::Float64)});
  }
}

TEST_CASE("attention: fused results do not depend on the thread count") {
  Tensor qkv = random_qkv(4, 40, 16, 5).requires_grad_();
  Tensor mask = tail_padding(4, 40);
  std::vector<std::vector<float>> outs, grads;
  const int before = num_threads();
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    qkv.zero_grad();
    Tensor out = attention(qkv, 4, mask);
    sum(out * out).backward();
    outs.push_back(out.detach().to_vector<float>());
    grads.push_back(qkv.grad().to_vector<float>());
  }
  set_num_threads(before);
  CHECK(outs[0] == outs[1]);
  CHECK(outs[0] == outs[2]);
  CHECK(grads[0] == grads[1]);
  CHECK(grads[0] == grads[2]);
}

TEST_CASE("attention_reference scales q, not the [B, H, T, T] scores, and its graph keeps one [B, H, T, T] tensor") {
  const int64_t B = 2, T = 64, D = 8, H = 2, Dh = D / H;
  Tensor mask = tail_padding(B, T);
  Tensor qkv = random_qkv(B, T, D, 51).requires_grad_();
  allocator_for(Device::cpu()).release_cached();  // NOTE: else a request may get a larger cached block
  const int64_t before = memory_stats().allocated;
  Tensor out = attention_reference(qkv, H, mask);
  const int64_t held = memory_stats().allocated - before;  // the graph's saved tensors and the output
  // Every node of the graph: the one scaling by 1 / sqrt(Dh) takes q [B, H, T, Dh], not the scores.
  std::vector<Node*> stack{out.grad_fn().get()};
  std::set<Node*> seen{stack.back()};
  int scalings = 0;
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    if (node->name == "mul_scalar") {
      ++scalings;
      CHECK(shape_str(node->inputs[0].shape) == shape_str({B, H, T, Dh}));
    }
    for (const Edge& edge : node->inputs)
      if (edge.node && seen.insert(edge.node.get()).second) stack.push_back(edge.node.get());
  }
  CHECK(scalings == 1);
  // The probabilities (kept by softmax and by the product with v) are the one [B, H, T, T] tensor held:
  // not the raw or the scaled scores too.
  const int64_t scores_bytes = B * H * T * T * 4;
  CHECK(held >= scores_bytes);
  CHECK(held < 2 * scores_bytes);
}

TEST_CASE("attention: bad inputs are clear errors") {
  Tensor qkv = random_qkv(2, 3, 4, 1);
  check_error([&] { attention(qkv, 3, Tensor()); }, "not divisible by heads 3");
  check_error([&] { attention(zeros({2, 3, 7}), 1, Tensor()); }, "qkv must be [B, T, 3 * D]");
  check_error([&] { attention(zeros({6, 12}), 1, Tensor()); }, "qkv must be [B, T, 3 * D]");
  check_error([&] { attention(qkv, 2, zeros({2, 3})); }, "key_padding_mask must be bool [2, 3]");
  check_error([&] { attention(qkv, 2, zeros({3, 2}, Dtype::Bool)); }, "key_padding_mask must be bool [2, 3]");
  check_error([&] { attention(qkv.to(Dtype::Int64), 2, Tensor()); }, "attention");
}

TEST_CASE("attention: masks anywhere, trailing padding skipped exactly, a query that sees nothing gives 0") {
  const int64_t B = 3, T = 9, D = 8;
  Tensor mask = Tensor::empty({B, T}, Dtype::Bool);
  bool* m = mask.data<bool>();
  for (int64_t t = 0; t < T; ++t) {
    m[0 * T + t] = t == 2 || t == 5 || t >= 7;  // holes and trailing padding
    m[1 * T + t] = t == 0;                      // leading padding only
    m[2 * T + t] = true;                        // nothing to attend to
  }
  Tensor a = random_qkv(B, T, D, 31).requires_grad_();
  Tensor b = a.detach().clone().requires_grad_();
  Tensor wa, wb;
  Tensor fused = attention(a, 2, mask, false, &wa);
  Tensor reference = attention_reference(b, 2, mask, false, &wb);
  // Review 2 sees no key: its output is exactly 0 in both (no NaN), the others agree.
  check_values(fused.select(0, 2), std::vector<double>(size_t(T * D), 0.0), 0);
  check_values(reference.select(0, 2), std::vector<double>(size_t(T * D), 0.0), 0);
  check_close(fused, reference, 1e-5);
  // Review 0's weights on its padded keys are exactly zero; the others sum to one. Review 2's are all 0.
  std::vector<float> w = wa.to_vector<float>();
  for (int64_t i = 0; i < T; ++i) {
    double total = 0;
    for (int64_t j = 0; j < T; ++j) {
      float p = w[size_t(i * T + j)];  // head 0 of review 0
      if (m[j]) CHECK(p == 0.0f);
      total += p;
    }
    CHECK(total == doctest::Approx(1.0).epsilon(1e-6));
  }
  check_values(wa.select(0, 2), std::vector<double>(size_t(2 * T * T), 0.0), 0);
  check_close(wa, wb, 1e-6);
  // Gradients, from an output gradient that is not 0 on review 2 either: review 2 gets exactly 0 (the
  // fused backward wrote NaN into its q and k gradients), and fused and composed agree everywhere.
  Generator gen(9);
  Tensor g = uniform(fused.shape(), -1, 1, gen);
  sum(fused * g).backward();
  sum(reference * g).backward();
  check_values(a.grad().select(0, 2), std::vector<double>(size_t(T * 3 * D), 0.0), 0);
  check_values(b.grad().select(0, 2), std::vector<double>(size_t(T * 3 * D), 0.0), 0);
  check_close(a.grad(), b.grad(), 2e-5);
}

TEST_CASE("attention: with the causal mask and leading padding, queries before the first real token give 0") {
  // Review 0: keys 0..2 padding, so causal queries 0..2 see nothing; review 1: no padding.
  const int64_t B = 2, T = 6, D = 4;
  Tensor mask = zeros({B, T}, Dtype::Bool);
  for (int64_t t = 0; t < 3; ++t) mask.data<bool>()[t] = true;
  for (Dtype dtype : {Dtype::Float32, Dtype::Float64}) {
    Tensor a = random_qkv(B, T, D, 41).to(dtype).requires_grad_();
    Tensor b = a.detach().clone().requires_grad_();
    Tensor fused = attention(a, 2, mask, true), reference = attention_reference(b, 2, mask, true);
    check_values(fused.select(0, 0).narrow(0, 0, 3), std::vector<double>(size_t(3 * D), 0.0), 0);
    check_values(reference.select(0, 0).narrow(0, 0, 3), std::vector<double>(size_t(3 * D), 0.0), 0);
    check_close(fused, reference, 1e-5);
    Generator gen(5);
    Tensor g = uniform(fused.shape(), -1, 1, gen, dtype);
    sum(fused * g).backward();
    sum(reference * g).backward();
    for (double v : a.grad().to_vector<double>()) CHECK(std::isfinite(v));
    check_close(a.grad(), b.grad(), 2e-5);
  }
  // Float64 finite differences through both, the blind queries included.
  Tensor x = random_qkv(B, T, D, 43).to(Dtype::Float64);
  check_gradient([&](auto& in) { return attention(in[0], 2, mask, true); }, {x.clone()});
  check_gradient([&](auto& in) { return attention_reference(in[0], 2, mask, true); }, {x.clone()});
}

TEST_CASE("attention: a bfloat16 qkv keeps its probabilities pair-major; they are the weights handed out") {
  // Rows 2q and 2q + 1 side by side ([B, H, ceil(T / 2), T, 2]), so that dV = P^T dO reads them in place
  // (cpu::gemm_bf16_pair_major); an odd T's extra row is zeros. The rows must be the weights handed out, and
  // those the softmax of the float32 scores within bfloat16's rounding.
  for (int64_t T : {1, 6, 37}) {
    CAPTURE(T);
    const int64_t B = 2, D = 12, H = 3;
    Tensor qkv = random_qkv(B, T, D, 41).to(Dtype::BFloat16);
    Tensor mask = tail_padding(B, T);
    Kept forward = cpu_attention(qkv, H, mask, false, true);
    const int64_t pairs = (T + 1) / 2;
    REQUIRE(forward.probs.shape() == Shape({B, H, pairs, T, 2}));
    Tensor weights;
    attention(qkv, H, mask, false, &weights);
    REQUIRE(weights.dtype() == Dtype::Float32);
    REQUIRE(weights.shape() == Shape({B, H, T, T}));
    Tensor rows = weights.contiguous();
    const BFloat16* kept = forward.probs.data<BFloat16>();
    for (int64_t bh = 0; bh < B * H; ++bh)
      for (int64_t i = 0; i < 2 * pairs; ++i)
        for (int64_t j = 0; j < T; ++j) {
          const BFloat16 pair_major = kept[bh * 2 * pairs * T + (i / 2 * T + j) * 2 + i % 2];
          if (i == T) REQUIRE(pair_major.bits == 0);  // the zero row after an odd T's last
          else REQUIRE(float(pair_major) == rows.data<float>()[(bh * T + i) * T + j]);  // widened: exact
        }
    Tensor reference_weights;
    attention_reference(qkv.to(Dtype::Float32), H, mask, false, &reference_weights);
    check_close(weights, reference_weights, 2e-2);  // the scores summed from bfloat16 products, P rounded (2^-9)
  }
}

TEST_CASE("attention: the probabilities rebuilt from the rows' stats are the forward's, bit for bit") {
  // What a checkpoint's recompute uses (autograd/recompute_cache.h): kernel::attention_probs from the stats
  // attention_forward returned must give the very probabilities it keeps, in every dtype and precision,
  // with padding holes, trailing padding, a review of padding only, and the causal mask.
  const int64_t B = 3, T = 37, D = 12, H = 3;
  Tensor holes = tail_padding(B, T);
  holes.data<bool>()[5] = holes.data<bool>()[T + 20] = true;  // padded keys before the last real one
  for (int64_t t = 0; t < T; ++t) holes.data<bool>()[2 * T + t] = true;  // review 2: padding only
  struct Case {
    Dtype dtype;
    bool bf16;
  };
  for (Case c : {Case{Dtype::Float32, false}, Case{Dtype::Float64, false}, Case{Dtype::Float32, true},
                 Case{Dtype::BFloat16, false}}) {
    for (bool causal : {false, true}) {
      for (bool masked : {false, true}) {
        CAPTURE(dtype_name(c.dtype));
        CAPTURE(c.bf16);
        CAPTURE(causal);
        CAPTURE(masked);
        Tensor qkv = random_qkv(B, T, D, 31, c.dtype == Dtype::BFloat16 ? Dtype::Float32 : c.dtype).to(c.dtype);
        Tensor mask = masked ? holes : Tensor();
        Kept forward = cpu_attention(qkv, H, mask, causal, true, c.bf16, true);
        REQUIRE(forward.stats.defined());
        CHECK(forward.stats.shape() == Shape({B, H, T, 2}));
        Tensor probs = cpu_attention_probs(qkv, H, mask, causal, forward.stats, c.bf16);
        REQUIRE(probs.dtype() == forward.probs.dtype());
        REQUIRE(probs.shape() == forward.probs.shape());
        CHECK(std::memcmp(probs.raw_data(), forward.probs.raw_data(), size_t(probs.numel() * dtype_size(probs.dtype()))) == 0);
        // Without the stats asked for, the same output (keeping them changes nothing else).
        Kept plain = cpu_attention(qkv, H, mask, causal, false, c.bf16);
        CHECK_FALSE(plain.stats.defined());
        CHECK(std::memcmp(plain.out.raw_data(), forward.out.raw_data(), size_t(plain.out.numel() * dtype_size(plain.out.dtype()))) == 0);
        if (masked) {  // review 2 sees nothing: every row's max is -inf, its probabilities 0
          Tensor stats = forward.stats.to(Dtype::Float64);
          CHECK(std::isinf(stats.data<double>()[2 * H * T * 2]));
        }
      }
    }
  }
}
