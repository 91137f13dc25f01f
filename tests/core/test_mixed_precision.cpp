// The mixed-precision scope (core/precision.h): matmul, linear and attention multiply bfloat16 operands
// and sum in float32, each within the bound docs/precision.md derives from bfloat16's 8-bit
// significand and the reduction length; everything else stays float32, bit for bit.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "autograd/node.h"
#include "core/allocator.h"
#include "core/cuda_ops.h"
#include "core/parallel.h"
#include "core/precision.h"
#include "tests/helpers.h"

using namespace ember;
using ember::testing::check_error;

namespace {

const double u = std::ldexp(1.0, -8);       // bfloat16's unit roundoff (8 significant bits)
const double eps32 = std::ldexp(1.0, -24);  // float32's

// The bound of one product of length K: |C_bf16 - C_f32| <= gamma(K) sum_k |a_k| |b_k|.
double gamma(int64_t K) { return 2 * u + u * u + 2 * double(K) * eps32; }

std::vector<double> values(const Tensor& t) { return t.detach().to(Dtype::Float64).contiguous().to_vector<double>(); }

// Checks got against want element by element: |got - want| <= gamma(K) (|A| |B|)_ij, with |A| |B|
// computed in float64 from the operands [M, K] and [K, N] (any layout: read through matmul of abs).
// Returns the worst ratio |error| / bound (> 0 shows the rounding really happened).
double check_product_bound(const Tensor& got, const Tensor& want, const Tensor& a, const Tensor& b, int64_t K) {
  const Tensor magnitude = matmul(abs(a.detach().to(Dtype::Float64)), abs(b.detach().to(Dtype::Float64)));
  const std::vector<double> g = values(got), w = values(want), m = values(magnitude);
  REQUIRE(g.size() == w.size());
  REQUIRE(g.size() == m.size());
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double bound = gamma(K) * m[i] + 1e-30;
    INFO("element " << i << ": bf16 " << g[i] << ", float32 " << w[i] << ", bound " << bound);
    REQUIRE(std::abs(g[i] - w[i]) <= bound);
    worst = std::max(worst, std::abs(g[i] - w[i]) / bound);
  }
  return worst;
}

bool identical(const Tensor& a, const Tensor& b) { return values(a) == values(b); }

// Attention's bound (the attention test below derives it): out against out32 for qkv [B, T, 3 D], H heads.
// Returns the worst ratio |error| / bound.
double check_attention_bound(const Tensor& o, const Tensor& o32, const Tensor& qkv, int64_t H) {
  const int64_t B = qkv.size(0), T = qkv.size(1), D = qkv.size(2) / 3, Dh = D / H;
  const std::vector<double> q = values(qkv), got = values(o.to(Device::cpu())), want = values(o32.to(Device::cpu()));
  const double scale = 1 / std::sqrt(double(Dh));
  double worst = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        auto at = [&](int64_t t, int64_t part, int64_t c) { return q[(b * T + t) * 3 * D + part * D + h * Dh + c]; };
        double delta = 0;
        for (int64_t j = 0; j < T; ++j) {
          double s = 0;
          for (int64_t c = 0; c < Dh; ++c) s += std::abs(at(i, 0, c) * at(j, 1, c));
          delta = std::max(delta, gamma(Dh) * scale * s);
        }
        const double grow = std::exp(2 * delta);
        for (int64_t c = 0; c < Dh; ++c) {
          double v_max = 0;
          for (int64_t j = 0; j < T; ++j) v_max = std::max(v_max, std::abs(at(j, 2, c)));
          const double bound = ((grow - 1) + gamma(T) * grow + 16 * T * eps32) * v_max;
          const size_t k = size_t((b * T + i) * D + h * Dh + c);
          INFO("b " << b << " h " << h << " query " << i << " column " << c);
          REQUIRE(std::abs(got[k] - want[k]) <= bound);
          worst = std::max(worst, std::abs(got[k] - want[k]) / bound);
        }
      }
  return worst;
}

double relative_norm_error(const Tensor& got, const Tensor& want) {
  const std::vector<double> g = values(got.to(Device::cpu())), w = values(want.to(Device::cpu()));
  double num = 0, den = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    num += (g[i] - w[i]) * (g[i] - w[i]);
    den += w[i] * w[i];
  }
  return std::sqrt(num / den);
}


}  // namespace

TEST_CASE("precision scope: float32 by default, set by a guard, restored on exit (nested too); names parsed") {
  CHECK(product_precision() == Precision::Float32);
  {
    MixedPrecisionGuard bf16;
    CHECK(product_precision() == Precision::BFloat16);
    {
      MixedPrecisionGuard fp32(Precision::Float32);
      CHECK(product_precision() == Precision::Float32);
    }
    CHECK(product_precision() == Precision::BFloat16);
  }
  CHECK(product_precision() == Precision::Float32);
  CHECK(parse_precision("bf16") == Precision::BFloat16);
  CHECK(parse_precision("fp32") == Precision::Float32);
  CHECK(precision_name(Precision::BFloat16) == "bf16");
  check_error([] { (void)parse_precision("fp16"); }, "precision 'fp16': expected fp32 or bf16");
}

TEST_CASE("mixed precision matmul: within gamma(K) |A| |B| of float32, forward and backward; transposes, batches") {
  Generator gen(11);
  struct Case {
    Shape a, b;
    bool transpose_a, transpose_b;
  };
  for (const Case& c : {Case{{17, 33}, {33, 9}, false, false}, Case{{31, 5}, {7, 31}, true, true},
                        Case{{3, 13, 70}, {3, 70, 21}, false, false}, Case{{2, 40, 6}, {40, 19}, true, false}}) {
    Tensor a = uniform(c.a, -1, 1, gen).requires_grad_(), b = uniform(c.b, -1, 1, gen).requires_grad_();
    auto operand = [](const Tensor& x, bool t) { return t ? x.transpose(-1, -2) : x; };
    // The operands as the product sees them (fresh views each time: each backward frees its graph).
    auto A_of = [&] { return operand(a, c.transpose_a); };
    auto B_of = [&] { return operand(b, c.transpose_b); };
    const Tensor A = A_of().detach(), B = B_of().detach();
    const int64_t K = A.size(-1);
    INFO("A " << shape_str(A.shape()) << " B " << shape_str(B.shape()));
    Tensor f32 = matmul(A_of(), B_of());
    Tensor g = uniform(f32.shape(), -1, 1, gen);
    f32.backward(g);
    const Tensor da32 = a.grad(), db32 = b.grad();
    a.zero_grad();
    b.zero_grad();
    Tensor bf;
    {
      MixedPrecisionGuard bf16;
      bf = matmul(A_of(), B_of());
    }
    CHECK(bf.dtype() == Dtype::Float32);
    CHECK(check_product_bound(bf, f32, A, B, K) > 0);
    // The op remembers its precision: backward outside the scope still multiplies in bfloat16.
    bf.backward(g);
    CHECK(a.grad().dtype() == Dtype::Float32);
    // dA = G B^T (length N), dB = A^T G (length M, summed over the batch for a broadcast B).
    const Tensor dA = operand(a.grad(), c.transpose_a), dA32 = operand(da32, c.transpose_a);
    const Tensor dB = operand(b.grad(), c.transpose_b), dB32 = operand(db32, c.transpose_b);
    check_product_bound(dA, dA32, g, B.transpose(-1, -2), B.size(-1));
    if (A.dim() == B.dim()) {
      check_product_bound(dB, dB32, A.transpose(-1, -2), g, A.size(-2));
    } else {  // B broadcast over A's batch: dB = sum over the batch, one product of length batch * M
      const Tensor A2 = A.reshape({-1, K}), g2 = g.reshape({-1, g.size(-1)});
      check_product_bound(dB, dB32, A2.transpose(0, 1), g2, A2.size(0));
    }
  }
}

TEST_CASE("mixed precision linear (CPU): y bfloat16, rounded once; dx, dW within the product bound; db summed in float32") {
  // In the scope, linear rounds x and W to bfloat16, sums in float32 and stores y as bfloat16 (as
  // torch.autocast): |y - y32| <= gamma(K) (|x| |W|) + u |y32|. Its gradient g is bfloat16 (y's dtype):
  // dx = g W in x's dtype, dW = g^T x in float32 (the master weight's), db = the column sums of g in float32.
  Generator gen(12);
  const int64_t rows = 37, K = 45, N = 29;
  for (const Dtype x_dtype : {Dtype::Float32, Dtype::BFloat16}) {
    INFO("x is " << dtype_name(x_dtype));
    Tensor x = uniform({rows, K}, -1, 1, gen).to(x_dtype).requires_grad_();
    Tensor w = uniform({N, K}, -1, 1, gen).requires_grad_(), b = uniform({N}, -1, 1, gen).requires_grad_();
    const Tensor g16 = uniform({rows, N}, -1, 1, gen).to(Dtype::BFloat16), g = g16.to(Dtype::Float32);
    const Tensor x32 = x.detach().to(Dtype::Float32);
    Tensor y;
    {
      MixedPrecisionGuard bf16;
      y = linear(x, w, b);
    }
    REQUIRE(y.dtype() == Dtype::BFloat16);
    // The float32 layer on the same values, and the bound: the products' gamma(K) plus y's one rounding.
    const Tensor y32 = linear(x32, w.detach(), b.detach());
    const Tensor magnitude = linear(abs(x32), abs(w.detach()), Tensor());
    const std::vector<double> got = values(y), want = values(y32), m = values(magnitude);
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double bound = gamma(K) * m[i] + u * std::abs(want[i]);
      INFO("element " << i);
      REQUIRE(std::abs(got[i] - want[i]) <= bound);
      REQUIRE(float(got[i]) == float(BFloat16(float(got[i]))));  // a bfloat16 value
      worst = std::max(worst, std::abs(got[i] - want[i]) / bound);
    }
    CHECK(worst > 0);
    y.backward(g16);  // outside the scope: the op remembers
    const Tensor dx = x.grad();
    REQUIRE(dx.defined());
    CHECK(dx.dtype() == x_dtype);  // x's own dtype: a bfloat16 dx is rounded once more
    if (x_dtype == Dtype::Float32) {
      check_product_bound(dx, matmul(g, w.detach()), g, w.detach(), N);
    } else {
      const std::vector<double> d = values(dx), d32 = values(matmul(g, w.detach()));
      const std::vector<double> dm = values(matmul(abs(g), abs(w.detach())));
      for (size_t i = 0; i < d.size(); ++i) CHECK(std::abs(d[i] - d32[i]) <= gamma(N) * dm[i] + u * std::abs(d32[i]));
    }
    CHECK(w.grad().dtype() == Dtype::Float32);
    check_product_bound(w.grad(), matmul(g.transpose(0, 1), x32), g.transpose(0, 1), x32, rows);
    // db: the float32 column sums of g, within float32's summation error of the exact sums.
    REQUIRE(b.grad().dtype() == Dtype::Float32);
    const std::vector<double> db = values(b.grad()), exact = values(sum(g.to(Dtype::Float64), {0}));
    const std::vector<double> size = values(sum(abs(g.to(Dtype::Float64)), {0}));
    for (size_t n = 0; n < db.size(); ++n) CHECK(std::abs(db[n] - exact[n]) <= double(rows) * eps32 * size[n]);
  }
}

TEST_CASE("mixed precision linear (CPU): db sums a bfloat16 g by blocks of 256 rows, in order: the same bits on 1 and 2 threads") {
  // db's documented order (core/cpu/products.cpp column_sums): each block of 256 rows summed row by row in float,
  // then the blocks in order. 600 rows (three blocks, the last short) and 37 columns (16 at a time, then a tail).
  Generator gen(13);
  const int64_t rows = 600, K = 8, N = 37;
  const Tensor g16 = uniform({rows, N}, -1, 1, gen).to(Dtype::BFloat16);
  std::vector<float> want(N, 0.0f);
  for (int64_t block = 0; block < rows; block += 256) {
    std::vector<float> partial(N, 0.0f);
    for (int64_t r = block; r < std::min(rows, block + 256); ++r)
      for (int64_t n = 0; n < N; ++n) partial[size_t(n)] += float(g16.data<BFloat16>()[r * N + n]);
    for (int64_t n = 0; n < N; ++n) want[size_t(n)] += partial[size_t(n)];
  }
  const int threads = num_threads();
  for (int t : {1, 2}) {
    set_num_threads(t);
    Tensor x = uniform({rows, K}, -1, 1, gen).requires_grad_();
    Tensor w = uniform({N, K}, -1, 1, gen).requires_grad_(), b = zeros({N}).requires_grad_();
    {
      MixedPrecisionGuard bf16;
      linear(x, w, b).backward(g16);
    }
    for (int64_t n = 0; n < N; ++n) REQUIRE(b.grad().data<float>()[n] == want[size_t(n)]);
  }
  set_num_threads(threads);
}

TEST_CASE("mixed precision linear (CPU): zero-size dims as outside the scope: no rows, no input features") {
  MixedPrecisionGuard bf16;
  Tensor w = from_vector(std::vector<float>{1.5f, -2.0f, 0.25f, 3.0f, 0.5f, -1.0f}, {3, 2}).requires_grad_();
  Tensor b = from_vector(std::vector<float>{0.1f, -0.2f, 0.3f}, {3}).requires_grad_();
  Tensor none = zeros({0, 2}).requires_grad_();  // no rows: an empty y, dW = 0, db = 0
  Tensor y = linear(none, w, b);
  CHECK(y.dtype() == Dtype::BFloat16);
  CHECK(y.shape() == Shape{0, 3});
  sum(y).backward();
  CHECK(values(w.grad()) == std::vector<double>(6, 0.0));
  CHECK(values(b.grad()) == std::vector<double>(3, 0.0));
  Tensor w0 = zeros({3, 0}).requires_grad_();  // no input features: y = b on every row, rounded
  Tensor x0 = zeros({4, 0}).requires_grad_();
  Tensor y0 = linear(x0, w0, b.detach());
  REQUIRE(y0.shape() == Shape{4, 3});
  const std::vector<double> got = values(y0);
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == double(float(BFloat16(std::vector<float>{0.1f, -0.2f, 0.3f}[i % 3]))));
  sum(y0).backward();
  CHECK(w0.grad().shape() == Shape{3, 0});
  CHECK(x0.grad().shape() == Shape{4, 0});
}

TEST_CASE("mixed precision linear (CPU): what backward keeps is bfloat16; GELU and dropout between layers in bfloat16") {
  Generator gen(17);
  const int64_t rows = 8192, K = 64, N = 48;  // x (2 MiB as float32) much larger than W
  Tensor w = uniform({N, K}, -1, 1, gen).requires_grad_();
  Tensor x = uniform({rows, K}, -1, 1, gen).requires_grad_();
  auto kept_bytes = [&](bool bf16) {  // bytes the graph holds after the forward, beyond y itself
    // NOTE: with no cached blocks, each tensor gets a block of its own size class: the allocator may
    // otherwise hand out a cached block up to 1.5x the size asked for, and count all of it.
    allocator_for(Device::cpu()).release_cached();
    MixedPrecisionGuard scope(bf16 ? Precision::BFloat16 : Precision::Float32);
    Tensor y = linear(x * 1.0, w, Tensor());  // x * 1.0: a non-leaf x, which linear must keep for dW
    const int64_t with_graph = memory_stats().allocated;
    y = Tensor();  // frees y and, with it, the graph and what it kept
    return with_graph - memory_stats().allocated - int64_t(rows * N * dtype_size(bf16 ? Dtype::BFloat16 : Dtype::Float32));
  };
  const int64_t kept32 = kept_bytes(false), kept16 = kept_bytes(true);
  INFO("float32 keeps " << kept32 << " bytes, bfloat16 " << kept16);
  CHECK(kept32 >= rows * K * 4);  // x
  CHECK(kept16 < kept32);
  CHECK(kept16 <= rows * K * 2 + N * K * 2 + 4096);  // x and W in bfloat16 (and a few small blocks)
  // The feed-forward block as the model runs it: linear -> GELU -> dropout -> linear, then added to a
  // float32 residual. Between the layers everything is bfloat16, forward and backward, and equals the
  // float32 computation of the same bfloat16 values rounded once per op.
  Tensor w2 = uniform({K, N}, -1, 1, gen).requires_grad_();
  Generator drop_a(5), drop_b(5);
  MixedPrecisionGuard scope;
  Tensor h = linear(x, w, Tensor());
  Tensor a = gelu(h);
  Tensor d = dropout(a, 0.25, true, drop_a);
  Tensor y = linear(d, w2, Tensor());
  for (const Tensor* t : {&h, &a, &d, &y}) CHECK(t->dtype() == Dtype::BFloat16);
  const Dtype f32 = Dtype::Float32;
  CHECK(identical(a, gelu(h.to(f32)).to(Dtype::BFloat16)));
  CHECK(identical(d, dropout(a.to(f32), 0.25, true, drop_b).to(Dtype::BFloat16)));
  Tensor out = x + y;  // float32 + bfloat16: promoted to float32
  CHECK(out.dtype() == f32);
  sum(out * out).backward();
  CHECK(x.grad().dtype() == f32);
  CHECK(w.grad().dtype() == f32);
  CHECK(w2.grad().dtype() == f32);
  // A bfloat16 leaf gets a bfloat16 gradient (the linear's dx in bfloat16, no float32 pass between).
  Tensor leaf = uniform({rows, K}, -1, 1, gen).to(Dtype::BFloat16).requires_grad_();
  sum(linear(gelu(leaf), w, Tensor())).backward();
  REQUIRE(leaf.grad().defined());
  CHECK(leaf.grad().dtype() == Dtype::BFloat16);
  // Against float32 on the same values: dz = the column sums of W (W rounded: u sum_n |W_nk|), times
  // GELU' (at most 1.13), then rounded twice (dz and the result: 2u).
  Tensor leaf32 = leaf.detach().to(f32).requires_grad_();
  {
    MixedPrecisionGuard fp32(Precision::Float32);
    sum(linear(gelu(leaf32), w.detach(), Tensor())).backward();
  }
  const std::vector<double> got = values(leaf.grad()), want = values(leaf32.grad());
  const std::vector<double> spread = values(sum(abs(w.detach()), {0}));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < K; ++k) {
      const size_t i = size_t(r * K + k);
      CHECK(std::abs(got[i] - want[i]) <= 1.2 * 2 * u * spread[size_t(k)] + 2 * u * std::abs(want[i]));
    }
}

TEST_CASE("mixed precision attention: products in bfloat16, softmax in float32, within the derived bound") {
  // Scores S = s Q K^T: |dS_ij| <= delta_i = gamma(Dh) s max_j sum_c |q_ic| |k_jc|. Then each
  // probability moves by at most a factor e^(2 delta_i), and O = P V (P and V rounded, length T) is
  // off by at most [(e^(2 delta_i) - 1) + gamma(T) e^(2 delta_i) + 16 T eps32] max_j |v_jc|.
  Generator gen(13);
  const int64_t B = 2, T = 23, D = 24, H = 3;
  Tensor qkv = uniform({B, T, 3 * D}, -1, 1, gen).requires_grad_();
  Tensor mask = zeros({B, T}, Dtype::Bool);
  for (int64_t t = 17; t < T; ++t) mask.data<bool>()[T + t] = true;  // the second review is padded
  Tensor o32 = attention(qkv, H, mask);
  Tensor g = uniform(o32.shape(), -1, 1, gen);
  o32.backward(g);
  const Tensor dqkv32 = qkv.grad();
  qkv.zero_grad();
  Tensor o;
  {
    MixedPrecisionGuard bf16;
    o = attention(qkv, H, mask);
  }
  CHECK(check_attention_bound(o, o32, qkv, H) > 0);
  // Backward (outside the scope: the op remembers): a norm-wise check, measured in docs/precision.md.
  o.backward(g);
  const double relative = std::sqrt(values(sum((qkv.grad() - dqkv32) * (qkv.grad() - dqkv32))).at(0) /
                                    values(sum(dqkv32 * dqkv32)).at(0));
  INFO("relative error of dqkv: " << relative);
  CHECK(relative > 0);
  CHECK(relative <= 8 * u);
}

TEST_CASE("bfloat16 qkv attention (CPU): gradient within the bound of float32's on the same values; masks") {
  // The bfloat16 path's backward (core/cpu/attention.cpp: bfloat16 products, dS from the kept bfloat16 P)
  // against float32 attention on the same (bfloat16) values: the norm-wise error of dqkv, with padding holes,
  // a review of padding only (no gradient at all) and the causal mask.
  const int64_t B = 3, T = 19, D = 24, H = 3;
  Generator gen(17);
  Tensor mask = zeros({B, T}, Dtype::Bool);
  mask.data<bool>()[4] = mask.data<bool>()[T + 11] = true;
  for (int64_t t = 15; t < T; ++t) mask.data<bool>()[T + t] = true;
  for (int64_t t = 0; t < T; ++t) mask.data<bool>()[2 * T + t] = true;  // review 2: padding only
  const Tensor values16 = uniform({B, T, 3 * D}, -1, 1, gen).to(Dtype::BFloat16);
  const Tensor g = uniform({B, T, D}, -1, 1, gen);
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    Tensor qkv16 = values16.detach().requires_grad_(), qkv32 = values16.to(Dtype::Float32).requires_grad_();
    Tensor o16 = attention(qkv16, H, mask, causal), o32 = attention(qkv32, H, mask, causal);
    REQUIRE(o16.dtype() == Dtype::BFloat16);
    o16.backward(g.to(Dtype::BFloat16));
    o32.backward(g);
    REQUIRE(qkv16.grad().dtype() == Dtype::BFloat16);
    const double relative = relative_norm_error(qkv16.grad(), qkv32.grad());
    INFO("relative error of dqkv: " << relative);
    CHECK(relative > 0);
    CHECK(relative <= 2 * u);  // measured 0.67 u (rowsum(dP P) missing its last key: 1.6 u, and 7.4 u causal)
    const std::vector<double> d = values(qkv16.grad());
    CHECK(std::all_of(d.begin() + 2 * T * 3 * D, d.end(), [](double x) { return x == 0; }));
  }
}

TEST_CASE("mixed precision window attention (CPU): products in bfloat16 within attention's bound; gradients; bfloat16 qkv") {
  // The band's products as attention's (above): the full-attention bound, taken over every key, holds for a
  // query that sees fewer. Global tokens, a padding hole, a padded tail, causal; backward outside the scope.
  const int64_t B = 2, T = 40, D = 24, H = 3, window = 4, global = 2;
  Generator gen(29);
  Tensor mask = zeros({B, T}, Dtype::Bool);
  mask.data<bool>()[7] = true;
  for (int64_t t = 31; t < T; ++t) mask.data<bool>()[T + t] = true;
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    Tensor qkv = uniform({B, T, 3 * D}, -1, 1, gen).requires_grad_();
    Tensor o32 = window_attention(qkv, H, window, global, mask, causal);
    const Tensor g = uniform(o32.shape(), -1, 1, gen);
    o32.backward(g);
    const Tensor dqkv32 = qkv.grad();
    qkv.zero_grad();
    Tensor o;
    {
      MixedPrecisionGuard bf16;
      o = window_attention(qkv, H, window, global, mask, causal);
    }
    CHECK(check_attention_bound(o, o32, qkv, H) > 0);  // > 0: the products were rounded
    o.backward(g);  // outside the scope: the op remembers
    const double relative = relative_norm_error(qkv.grad(), dqkv32);
    INFO("relative error of dqkv: " << relative);
    CHECK(relative > 0);
    CHECK(relative <= 8 * u);

    // A bfloat16 qkv (a bf16 linear's output): bfloat16 out, the same bfloat16 products in or out of a scope.
    const Tensor values16 = uniform({B, T, 3 * D}, -1, 1, gen).to(Dtype::BFloat16);
    Tensor qkv16 = values16.detach().requires_grad_(), qkv_wide = values16.to(Dtype::Float32).requires_grad_();
    Tensor o16 = window_attention(qkv16, H, window, global, mask, causal);
    Tensor o_wide = window_attention(qkv_wide, H, window, global, mask, causal);
    REQUIRE(o16.dtype() == Dtype::BFloat16);
    Tensor o_scope;
    {
      MixedPrecisionGuard bf16;
      o_scope = window_attention(qkv_wide.detach(), H, window, global, mask, causal);
    }
    CHECK(identical(o16, o_scope.to(Dtype::BFloat16)));
    check_attention_bound(o16.to(Dtype::Float32), o_wide, qkv_wide, H);
    o16.backward(g.to(Dtype::BFloat16));
    o_wide.backward(g);
    REQUIRE(qkv16.grad().dtype() == Dtype::BFloat16);
    const double relative16 = relative_norm_error(qkv16.grad(), qkv_wide.grad());
    INFO("relative error of a bfloat16 qkv's gradient: " << relative16);
    CHECK(relative16 > 0);
    CHECK(relative16 <= 8 * u);
  }
}

TEST_CASE("mixed precision attention keeps its probabilities for backward in bfloat16; weights come back float32") {
  // The [B, H, T, T] probabilities are the largest tensor a step keeps: in a bfloat16 scope they are
  // kept rounded (P V rounds them anyway), half the bytes. The weights handed out stay float32.
  Generator gen(15);
  const int64_t B = 2, T = 40, D = 16, H = 2;
  Tensor qkv = uniform({B, T, 3 * D}, -1, 1, gen).requires_grad_();
  auto kept_bytes = [&](bool bf16) {  // bytes the graph holds on to after the forward
    const int64_t before = memory_stats().allocated;
    MixedPrecisionGuard scope(bf16 ? Precision::BFloat16 : Precision::Float32);
    Tensor out = attention(qkv, H, Tensor());
    return memory_stats().allocated - before;
  };
  const int64_t f32 = kept_bytes(false), bf16 = kept_bytes(true);
  INFO("float32 scope keeps " << f32 << " bytes, bfloat16 scope " << bf16);
  CHECK(f32 - bf16 >= B * H * T * T * 2);  // the probabilities' two low bytes of every float

  Tensor w32, w16;
  Tensor o32 = attention(qkv, H, Tensor(), false, &w32);
  {
    MixedPrecisionGuard scope;
    Tensor o = attention(qkv, H, Tensor(), false, &w16);
    o.backward(ones_like(o));  // the backward widens the kept bfloat16 probabilities
    CHECK(qkv.grad().dtype() == Dtype::Float32);
  }
  REQUIRE(w16.dtype() == Dtype::Float32);
  const std::vector<double> a = values(w16), b = values(w32);
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(b[i], 1e-30));
  INFO("worst relative difference of a weight: " << worst);
  CHECK(worst > 0);  // rounded: the scores' products were bfloat16, the kept values too
  CHECK(worst <= 0.05);
}

TEST_CASE("mixed precision leaves softmax, layer norm, GELU, the loss and reductions in float32, bit for bit") {
  Generator gen(14);
  Tensor x = uniform({6, 10}, -3, 3, gen), w = uniform({10}, 0.5, 1.5, gen), b = uniform({10}, -1, 1, gen);
  Tensor targets = from_vector(std::vector<int64_t>{1, 0, 9, 3, 3, 7}, {6});
  auto all = [&] {
    return std::vector<Tensor>{softmax(x, 1), layer_norm(x, w, b), gelu(x), cross_entropy(x, targets), sum(x, {1}),
                               mean(x), x * w + b};
  };
  const std::vector<Tensor> f32 = all();
  MixedPrecisionGuard bf16;
  const std::vector<Tensor> scoped = all();
  for (size_t i = 0; i < f32.size(); ++i) {
    INFO("result " << i);
    CHECK(scoped[i].dtype() == Dtype::Float32);
    CHECK(identical(scoped[i], f32[i]));
  }
}

TEST_CASE("bfloat16 tensors into matmul, linear, attention: bfloat16 out, the scope's float32 sums rounded once") {
  Generator gen(15);
  Tensor a = uniform({5, 12}, -1, 1, gen).to(Dtype::BFloat16), b = uniform({12, 7}, -1, 1, gen).to(Dtype::BFloat16);
  Tensor w = uniform({7, 12}, -1, 1, gen).to(Dtype::BFloat16), bias = uniform({7}, -1, 1, gen).to(Dtype::BFloat16);
  Tensor qkv = uniform({1, 6, 12}, -1, 1, gen).to(Dtype::BFloat16);
  const Dtype f32 = Dtype::Float32;
  // Outside any scope: the bfloat16 values (exact in float32) multiplied exactly, summed in float32 and
  // rounded once: within u |C| + 2 K eps32 (|A| |B|) of the float32 product of the same values.
  Tensor mm = matmul(a, b), li = linear(a, w, bias), at = attention(qkv, 2, Tensor());
  CHECK(mm.dtype() == Dtype::BFloat16);
  CHECK(li.dtype() == Dtype::BFloat16);
  CHECK(at.dtype() == Dtype::BFloat16);
  auto check_rounded_once = [&](const Tensor& got, const Tensor& want, const Tensor& magnitude, int64_t K) {
    const std::vector<double> g = values(got), w = values(want), m = values(magnitude);
    for (size_t i = 0; i < g.size(); ++i) {
      INFO("element " << i);
      CHECK(std::abs(g[i] - w[i]) <= u * std::abs(w[i]) + 2 * double(K) * eps32 * m[i]);
    }
  };
  check_rounded_once(mm, matmul(a.to(f32), b.to(f32)), matmul(abs(a.to(f32)), abs(b.to(f32))), 12);
  check_rounded_once(li, linear(a.to(f32), w.to(f32), bias.to(f32)),
                     linear(abs(a.to(f32)), abs(w.to(f32)), abs(bias.to(f32))), 13);
  {  // attention's own bfloat16 path (P rounded too), then rounded once
    MixedPrecisionGuard bf16;
    CHECK(identical(at, attention(qkv.to(f32), 2, Tensor()).to(Dtype::BFloat16)));
  }
  // Gradients flow back through bfloat16 tensors in bfloat16: d sum(L B) / dL (the row sums of B) reaches
  // the float32 leaf rounded once to bfloat16, as the gradient of the bfloat16 copy of L.
  Tensor leaf = uniform({5, 12}, -1, 1, gen).requires_grad_();
  Tensor leaf16 = leaf.to(Dtype::BFloat16);
  CHECK(leaf16.requires_grad());
  sum(matmul(leaf16, b).to(f32)).backward();
  REQUIRE(leaf.grad().defined());
  CHECK(leaf.grad().dtype() == Dtype::Float32);
  const std::vector<double> row_sums = values(sum(b.to(f32), {1}));
  const std::vector<double> grad = values(leaf.grad());
  bool rounded = false;
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t k = 0; k < 12; ++k) {
      const double got = grad[size_t(i * 12 + k)];
      CHECK(std::abs(got - row_sums[k]) <= u * std::abs(row_sums[k]) + 1e-6);
      CHECK(float(got) == float(BFloat16(float(got))));  // a bfloat16 value
      rounded = rounded || got != row_sums[k];
    }
  CHECK(rounded);
}

TEST_CASE("bfloat16 with float32 in arithmetic: float32, computed on the widened values; gradients in each one's dtype") {
  Generator gen(19);
  const Dtype f32 = Dtype::Float32, bf16 = Dtype::BFloat16;
  Tensor a = uniform({5, 4}, -1, 1, gen).requires_grad_();
  Tensor b = uniform({4}, -1, 1, gen).to(bf16).requires_grad_();   // broadcast over a's rows
  Tensor c = uniform({4, 5}, -1, 1, gen).to(bf16).requires_grad_();  // read transposed (strided)
  const Tensor b32 = b.detach().to(f32), c32 = c.detach().to(f32).transpose(0, 1);
  // Every order and op: the float32 result of the widened values, bit for bit.
  CHECK(identical(a + b, a.detach() + b32));
  CHECK(identical(b + a, b32 + a.detach()));
  CHECK(identical(a + c.transpose(0, 1), a.detach() + c32));
  CHECK(identical(a - b, a.detach() - b32));
  CHECK(identical(b * a, b32 * a.detach()));
  CHECK(identical(a / b, a.detach() / b32));
  for (const Tensor& y : {a + b, b - a, a * c.transpose(0, 1)}) CHECK(y.dtype() == f32);
  // Gradients: float32 for a, bfloat16 (the float32 gradient rounded once) for b and c.
  sum((a + b) * (a + c.transpose(0, 1))).backward();
  REQUIRE(b.grad().defined());
  CHECK(a.grad().dtype() == f32);
  CHECK(b.grad().dtype() == bf16);
  CHECK(c.grad().dtype() == bf16);
  const Tensor a32 = a.detach();
  const Tensor want_b = sum(a32 + c32, {0}), want_c = (a32 + b32).transpose(0, 1);
  CHECK(identical(b.grad(), want_b.to(bf16)));
  CHECK(identical(c.grad(), want_c.contiguous().to(bf16)));
  CHECK(identical(a.grad(), (a32 + c32) + (a32 + b32)));
  // Other mixed dtypes stay an error.
  check_error([&] { (void)(a.detach() + arange(4)); }, "dtypes differ");
}

TEST_CASE("mixed precision refuses nothing new: float64 is untouched by the scope") {
  Generator gen(16);
  Tensor a = uniform({9, 11}, -1, 1, gen, Dtype::Float64), b = uniform({11, 4}, -1, 1, gen, Dtype::Float64);
  const Tensor f64 = matmul(a, b);
  MixedPrecisionGuard bf16;
  CHECK(identical(matmul(a, b), f64));
  CHECK(matmul(a, b).dtype() == Dtype::Float64);
}

CUDA_TEST_CASE("mixed precision on the GPU: cublasGemmEx in bfloat16 equals the CPU's bf16 GEMM up to the order of sums") {
  // Both multiply the same bfloat16-rounded operands exactly and sum in float32: they differ only in
  // the order of the float32 additions, |d| <= 2 K eps32 (|A| |B|).
  Generator gen(17);
  const Device gpu = Device::cuda(0);
  Tensor a = uniform({3, 19, 37}, -1, 1, gen), b = uniform({3, 37, 11}, -1, 1, gen);
  Tensor x = uniform({23, 37}, -1, 1, gen), w = uniform({13, 37}, -1, 1, gen), bias = uniform({13}, -1, 1, gen);
  MixedPrecisionGuard bf16;
  auto check_order_only = [](const Tensor& got, const Tensor& want, const Tensor& magnitude, int64_t K) {
    const std::vector<double> g = values(got.to(Device::cpu())), w = values(want), m = values(magnitude);
    REQUIRE(g.size() == w.size());
    for (size_t i = 0; i < g.size(); ++i) {
      INFO("element " << i << ": GPU " << g[i] << ", CPU " << w[i]);
      CHECK(std::abs(g[i] - w[i]) <= 2 * double(K) * eps32 * m[i] + 1e-30);
    }
  };
  const Tensor mm_cpu = matmul(a, b), mm_gpu = matmul(a.to(gpu), b.to(gpu).transpose(1, 2).contiguous().transpose(1, 2));
  check_order_only(mm_gpu, mm_cpu, matmul(abs(a), abs(b)), 37);
  const Tensor f32 = [&] {
    MixedPrecisionGuard fp32(Precision::Float32);
    return matmul(a, b);
  }();
  CHECK(!identical(mm_cpu, f32));  // the GPU's result is the bf16 one, not float32's
  // linear in the scope: bfloat16 y on both devices, the float32 sums of the same bfloat16 products, from
  // the bias, rounded once; x float32 or bfloat16. The GPU's sums start from the bias rounded to bfloat16
  // (cuBLAS writes the bfloat16 y itself, beta = 1 on y filled with the bias: no float32 scratch), so its y
  // is within one bfloat16 step of the CPU's linear given that rounded bias. From the same bfloat16 g, the
  // gradients differ only in the order of their float32 sums.
  auto within_one_step = [](const Tensor& got, const Tensor& want) {
    const Tensor a = got.to(Device::cpu()).contiguous(), b = want.contiguous();
    REQUIRE(a.dtype() == Dtype::BFloat16);
    REQUIRE(b.dtype() == Dtype::BFloat16);
    REQUIRE(a.numel() == b.numel());
    int64_t same = 0;
    for (int64_t i = 0; i < a.numel(); ++i) {
      const uint16_t p = a.data<BFloat16>()[i].bits, q = b.data<BFloat16>()[i].bits;
      INFO("element " << i << ": GPU " << float(a.data<BFloat16>()[i]) << ", CPU " << float(b.data<BFloat16>()[i]));
      CHECK((p == q || (((p ^ q) & 0x8000) == 0 && std::abs(int(p) - int(q)) == 1)));
      same += p == q ? 1 : 0;
    }
    CHECK(same * 10 >= a.numel() * 9);  // a rounding moves only where the order of the sums crosses a tie
  };
  for (const Dtype x_dtype : {Dtype::Float32, Dtype::BFloat16}) {
    INFO("x is " << dtype_name(x_dtype));
    const Tensor x_in = x.to(x_dtype), x32 = x_in.to(Dtype::Float32);
    Tensor xg = x_in.to(gpu).detach().requires_grad_(), wg = w.to(gpu).detach().requires_grad_();
    Tensor bg = bias.to(gpu).detach().requires_grad_();
    Tensor xc = x_in.detach().requires_grad_(), wc = w.detach().requires_grad_(), bc = bias.detach().requires_grad_();
    Tensor yg = linear(xg, wg, bg), yc = linear(xc, wc, bc);
    REQUIRE(yg.device() == gpu);
    within_one_step(yg, linear(x_in, w, bias.to(Dtype::BFloat16).to(Dtype::Float32)));
    const Tensor g16 = uniform(yc.shape(), -1, 1, gen).to(Dtype::BFloat16), g = g16.to(Dtype::Float32);
    yg.backward(g16.to(gpu));
    yc.backward(g16);
    REQUIRE(xg.grad().dtype() == x_dtype);
    if (x_dtype == Dtype::Float32) check_order_only(xg.grad(), xc.grad(), matmul(abs(g), abs(w)), 13);
    else within_one_step(xg.grad(), xc.grad());
    REQUIRE(wg.grad().dtype() == Dtype::Float32);
    check_order_only(wg.grad(), wc.grad(), matmul(abs(g).transpose(0, 1), abs(x32)), 23);
    REQUIRE(bg.grad().dtype() == Dtype::Float32);
    check_order_only(bg.grad(), bc.grad(), sum(abs(g), {0}), 23);
  }
  // Zero-size dims as on the CPU: no rows (dW = 0, db = 0), no input features (y = the bias, rounded).
  Tensor none = zeros({0, 37}, Dtype::Float32, gpu), wz = w.to(gpu).detach().requires_grad_();
  Tensor bz = bias.to(gpu).detach().requires_grad_();
  Tensor empty_y = linear(none, wz, bz);
  CHECK(empty_y.shape() == Shape({0, 13}));
  CHECK(empty_y.dtype() == Dtype::BFloat16);
  empty_y.backward(zeros({0, 13}, Dtype::BFloat16, gpu));
  ember::testing::check_values(wz.grad().to(Device::cpu()), std::vector<double>(13 * 37, 0.0), 0);
  ember::testing::check_values(bz.grad().to(Device::cpu()), std::vector<double>(13, 0.0), 0);
  Tensor no_features = linear(zeros({4, 0}, Dtype::Float32, gpu), zeros({13, 0}, Dtype::Float32, gpu), bias.to(gpu));
  within_one_step(no_features, bias.unsqueeze(0).expand({4, 13}).to(Dtype::BFloat16));
  // No output features: y [4, 0], and dx = g W over nothing is 0 (written, not left as it was allocated).
  Tensor xn = ones({4, 37}, Dtype::Float32, gpu).requires_grad_();
  Tensor no_outputs = linear(xn, zeros({0, 37}, Dtype::Float32, gpu), Tensor());
  CHECK(no_outputs.shape() == Shape({4, 0}));
  no_outputs.backward(zeros({4, 0}, Dtype::BFloat16, gpu));
  ember::testing::check_values(xn.grad().to(Device::cpu()), std::vector<double>(4 * 37, 0.0), 0);
}

namespace {

// The fused kernels round Q, K, V, dO and the weights P, dS as they stage them and keep the online
// softmax in float32: the same bound as the CPU's (which rounds the normalised P instead). Run with their
// products on the tensor cores (WMMA: mma.h on the emulator) or on the CUDA cores.
void check_fused_attention_bf16(bool tensor_cores, int64_t T, int64_t D, int64_t H, int64_t pad_from, bool causal,
                                AttentionBand band = {}) {
  const int64_t B = 2;
  INFO((tensor_cores ? "tensor cores" : "CUDA cores") << ", T " << T << ", heads " << H << " of " << D / H
                                                     << ", window " << band.window << ", global " << band.global);
  Generator gen(18);
  const Device gpu = Device::cuda(0);
  Tensor qkv = uniform({B, T, 3 * D}, -1, 1, gen);
  Tensor mask = zeros({B, T}, Dtype::Bool);
  for (int64_t t = pad_from; t < T; ++t) mask.data<bool>()[T + t] = true;
  testing::AttentionKernels fused(true);
  const bool tensor_cores_before = cuda::attention_tensor_cores();
  cuda::set_attention_tensor_cores(tensor_cores);
  struct Restore {
    bool tensor_cores;
    ~Restore() { cuda::set_attention_tensor_cores(tensor_cores); }
  } restore{tensor_cores_before};
  Tensor g = uniform({B, T, D}, -1, 1, gen).to(gpu);
  auto run = [&](bool bf16, Tensor& grad) {
    MixedPrecisionGuard precision(bf16 ? Precision::BFloat16 : Precision::Float32);
    Tensor x = qkv.to(gpu).detach().requires_grad_();
    Tensor out = attention(x, H, mask.to(gpu), causal, nullptr, band);
    CHECK(out.grad_fn()->name == std::string(band.on() ? "window_attention" : "attention"));  // the fused kernels
    out.backward(g);
    grad = x.grad();
    return out;
  };
  Tensor d32, d16;
  const Tensor o32 = run(false, d32), o16 = run(true, d16);
  CHECK(check_attention_bound(o16, o32, qkv, H) > 0);
  // And against the CPU's float32 attention (the GPU's float32 fused kernels are checked against it in
  // test_cuda_ops.cpp): the same bound.
  Tensor cpu_grad;
  const Tensor cpu32 = [&] {
    Tensor x = qkv.detach().requires_grad_();
    Tensor out = attention(x, H, mask, causal, nullptr, band);
    out.backward(g.to(Device::cpu()));
    cpu_grad = x.grad();
    return out;
  }();
  CHECK(check_attention_bound(o16, cpu32, qkv, H) > 0);
  CHECK(relative_norm_error(d16, cpu_grad) <= 8 * u);
  const double relative = relative_norm_error(d16, d32);
  INFO("relative error of dqkv: " << relative);
  CHECK(relative > 0);
  CHECK(relative <= 8 * u);

  // A bfloat16 qkv (the GPU linear's output in the scope): the kernels read it as it is and write a bfloat16
  // output and gradient, each entry rounded once. The forward is the float32 path's on the same (exact)
  // values, rounded: the same bits. The backward reads the kept output as bfloat16 for D = dO . O where the
  // float32 path kept it unrounded, so it matches that path's gradient rounded, up to that.
  const Tensor qkv16 = qkv.to(Dtype::BFloat16), g16 = g.to(Dtype::BFloat16);
  Tensor x16 = qkv16.to(gpu).detach().requires_grad_();
  const Tensor out16 = attention(x16, H, mask.to(gpu), causal, nullptr, band);
  REQUIRE(out16.dtype() == Dtype::BFloat16);
  out16.backward(g16);
  REQUIRE(x16.grad().dtype() == Dtype::BFloat16);
  Tensor widened_grad;
  Tensor widened;
  {
    MixedPrecisionGuard bf16;
    Tensor x = qkv16.to(Dtype::Float32).to(gpu).detach().requires_grad_();
    widened = attention(x, H, mask.to(gpu), causal, nullptr, band);
    widened.backward(g16.to(Dtype::Float32));
    widened_grad = x.grad();
  }
  const Tensor a = out16.to(Device::cpu()), b = widened.to(Device::cpu()).to(Dtype::BFloat16);
  int64_t differ = 0;
  for (int64_t i = 0; i < a.numel(); ++i) differ += a.data<BFloat16>()[i].bits != b.data<BFloat16>()[i].bits ? 1 : 0;
  CHECK(differ == 0);
  const double grad_error = relative_norm_error(x16.grad().to(Dtype::Float32), widened_grad);
  INFO("relative difference of the bfloat16 gradient from the float32 path's: " << grad_error);
  CHECK(grad_error <= 2 * u);  // its own rounding (u) and D's from the rounded output
}

}  // namespace

CUDA_TEST_CASE("mixed precision on the GPU: the fused attention kernels in bfloat16 stay within attention's bound") {
  // Both bfloat16 paths: the tensor cores (the default) and the CUDA cores (EMBER_ATTENTION_TENSOR_CORES=off).
  // Four shapes: one tile with a padded row (T 37, head size 8); several 64-row tiles, causal, with the
  // recipe's head size 32 and padding; head size 64, the gpu-large preset's (its dQ kernel the one held to
  // two blocks per SM, __launch_bounds__(256, 2)), causal over two tiles; two tiles of the largest head size,
  // 128 (the most shared memory).
  for (const bool tensor_cores : {true, false}) {
    check_fused_attention_bf16(tensor_cores, 37, 24, 3, 30, false);
    check_fused_attention_bf16(tensor_cores, 150, 64, 2, 97, true);
    check_fused_attention_bf16(tensor_cores, 90, 128, 2, 70, true);
    check_fused_attention_bf16(tensor_cores, 70, 256, 2, 41, false);
  }
}

CUDA_TEST_CASE("mixed precision on the GPU: window attention's band in bfloat16, on the tensor cores and the CUDA cores") {
  // The one attention op hands the band to the bfloat16 kernels too (they skip the tiles outside it): the
  // same bounds against the GPU's float32 and the CPU's float32 window attention. T 150 with window 5:
  // most 64-key tiles outside the band; a global token, causal, padding; window 20 over two 64-row tiles
  // with head size 32 (the recipe's); window 0 with 3 global tokens at head size 8.
  for (const bool tensor_cores : {true, false}) {
    check_fused_attention_bf16(tensor_cores, 150, 64, 2, 97, true, {5, 1});
    check_fused_attention_bf16(tensor_cores, 130, 64, 2, 110, false, {20, 0});
    check_fused_attention_bf16(tensor_cores, 37, 24, 3, 30, false, {0, 3});
  }
}
