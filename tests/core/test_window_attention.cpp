// Sliding-window attention: the fused CPU kernel against the composed reference (full attention with the
// band as a mask) on values, weights and gradients, with padding, causal and global tokens; float64
// gradchecks of both; the edges (window >= T is full attention, windows 0 and 1, no global tokens, rows
// that see nothing, zero-size dims); memory that grows with T x window; bad inputs; window_attention is
// attention with a band (one op, the same bits).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "autograd/node.h"
#include "core/allocator.h"
#include "core/cuda_ops.h"
#include "core/kernels.h"
#include "core/parallel.h"
#include "tests/cuda_skip.h"
#include "tests/attention_args.h"
#include "tests/helpers.h"

using namespace ember;
using namespace ember::testing;

namespace {

Tensor random_qkv(int64_t B, int64_t T, int64_t D, uint64_t seed, Dtype dtype = Dtype::Float32) {
  Generator gen(seed);
  return uniform({B, T, 3 * D}, -2.0, 2.0, gen, dtype);
}

// Review b has b % 3 trailing padding tokens, and review 1 a hole at token 1.
Tensor some_padding(int64_t B, int64_t T) {
  Tensor mask = Tensor::empty({B, T}, Dtype::Bool);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) mask.data<bool>()[b * T + t] = t >= T - (b % 3) || (b == 1 && t == 1 && T > 2);
  return mask;
}

struct Case {
  int64_t B, T, D, heads, window, global;
  bool padded, causal;
};

// Fused and composed agree on the output, the weights and the gradient of qkv.
void check_fused_matches_composed(const Case& c, Dtype dtype, double tol) {
  CAPTURE(c.T);
  CAPTURE(c.window);
  CAPTURE(c.global);
  CAPTURE(c.padded);
  CAPTURE(c.causal);
  Tensor mask = c.padded ? some_padding(c.B, c.T) : Tensor();
  Tensor a = random_qkv(c.B, c.T, c.D, 7 + uint64_t(c.T), dtype).requires_grad_();
  Tensor b = a.detach().clone().requires_grad_();
  Tensor wa, wb;
  Tensor fused = window_attention(a, c.heads, c.window, c.global, mask, c.causal, &wa);
  Tensor composed = window_attention_reference(b, c.heads, c.window, c.global, mask, c.causal, &wb);
  check_close(fused, composed, tol);
  check_close(wa, wb, tol);
  Generator gen(3);
  Tensor g = uniform(fused.shape(), -1, 1, gen, dtype);
  sum(fused * g).backward();
  sum(composed * g).backward();
  check_close(a.grad(), b.grad(), 2 * tol);
}

}  // namespace

TEST_CASE("window attention: known numbers, window 0 sees only itself, window 1 its neighbours") {
  // One head of three tokens, q = k = v: token t = e_t (3 wide, padded to width 3 per part).
  Tensor qkv = tensor({1, 0, 0, 1, 0, 0, 1, 0, 0,  //
                       0, 1, 0, 0, 1, 0, 0, 1, 0,  //
                       0, 0, 1, 0, 0, 1, 0, 0, 1},
                      {1, 3, 9});
  Tensor weights;
  Tensor out = window_attention(qkv, 1, 0, 0, Tensor(), false, &weights);
  check_values(weights, {1, 0, 0, 0, 1, 0, 0, 0, 1});
  check_values(out, {1, 0, 0, 0, 1, 0, 0, 0, 1});
  // Window 1: token 0 sees 0 and 1: scores 1/sqrt(3) and 0 -> p = e^a / (e^a + 1); token 1 sees all three.
  const double a = 1 / std::sqrt(3.0), p = std::exp(a) / (std::exp(a) + 1), m = std::exp(a) / (std::exp(a) + 2);
  out = window_attention(qkv, 1, 1, 0, Tensor(), false, &weights);
  check_values(weights, {p, 1 - p, 0, (1 - m) / 2, m, (1 - m) / 2, 0, 1 - p, p});
  // Window 0 with one global token: token 0 sees all, the others themselves and token 0.
  out = window_attention(qkv, 1, 0, 1, Tensor(), false, &weights);
  check_values(weights, {m, (1 - m) / 2, (1 - m) / 2, 1 - p, p, 0, 1 - p, 0, p});
}

TEST_CASE("window attention: the fused kernel matches the composed reference, values, weights and gradients") {
  // Blocks of 16 to 64 queries: T up to 150 crosses several, with windows smaller and larger than a block.
  for (Case c : {Case{2, 5, 8, 1, 1, 0, false, false}, Case{3, 7, 8, 2, 2, 1, true, false},
                 Case{2, 40, 12, 4, 3, 2, true, true}, Case{2, 70, 16, 2, 5, 0, true, false},
                 Case{1, 150, 8, 2, 20, 3, true, false}, Case{2, 150, 8, 1, 20, 0, false, true},
                 Case{2, 100, 8, 2, 70, 5, true, true}, Case{1, 33, 6, 3, 0, 0, true, false},
                 Case{2, 33, 6, 3, 0, 40, true, false}}) {
    check_fused_matches_composed(c, Dtype::Float32, 1e-5);
    check_fused_matches_composed(c, Dtype::Float64, 1e-12);
  }
}

TEST_CASE("window attention: a window of T - 1 or more is full attention") {
  const int64_t B = 3, T = 20, D = 8;
  Tensor mask = some_padding(B, T);
  for (bool causal : {false, true})
    for (int64_t window : {T - 1, T, int64_t(1000)}) {
      Tensor a = random_qkv(B, T, D, 5).requires_grad_();
      Tensor b = a.detach().clone().requires_grad_();
      Tensor wa, wb;
      Tensor windowed = window_attention(a, 2, window, 0, mask, causal, &wa);
      Tensor full = attention(b, 2, mask, causal, &wb);
      check_close(windowed, full, 1e-5);
      check_close(wa, wb, 1e-5);
      sum(windowed * windowed).backward();
      sum(full * full).backward();
      check_close(a.grad(), b.grad(), 2e-5);
    }
  // And so is any window when every token is global.
  Tensor qkv = random_qkv(B, T, D, 6);
  check_close(window_attention(qkv, 2, 0, T, mask), attention(qkv, 2, mask), 1e-5);
}

TEST_CASE("gradcheck: window attention (fused and composed) in float64 with padding, causal and global tokens") {
  const int64_t B = 2, T = 7;
  Tensor mask = some_padding(B, T);
  for (bool causal : {false, true})
    for (int64_t global : {0, 2}) {
      CAPTURE(causal);
      CAPTURE(global);
      check_gradient([&](const std::vector<Tensor>& in) { return window_attention(in[0], 2, 1, global, mask, causal); },
                     {random_qkv(B, T, 4, 21, Dtype::Float64)});
      check_gradient(
          [&](const std::vector<Tensor>& in) { return window_attention_reference(in[0], 2, 1, global, mask, causal); },
          {random_qkv(B, T, 4, 22, Dtype::Float64)});
    }
}

TEST_CASE("window attention: a query that sees no key gives output 0 and gets no gradient") {
  // Review 0 all padding; review 1: keys 0..3 padding, so with window 1 queries 0..2 see no key, and with
  // causal queries 0..3 neither.
  const int64_t B = 2, T = 9, D = 4;
  Tensor mask = zeros({B, T}, Dtype::Bool);
  for (int64_t t = 0; t < T; ++t) mask.data<bool>()[t] = true;
  for (int64_t t = 0; t < 4; ++t) mask.data<bool>()[T + t] = true;
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    const int64_t blind = causal ? 4 : 3;
    Tensor a = random_qkv(B, T, D, 41).requires_grad_();
    Tensor b = a.detach().clone().requires_grad_();
    Tensor fused = window_attention(a, 2, 1, 0, mask, causal);
    Tensor composed = window_attention_reference(b, 2, 1, 0, mask, causal);
    check_values(fused.select(0, 0), std::vector<double>(size_t(T * D), 0.0), 0);
    check_values(fused.select(0, 1).narrow(0, 0, blind), std::vector<double>(size_t(blind * D), 0.0), 0);
    check_close(fused, composed, 1e-5);
    Generator gen(5);
    Tensor g = uniform(fused.shape(), -1, 1, gen);
    sum(fused * g).backward();
    sum(composed * g).backward();
    check_values(a.grad().select(0, 0), std::vector<double>(size_t(T * 3 * D), 0.0), 0);
    // The blind queries' q rows get no gradient.
    check_values(a.grad().select(0, 1).narrow(0, 0, blind).narrow(1, 0, D), std::vector<double>(size_t(blind * D), 0.0), 0);
    check_close(a.grad(), b.grad(), 2e-5);
  }
}

TEST_CASE("window attention: the kept log-sum-exps are log sum_j e^(s_ij) over the keys each query sees") {
  // What the backward rebuilds P from (P = e^(S - lse)), checked against a float64 sum over the band by
  // hand: window 1, one global token, a padding hole at key 2 of review 0; review 1's global key and its
  // keys from 3 on are padding, so its queries 4 to 6 (and 0 when causal) see no key: their lse is -inf.
  const int64_t B = 2, T = 7, D = 4, heads = 2, Dh = D / heads, window = 1, global = 1;
  Tensor qkv = random_qkv(B, T, D, 23);
  Tensor mask = zeros({B, T}, Dtype::Bool);
  mask.data<bool>()[2] = true;
  mask.data<bool>()[T] = true;
  for (int64_t t = 3; t < T; ++t) mask.data<bool>()[T + t] = true;
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    int64_t blind = 0;
    // The CPU's band kernel (core/kernels.h): out and the rows' log-sum-exps, of qkv's dtype.
    Tensor out = Tensor::empty({B, T, D}), lse = Tensor::empty({B, heads, T});
    kernel::attention_forward(On{}, fused_qkv_args(qkv, heads, mask, causal, window, global), merged_out(out, heads),
                              lse.raw_data(), nullptr);
    REQUIRE(lse.shape() == Shape({B, heads, T}));
    const float* x = qkv.data<float>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < T; ++i) {
          double total = 0;
          for (int64_t j = 0; j < T; ++j) {
            const bool in_band = i < global || j < global || std::abs(i - j) <= window;
            if (!in_band || mask.data<bool>()[b * T + j] || (causal && j > i)) continue;
            double s = 0;
            for (int64_t c = 0; c < Dh; ++c)
              s += double(x[(b * T + i) * 3 * D + h * Dh + c]) * double(x[(b * T + j) * 3 * D + D + h * Dh + c]);
            total += std::exp(s / std::sqrt(double(Dh)));
          }
          const float got = lse.data<float>()[(b * heads + h) * T + i];
          CAPTURE(b);
          CAPTURE(h);
          CAPTURE(i);
          if (total == 0) {
            CHECK(got == -INFINITY);
            ++blind;
          } else {
            CHECK(got == doctest::Approx(std::log(total)).epsilon(1e-5));
          }
        }
    CHECK(blind == heads * (causal ? 4 : 3));  // review 1's queries 4, 5, 6 in each head, and 0 when causal
  }
}

TEST_CASE("window attention: zero-size dims") {
  for (Shape shape : {Shape{0, 5, 12}, Shape{2, 0, 12}, Shape{2, 5, 0}}) {
    CAPTURE(shape_str(shape));
    const int64_t heads = shape[2] == 0 ? 1 : 2;
    Tensor a = zeros(shape).requires_grad_();
    Tensor out = window_attention(a, heads, 2, 1, Tensor());
    CHECK(out.shape() == Shape({shape[0], shape[1], shape[2] / 3}));
    sum(out).backward();
    CHECK(a.grad().shape() == shape);
    check_close(out, window_attention_reference(zeros(shape), heads, 2, 1, Tensor()), 0);
  }
}

TEST_CASE("window attention: a non-contiguous qkv, and results that do not depend on the thread count") {
  Tensor qkv = random_qkv(2, 50, 8, 11);
  Tensor transposed = qkv.transpose(0, 1).contiguous().transpose(0, 1);
  REQUIRE_FALSE(transposed.is_contiguous());
  check_close(window_attention(transposed, 2, 4, 1, Tensor()), window_attention(qkv, 2, 4, 1, Tensor()), 0);
  Tensor x = random_qkv(4, 90, 16, 5).requires_grad_();
  Tensor mask = some_padding(4, 90);
  std::vector<std::vector<float>> outs, grads;
  const int before = num_threads();
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    x.zero_grad();
    Tensor out = window_attention(x, 4, 7, 2, mask);
    sum(out * out).backward();
    outs.push_back(out.detach().to_vector<float>());
    grads.push_back(x.grad().to_vector<float>());
  }
  set_num_threads(before);
  CHECK(outs[0] == outs[1]);
  CHECK(outs[0] == outs[2]);
  CHECK(grads[0] == grads[1]);
  CHECK(grads[0] == grads[2]);
}

TEST_CASE("window attention: memory grows with T x window, not T^2") {
  // A training step's peak tensor bytes beyond its input, at T and 4 T: full attention keeps [B, H, T, T]
  // (16x), the window op nothing [T, T] (its per-thread tiles are not tensors): about 4x.
  const int64_t B = 2, D = 16, H = 2, W = 16;
  auto peak_of = [&](int64_t T, bool windowed) {
    Tensor qkv = random_qkv(B, T, D, 3).requires_grad_();
    allocator_for(Device::cpu()).release_cached();
    const int64_t before = memory_stats().allocated;
    reset_peak_memory();
    Tensor out = windowed ? window_attention(qkv, H, W, 1, Tensor()) : attention(qkv, H, Tensor());
    sum(out).backward();
    return memory_stats().peak_allocated - before;
  };
  const double window_growth = double(peak_of(1024, true)) / double(peak_of(256, true));
  const double full_growth = double(peak_of(1024, false)) / double(peak_of(256, false));
  CAPTURE(window_growth);
  CAPTURE(full_growth);
  CHECK(window_growth < 5.0);
  CHECK(full_growth > 10.0);
}

TEST_CASE("window attention: bad inputs are clear errors") {
  Tensor qkv = random_qkv(2, 3, 4, 1);
  check_error([&] { window_attention(qkv, 2, -1, 0, Tensor()); }, "window must be >= 0");
  check_error([&] { window_attention(qkv, 2, 1, -2, Tensor()); }, "global must be >= 0");
  check_error([&] { window_attention(qkv, 3, 1, 0, Tensor()); }, "not divisible by heads 3");
  check_error([&] { window_attention(zeros({2, 3, 7}), 1, 1, 0, Tensor()); }, "qkv must be [B, T, 3 * D]");
  check_error([&] { window_attention(qkv, 2, 1, 0, zeros({2, 3})); }, "key_padding_mask must be bool [2, 3]");
  check_error([&] { window_attention_reference(qkv, 2, -1, 0, Tensor()); }, "window_attention_reference: window");
  check_error([&] { window_attention(qkv.to(Dtype::Int64), 2, 1, 0, Tensor()); }, "window_attention");
}

TEST_CASE("window attention is attention with a band: one op, the same bits, one backward; no band is full attention") {
  // window_attention(..., window, global, ...) and attention(..., AttentionBand{window, global}) are one op:
  // the same output, weights and gradient bits and the same graph node; AttentionBand{} (the default) is
  // attention without a band, bit for bit; global tokens without a window are refused.
  Tensor mask = some_padding(3, 21);
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    Tensor a = random_qkv(3, 21, 12, 31).requires_grad_();
    Tensor b = a.detach().clone().requires_grad_();
    Tensor wa, wb;
    Tensor via_wrapper = window_attention(a, 2, 3, 1, mask, causal, &wa);
    Tensor via_band = attention(b, 2, mask, causal, &wb, AttentionBand{3, 1});
    REQUIRE(via_band.grad_fn() != nullptr);
    CHECK(via_band.grad_fn()->name == std::string("window_attention"));
    check_close(via_band, via_wrapper, 0);
    check_close(wb, wa, 0);
    Generator gen(5);
    Tensor g = uniform(via_band.shape(), -1, 1, gen);
    sum(via_wrapper * g).backward();
    sum(via_band * g).backward();
    check_close(b.grad(), a.grad(), 0);

    Tensor c = a.detach().clone().requires_grad_(), d = a.detach().clone().requires_grad_();
    Tensor full = attention(c, 2, mask, causal), no_band = attention(d, 2, mask, causal, nullptr, AttentionBand{});
    CHECK(no_band.grad_fn()->name == std::string("attention"));
    check_close(no_band, full, 0);
    sum(full * g).backward();
    sum(no_band * g).backward();
    check_close(d.grad(), c.grad(), 0);
    check_close(attention_reference(a.detach(), 2, mask, causal, nullptr, AttentionBand{3, 1}),
                window_attention_reference(a.detach(), 2, 3, 1, mask, causal), 0);
  }
  Tensor qkv = random_qkv(2, 3, 4, 1);
  check_error([&] { attention(qkv, 2, Tensor(), false, nullptr, AttentionBand{-1, 2}); },
              "attention: 2 global tokens but no band");
  check_error([&] { attention(qkv, 2, Tensor(), false, nullptr, AttentionBand{1, -1}); },
              "window_attention: global must be >= 0");
  check_error([&] { attention_reference(qkv, 2, Tensor(), false, nullptr, AttentionBand{-1, 1}); },
              "attention_reference: 1 global tokens but no band");
}

CUDA_TEST_CASE("window attention: the fused CUDA kernels with the band match the CPU, values, weights and gradients") {
  // The tiled kernels of cuda/attention_kernels.cu (64-row query tiles in float32, 32 in float64; 32- or
  // 64-key tiles): at T = 150 and window 5 most key tiles are outside the band and skipped.
  struct GpuCase {
    int64_t B, T, D, heads, window, global;
    bool causal;
    Dtype dtype;
  };
  const Device gpu = Device::cuda(0);
  testing::AttentionKernels fused(true);  // put back when the case ends
  {
    for (GpuCase c : {GpuCase{2, 150, 16, 2, 5, 0, false, Dtype::Float32}, GpuCase{2, 150, 16, 2, 5, 2, true, Dtype::Float32},
                      GpuCase{1, 70, 32, 1, 40, 1, false, Dtype::Float32}, GpuCase{2, 45, 8, 2, 3, 1, false, Dtype::Float64},
                      GpuCase{1, 20, 8, 1, 0, 0, true, Dtype::Float64}}) {
      CAPTURE(c.T);
      CAPTURE(c.window);
      CAPTURE(c.global);
      CAPTURE(c.causal);
      const double tol = c.dtype == Dtype::Float64 ? 1e-12 : 1e-5;
      Tensor mask = some_padding(c.B, c.T);
      Tensor a = random_qkv(c.B, c.T, c.D, 60 + uint64_t(c.T), c.dtype).requires_grad_();
      Tensor b = a.detach().clone().to(gpu).requires_grad_();
      Tensor wa, wb;
      Tensor cpu_out = window_attention(a, c.heads, c.window, c.global, mask, c.causal, &wa);
      Tensor gpu_out = window_attention(b, c.heads, c.window, c.global, mask.to(gpu), c.causal, &wb);
      REQUIRE(gpu_out.device() == gpu);
      CHECK(gpu_out.grad_fn()->name == std::string("window_attention"));  // the fused kernels, not the composed ops
      check_close(gpu_out.to(Device::cpu()), cpu_out, tol);
      check_close(wb.to(Device::cpu()), wa, tol);
      Generator gen(3);
      Tensor g = uniform(cpu_out.shape(), -1, 1, gen, c.dtype);
      sum(cpu_out * g).backward();
      sum(gpu_out * g.to(gpu)).backward();
      check_close(b.grad().to(Device::cpu()), a.grad(), 4 * tol);
    }
  }
}
