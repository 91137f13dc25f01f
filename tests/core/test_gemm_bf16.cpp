// Tests for the bfloat16 GEMM (cpu::gemm_bf16): every kernel against the float reference GEMM on the
// same operands rounded to bfloat16 (odd shapes, every layout, alpha / beta, bias, batches), and the
// float result of the unrounded operands within the bound of docs/precision.md.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/bfloat16.h"
#include "core/cpu/gemm.h"
#include "core/error.h"
#include "core/parallel.h"

namespace {

using ember::BFloat16;
namespace cpu = ember::cpu;

struct Guard {
  int threads = ember::num_threads();
  ~Guard() {
    ember::set_num_threads(threads);
    cpu::set_gemm_bf16_kernel("auto");
    cpu::set_gemm_kernel("auto");
  }
};

// The bfloat16 kernels this CPU runs: the native ones where it has AVX-512 BF16 or AMX, the AMX
// kernel over emulated tiles (everywhere), and the fallback over each float kernel.
struct KernelChoice {
  std::string bf16, float_kernel;
};
std::vector<KernelChoice> kernel_choices() {
  std::vector<KernelChoice> choices;
  if (cpu::set_gemm_bf16_kernel("avx512_bf16")) choices.push_back({"avx512_bf16", "auto"});
  if (cpu::set_gemm_bf16_kernel("amx")) choices.push_back({"amx", "auto"});
  choices.push_back({"amx_emulated", "auto"});  // the AMX kernel's code over tiles emulated in C++
  for (const char* f : {"avx512", "avx2", "neon", "generic"})
    if (cpu::set_gemm_kernel(f)) choices.push_back({"rounded", f});
  cpu::set_gemm_bf16_kernel("auto");
  cpu::set_gemm_kernel("auto");
  return choices;
}
// "kernel K over float kernel F", for INFO (which captures by reference: give it a named string, not a call).
std::string kernel_label() {
  return std::string("kernel ") + cpu::gemm_bf16_kernel_name() + " over float kernel " + cpu::gemm_float_kernel_name();
}
void use(const KernelChoice& choice) {
  REQUIRE(cpu::set_gemm_kernel(choice.float_kernel.c_str()));
  REQUIRE(cpu::set_gemm_bf16_kernel(choice.bf16.c_str()));
}

float round_bf16(float x) { return float(BFloat16(x)); }

enum class Layout { RowMajor, ColMajor, Strided };
struct Matrix {
  int64_t rs, cs, size;
};
Matrix layout_of(int64_t rows, int64_t cols, Layout layout) {
  switch (layout) {
    case Layout::RowMajor: return {cols + 3, 1, rows * (cols + 3)};
    case Layout::ColMajor: return {1, rows + 3, cols * (rows + 3)};
    case Layout::Strided: return {2 * cols + 5, 2, rows * (2 * cols + 5)};
  }
  return {};
}

std::vector<float> random_floats(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> v(size_t(std::max<int64_t>(n, 1)));
  for (float& x : v) x = uniform(rng);
  return v;
}

// One product C = alpha A B + beta C (+ bias) by the bfloat16 GEMM, checked against the float
// reference on the rounded operands: the products are exact in float, so only the order of the float
// sums differs: |error| <= 2 K eps32 sum_k |a_k b_k| (+ the beta and bias terms' rounding).
void check_product(int64_t M, int64_t N, int64_t K, Layout la, Layout lb, float alpha, float beta, bool bias,
                   bool bf16_operands, std::mt19937& rng) {
  Matrix a = layout_of(M, K, la), b = layout_of(K, N, lb);
  std::vector<float> A = random_floats(a.size, rng), B = random_floats(b.size, rng);
  std::vector<float> C0 = random_floats(M * (N + 1), rng), bias_values = random_floats(N, rng);
  std::vector<float> A_rounded(A.size()), B_rounded(B.size());
  for (size_t i = 0; i < A.size(); ++i) A_rounded[i] = round_bf16(A[i]);
  for (size_t i = 0; i < B.size(); ++i) B_rounded[i] = round_bf16(B[i]);
  const int64_t c_rs = N + 1;
  std::vector<float> C = C0, expected = C0;
  const float* bias_ptr = bias ? bias_values.data() : nullptr;
  if (bf16_operands) {
    std::vector<BFloat16> Ab(A.size()), Bb(B.size());
    for (size_t i = 0; i < A.size(); ++i) Ab[i] = BFloat16(A[i]);
    for (size_t i = 0; i < B.size(); ++i) Bb[i] = BFloat16(B[i]);
    cpu::gemm_bf16(M, N, K, alpha, Ab.data(), a.rs, a.cs, Bb.data(), b.rs, b.cs, beta, C.data(), c_rs, bias_ptr);
  } else {
    cpu::gemm_bf16(M, N, K, alpha, A.data(), a.rs, a.cs, B.data(), b.rs, b.cs, beta, C.data(), c_rs, bias_ptr);
  }
  cpu::gemm_reference(M, N, K, alpha, A_rounded.data(), a.rs, a.cs, B_rounded.data(), b.rs, b.cs, beta,
                      expected.data(), c_rs);
  const double eps32 = std::ldexp(1.0, -24);
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double magnitude = 0;
      for (int64_t k = 0; k < K; ++k)
        magnitude += std::abs(double(A_rounded[i * a.rs + k * a.cs]) * B_rounded[k * b.rs + j * b.cs]);
      double want = expected[i * c_rs + j] + (bias ? bias_values[j] : 0.0);
      double tol = (2 * K + 4) * eps32 * (std::abs(alpha) * magnitude + std::abs(beta * C0[i * c_rs + j]) +
                                          (bias ? std::abs(bias_values[j]) : 0.0)) + 1e-30;
      INFO("M " << M << " N " << N << " K " << K << " at (" << i << ", " << j << ")");
      REQUIRE(std::abs(C[i * c_rs + j] - want) <= tol);
    }
  }
}

}  // namespace

TEST_CASE("gemm_bf16 equals the float GEMM of the rounded operands: odd shapes, every layout, every kernel") {
  Guard guard;
  std::mt19937 rng(7);
  const Layout layouts[] = {Layout::RowMajor, Layout::ColMajor, Layout::Strided};
  for (const KernelChoice& choice : kernel_choices()) {
    use(choice);
    const std::string label = kernel_label();
    INFO(label);
    for (auto [M, N, K] : {std::tuple{1, 1, 1}, {3, 5, 7}, {14, 32, 2}, {15, 33, 3}, {29, 47, 31}, {13, 17, 33},
                           {45, 70, 65}, {7, 100, 1}, {64, 16, 1030}})
      for (Layout la : layouts)
        for (Layout lb : layouts) check_product(M, N, K, la, lb, 1.0f, 0.0f, false, false, rng);
  }
}

TEST_CASE("gemm_bf16 with alpha, beta and a bias; bfloat16 operands; several K blocks; 1 and 2 threads") {
  Guard guard;
  std::mt19937 rng(11);
  for (const KernelChoice& choice : kernel_choices()) {
    use(choice);
    const std::string label = kernel_label();
    INFO(label);
    for (int threads : {1, 2}) {
      ember::set_num_threads(threads);
      for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, {1.0f, 1.0f}, {0.5f, -2.0f}, {-1.5f, 0.0f}}) {
        check_product(37, 41, 2100, Layout::RowMajor, Layout::ColMajor, alpha, beta, false, false, rng);
        check_product(200, 70, 129, Layout::ColMajor, Layout::RowMajor, alpha, beta, false, true, rng);
        // B one micro-panel wide (N <= 32) and bfloat16 rows: A read in place (odd K, several K blocks too)
        check_product(60, 32, 37, Layout::RowMajor, Layout::RowMajor, alpha, beta, false, true, rng);
        check_product(45, 17, 2051, Layout::RowMajor, Layout::ColMajor, alpha, beta, false, true, rng);
      }
      for (float beta : {0.0f, 1.0f}) {
        check_product(100, 90, 130, Layout::RowMajor, Layout::ColMajor, 1.0f, beta, true, false, rng);
        check_product(31, 35, 1500, Layout::RowMajor, Layout::RowMajor, 1.0f, beta, true, true, rng);
      }
    }
  }
}

TEST_CASE("gemm_bf16 far longer in K than C is wide (cut in K, as a weight gradient): values, and the same bits for 1 to 4 threads") {
  Guard guard;
  std::mt19937 rng(13);
  for (const KernelChoice& choice : kernel_choices()) {
    use(choice);
    const std::string label = kernel_label();
    INFO(label);
    for (int threads : {1, 2}) {
      ember::set_num_threads(threads);
      check_product(30, 41, 4500, Layout::ColMajor, Layout::RowMajor, 1.0f, 0.0f, true, false, rng);
      check_product(30, 41, 4500, Layout::ColMajor, Layout::RowMajor, 0.5f, 1.0f, false, true, rng);
    }
    const int64_t M = 45, N = 37, K = 8300;  // bfloat16 operands, dW's layout: g^T (A column-major) times x
    std::vector<BFloat16> A, B;
    for (float x : random_floats(K * M, rng)) A.push_back(BFloat16(x));
    for (float x : random_floats(K * N, rng)) B.push_back(BFloat16(x));
    std::vector<std::vector<float>> results;
    for (int threads : {1, 2, 3, 4}) {
      ember::set_num_threads(threads);
      std::vector<float> C(size_t(M * N), 1.0f);
      cpu::gemm_bf16(M, N, K, 1.0f, A.data(), 1, M, B.data(), N, 1, 1.0f, C.data(), N);
      results.push_back(std::move(C));
    }
    CHECK(results[0] == results[1]);
    CHECK(results[0] == results[2]);
    CHECK(results[0] == results[3]);
  }
}

TEST_CASE("gemm_bf16 against float32: within the bound of bfloat16's 8-bit significand and the length K") {
  // |C_bf16 - C_f32| <= (2 u + u^2 + 2 K eps32) sum_k |a_k| |b_k|, u = 2^-8 (one rounding per operand).
  Guard guard;
  std::mt19937 rng(3);
  const double u = std::ldexp(1.0, -8), eps32 = std::ldexp(1.0, -24);
  for (int64_t K : {1, 16, 255, 1024}) {
    const int64_t M = 19, N = 23;
    std::vector<float> A = random_floats(M * K, rng), B = random_floats(K * N, rng), C(M * N), F(M * N);
    cpu::gemm_bf16(M, N, K, 1.0f, A.data(), K, 1, B.data(), N, 1, 0.0f, C.data(), N);
    cpu::gemm_reference(M, N, K, 1.0f, A.data(), K, 1, B.data(), N, 1, 0.0f, F.data(), N);
    double worst = 0;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double magnitude = 0;
        for (int64_t k = 0; k < K; ++k) magnitude += std::abs(double(A[i * K + k]) * B[k * N + j]);
        double bound = (2 * u + u * u + 2 * K * eps32) * magnitude;
        worst = std::max(worst, std::abs(C[i * N + j] - F[i * N + j]) / bound);
        REQUIRE(std::abs(C[i * N + j] - F[i * N + j]) <= bound);
      }
    CHECK(worst > 0);  // the rounding is really there: bf16 is not float32 under another name
  }
}

TEST_CASE("gemm_bf16 with a bfloat16 C: the float32 C of the same kernel rounded once, bit for bit; alpha, bias, K blocks") {
  // The bfloat16 C is stored tile by tile from the same float32 sums the float C path writes, so each
  // entry must be exactly BFloat16(that float): for every kernel and layout on 2 threads, alpha 1 and not,
  // with and without a bias, float32 and bfloat16 operands, and for K beyond one K block (summed in float32
  // first), K = 0 (C = the bias), ties, subnormals, NaN and infinity.
  Guard guard;
  std::mt19937 rng(23);
  float alpha = 1.0f;
  auto check = [&](int64_t M, int64_t N, int64_t K, Layout la, Layout lb, bool bias, bool bf16_operands) {
    Matrix a = layout_of(M, K, la), b = layout_of(K, N, lb);
    std::vector<float> A = random_floats(a.size, rng), B = random_floats(b.size, rng), bias_values = random_floats(N, rng);
    if (A.size() > 4) {  // values whose rounding is an edge case: a tie, a subnormal, NaN, infinity
      A[0] = 1.0f + std::ldexp(1.0f, -8);
      A[1] = 1e-39f;
    }
    const int64_t c_rs = N + 2;
    std::vector<float> wide(size_t(M * c_rs), -7.0f);
    std::vector<BFloat16> narrow(size_t(M * c_rs), BFloat16(-7.0f));
    const float* bias_ptr = bias ? bias_values.data() : nullptr;
    if (bf16_operands) {
      std::vector<BFloat16> Ab(A.begin(), A.end()), Bb(B.begin(), B.end());
      for (size_t i = 0; i < A.size(); ++i) Ab[i] = BFloat16(A[i]);
      for (size_t i = 0; i < B.size(); ++i) Bb[i] = BFloat16(B[i]);
      cpu::gemm_bf16(M, N, K, alpha, Ab.data(), a.rs, a.cs, Bb.data(), b.rs, b.cs, 0.0f, wide.data(), c_rs, bias_ptr);
      cpu::gemm_bf16(M, N, K, alpha, Ab.data(), a.rs, a.cs, Bb.data(), b.rs, b.cs, narrow.data(), c_rs, bias_ptr);
    } else {
      cpu::gemm_bf16(M, N, K, alpha, A.data(), a.rs, a.cs, B.data(), b.rs, b.cs, 0.0f, wide.data(), c_rs, bias_ptr);
      cpu::gemm_bf16(M, N, K, alpha, A.data(), a.rs, a.cs, B.data(), b.rs, b.cs, narrow.data(), c_rs, bias_ptr);
    }
    bool any_rounded = false;
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < c_rs; ++j) {
        INFO("M " << M << " N " << N << " K " << K << " at (" << i << ", " << j << ")");
        const BFloat16 got = narrow[size_t(i * c_rs + j)];
        if (j >= N) {  // the row padding is never written
          REQUIRE(got.bits == BFloat16(-7.0f).bits);
          continue;
        }
        const float want = wide[size_t(i * c_rs + j)];
        // NOTE: the vdpbf16ps kernel's store (vcvtneps2bf16) flushes a subnormal to a zero of its sign.
        const bool flushes = std::string(cpu::gemm_bf16_kernel_name()) == "avx512_bf16";
        const float expected = flushes && std::fpclassify(want) == FP_SUBNORMAL ? std::copysign(0.0f, want) : want;
        REQUIRE(got.bits == BFloat16(expected).bits);
        any_rounded = any_rounded || float(got) != want;
      }
    }
    INFO("M " << M << " N " << N << " K " << K << " bias " << bias);
    if (M * N * K > 1) CHECK(any_rounded);  // (1 x 1 x 1: A[0] below is 1 after rounding, an exact product)
  };
  const Layout layouts[] = {Layout::RowMajor, Layout::ColMajor, Layout::Strided};
  for (const KernelChoice& choice : kernel_choices()) {
    use(choice);
    const std::string label = kernel_label();
    INFO(label);
    ember::set_num_threads(2);  // split over threads; the next case holds 1 to 4 threads to the same bits
    for (float scale : {1.0f, 0.75f}) {
      alpha = scale;
      INFO("alpha " << alpha);
      for (auto [M, N, K] : {std::tuple{1, 1, 1}, {15, 33, 3}, {29, 47, 31}, {200, 70, 129}, {37, 41, 2100},
                             {29, 32, 31}, {45, 17, 1031}})  // (N <= 32: a row-major A read in place)
        for (Layout la : layouts)
          for (Layout lb : layouts)
            for (bool bias : {false, true}) check(M, N, K, la, lb, bias, (M + K) % 2 == 0);
    }
    alpha = 1.0f;
    check(9, 13, 0, Layout::RowMajor, Layout::RowMajor, true, false);   // K = 0: C = the bias, rounded
    check(9, 13, 0, Layout::RowMajor, Layout::RowMajor, false, true);   // K = 0, no bias: zeros
    check(0, 13, 5, Layout::RowMajor, Layout::RowMajor, true, false);   // no rows: nothing written
  }
  // Special values through the C path: NaN stays NaN, infinity stays infinity, a large value stays finite.
  std::vector<float> A = {NAN, 1.0f, INFINITY, 2.0f, 3.3e38f, 3.3e38f}, B = {1.0f, 0.0f, 0.0f, 1.0f};
  std::vector<BFloat16> out(6);
  cpu::gemm_bf16(3, 2, 2, 1.0f, A.data(), 2, 1, B.data(), 2, 1, out.data(), 2);
  CHECK(std::isnan(float(out[0])));
  CHECK(float(out[2]) == INFINITY);
  CHECK(float(out[4]) == float(BFloat16(3.3e38f)));
}

TEST_CASE("gemm_bf16 with a bfloat16 C: the same bits on 1 to 4 threads (rows, columns and K cut)") {
  // The bfloat16 C path of the driver's thread splits, every kernel (also what scripts/tsan.sh runs for it: the
  // sweep above checks the values of every kernel, layout and shape, on 2 threads).
  Guard guard;
  std::mt19937 rng(29);
  for (const KernelChoice& choice : kernel_choices()) {
    use(choice);
    const std::string label = kernel_label();
    INFO(label);
    for (auto [M, N, K] : {std::tuple{200, 70, 129}, {29, 32, 31}, {45, 37, 8300}}) {  // (the last: cut in K)
      std::vector<float> A = random_floats(M * K, rng), B = random_floats(K * N, rng), bias = random_floats(N, rng);
      std::vector<std::vector<BFloat16>> results;
      for (int threads : {1, 2, 3, 4}) {
        ember::set_num_threads(threads);
        std::vector<BFloat16> C(size_t(M * N));
        cpu::gemm_bf16(M, N, K, 1.0f, A.data(), K, 1, B.data(), N, 1, C.data(), N, bias.data());
        results.push_back(std::move(C));
      }
      for (size_t t = 1; t < results.size(); ++t)
        for (size_t e = 0; e < results[0].size(); ++e) REQUIRE(results[t][e].bits == results[0][e].bits);
    }
  }
}

TEST_CASE("gemm_bf16_pair_major: A read pair-major gives gemm_bf16's bits on A's rows; every kernel, odd K, 1 to 3 threads") {
  // A(i, k) at A[(k / 2) a_ps + 2 i + k % 2]: the vdpbf16ps kernel reads it in place when N <= 32 (its direct
  // tile stepping a_ps per pair, not 2), every other kernel or width copies it (column-major) first; either way
  // the result must be gemm_bf16's on the row-major A, bit for bit (the same sums in the same order). An odd
  // K's last pair holds a NaN in its unread second word, and the pair stride has slack past 2 M.
  Guard guard;
  std::mt19937 rng(31);
  for (const KernelChoice& choice : kernel_choices()) {
    use(choice);
    const std::string label = kernel_label();
    INFO(label);
    for (auto [M, N, K] : {std::tuple{1, 1, 1}, {14, 32, 2}, {37, 32, 256}, {29, 16, 31}, {256, 32, 255}, {15, 33, 64},
                           {40, 70, 129}, {13, 20, 700}, {5, 32, 0}})
      for (int threads : {1, 3})
        for (float alpha : {1.0f, 0.75f}) {
          INFO("M " << M << " N " << N << " K " << K << " threads " << threads << " alpha " << alpha);
          ember::set_num_threads(threads);
          std::vector<BFloat16> rows(size_t(M * K)), B(size_t(K * N));
          for (auto& v : rows) v = BFloat16(std::normal_distribution<float>()(rng));
          for (auto& v : B) v = BFloat16(std::normal_distribution<float>()(rng));
          const int64_t a_ps = 2 * M + 6;
          std::vector<BFloat16> pairs(size_t((K + 1) / 2 * a_ps), BFloat16(NAN));
          for (int64_t i = 0; i < M; ++i)
            for (int64_t k = 0; k < K; ++k) pairs[size_t(k / 2 * a_ps + 2 * i + k % 2)] = rows[size_t(i * K + k)];
          const int64_t c_rs = N + 3;
          std::vector<BFloat16> want(size_t(M * c_rs), BFloat16(-7.0f)), got = want;
          cpu::gemm_bf16(M, N, K, alpha, rows.data(), K, 1, B.data(), N, 1, want.data(), c_rs);
          cpu::gemm_bf16_pair_major(M, N, K, alpha, pairs.data(), a_ps, B.data(), N, 1, got.data(), c_rs);
          for (size_t e = 0; e < want.size(); ++e) REQUIRE(got[e].bits == want[e].bits);
          if (K > 0) CHECK(std::isfinite(float(got[0])));
        }
  }
  // B read through its strides (column-major) as gemm_bf16 reads it; and a bad pair stride is refused.
  std::vector<BFloat16> A(16, BFloat16(1.0f)), B(8, BFloat16(2.0f)), C(4);
  cpu::gemm_bf16_pair_major(2, 2, 4, 1.0f, A.data(), 4, B.data(), 1, 4, C.data(), 2);
  for (const BFloat16& c : C) CHECK(float(c) == 8.0f);
  CHECK_THROWS_WITH_AS(cpu::gemm_bf16_pair_major(4, 2, 4, 1.0f, A.data(), 6, B.data(), 2, 1, C.data(), 2),
                       "gemm_bf16_pair_major: A's pair stride 6 must be even and at least 2 M = 8", ember::Error);
}

TEST_CASE("gemm_bf16 edge cases: empty sizes, K = 0, NaN and infinity pass through") {
  Guard guard;
  std::vector<float> C = {5, 6};
  float a = 1, b = 1;
  cpu::gemm_bf16(0, 2, 3, 1.0f, &a, 3, 1, &b, 2, 1, 0.0f, C.data(), 2);  // M = 0: C untouched
  CHECK(C[0] == 5);
  cpu::gemm_bf16(1, 2, 0, 1.0f, &a, 1, 1, &b, 2, 1, 2.0f, C.data(), 2);  // K = 0: C = beta C
  CHECK(C[0] == 10);
  CHECK(C[1] == 12);
  for (const KernelChoice& choice : kernel_choices()) {
    use(choice);
    std::vector<float> A = {NAN, 1.0f, INFINITY, 2.0f}, B = {1.0f, 1.0f, 1.0f, 1.0f}, out(4);
    cpu::gemm_bf16(2, 2, 2, 1.0f, A.data(), 2, 1, B.data(), 2, 1, 0.0f, out.data(), 2);
    CHECK(std::isnan(out[0]));
    CHECK(std::isnan(out[1]));
    CHECK(out[2] == INFINITY);
    CHECK(out[3] == INFINITY);
  }
}

TEST_CASE("gemm_bf16_batched matches product by product") {
  Guard guard;
  std::mt19937 rng(5);
  const int64_t batch = 6, M = 33, N = 20, K = 17;
  std::vector<float> A = random_floats(batch * M * K, rng), B = random_floats(batch * K * N, rng);
  for (int threads : {1, 2}) {
    ember::set_num_threads(threads);
    std::vector<float> C(batch * M * N), one(M * N);
    cpu::gemm_bf16_batched(batch, M, N, K, 1.0f, A.data(), M * K, K, 1, B.data(), K * N, 1, K, 0.0f, C.data(),
                           M * N, N);
    for (int64_t i = 0; i < batch; ++i) {
      cpu::gemm_bf16(M, N, K, 1.0f, A.data() + i * M * K, K, 1, B.data() + i * K * N, 1, K, 0.0f, one.data(), N);
      for (int64_t e = 0; e < M * N; ++e) REQUIRE(C[i * M * N + e] == one[e]);
    }
  }
}

TEST_CASE("gemm_bf16 kernel choice: AMX by name only, the emulated one everywhere, unknown names refused") {
  Guard guard;
  REQUIRE(cpu::set_gemm_bf16_kernel("auto"));
  CHECK(std::string(cpu::gemm_bf16_kernel_name()) != "amx");  // untried on real AMX: never picked by itself
  REQUIRE(cpu::set_gemm_bf16_kernel("amx_emulated"));
  CHECK(std::string(cpu::gemm_bf16_kernel_name()) == "amx_emulated");
  CHECK_FALSE(cpu::set_gemm_bf16_kernel("tensor_cores"));
  CHECK(std::string(cpu::gemm_bf16_kernel_name()) == "amx_emulated");  // a refused name changes nothing
  if (cpu::set_gemm_bf16_kernel("amx")) CHECK(std::string(cpu::gemm_bf16_kernel_name()) == "amx");
  else CHECK(std::string(cpu::gemm_bf16_kernel_name()) == "amx_emulated");
}

TEST_CASE("gemm_bf16 packing rounds each operand as BFloat16 does: ties, subnormals, the largest floats, NaN; every layout") {
  // C = A I (and I B): each entry of C is one operand entry times 1, so C holds the operand exactly as the
  // kernel packed it (the other products are 0 * finite). The rounded kernels keep subnormals; vdpbf16ps's
  // packing flushes them (its NOTE). Then what must not meet a zero: the largest floats (rounded up to
  // infinity), infinity and NaN, each in a product of one term.
  Guard guard;
  const float max = std::numeric_limits<float>::max();
  const std::vector<float> specials = {1.0f + std::ldexp(1.0f, -8),       // a tie: down to 1 (even)
                                       1.0f + 3 * std::ldexp(1.0f, -8),   // a tie: up to 1 + 2^-6
                                       -(1.0f + std::ldexp(1.0f, -9)),    // below half: down
                                       1e-39f, -3e-40f,                    // subnormal
                                       3.3e38f,                            // stays finite
                                       0.1f, -0.0f, 7.0f};
  const Layout layouts[] = {Layout::RowMajor, Layout::ColMajor, Layout::Strided};
  for (const KernelChoice& choice : kernel_choices()) {
    use(choice);
    const std::string kernel = cpu::gemm_bf16_kernel_name();
    const std::string label = kernel_label();
    INFO(label);
    const bool flushes = kernel == "avx512_bf16";
    for (int64_t rows : {1, 13, 37}) {  // past one 14-row panel, 16-lane groups and masked tails
      const int64_t cols = int64_t(specials.size()) + 4;
      for (Layout layout : layouts) {
        const int layout_index = int(layout);
        for (bool bf16_source : {false, true}) {
          for (bool as_b : {false, true}) {  // the specials as A (times I) or as B (I times them)
            const int64_t M = as_b ? cols : rows, N = as_b ? rows : cols, K = cols;
            Matrix m = as_b ? layout_of(K, N, layout) : layout_of(M, K, layout);
            std::vector<float> values(size_t(m.size), 0.0f);
            for (int64_t i = 0; i < (as_b ? K : M); ++i)
              for (int64_t k = 0; k < (as_b ? N : K); ++k)
                values[size_t(i * m.rs + k * m.cs)] = specials[size_t((i + k) % specials.size())] * (k % 2 ? 1 : -1);
            const Matrix id = layout_of(cols, cols, Layout::RowMajor);
            std::vector<float> identity(size_t(id.size), 0.0f), C(size_t(M * N), -7.0f);
            for (int64_t i = 0; i < cols; ++i) identity[size_t(i * id.rs + i)] = 1.0f;
            std::vector<BFloat16> values16(values.size()), identity16(identity.size());
            for (size_t i = 0; i < values.size(); ++i) values16[i] = BFloat16(values[i]);
            for (size_t i = 0; i < identity.size(); ++i) identity16[i] = BFloat16(identity[i]);
            if (bf16_source && as_b)
              cpu::gemm_bf16(M, N, K, 1.0f, identity16.data(), id.rs, 1, values16.data(), m.rs, m.cs, 0.0f, C.data(), N);
            else if (bf16_source)
              cpu::gemm_bf16(M, N, K, 1.0f, values16.data(), m.rs, m.cs, identity16.data(), id.rs, 1, 0.0f, C.data(), N);
            else if (as_b)
              cpu::gemm_bf16(M, N, K, 1.0f, identity.data(), id.rs, 1, values.data(), m.rs, m.cs, 0.0f, C.data(), N);
            else
              cpu::gemm_bf16(M, N, K, 1.0f, values.data(), m.rs, m.cs, identity.data(), id.rs, 1, 0.0f, C.data(), N);
            for (int64_t i = 0; i < M; ++i)
              for (int64_t j = 0; j < N; ++j) {
                const float source = values[size_t(i * m.rs + j * m.cs)];  // A (i, j), or B (i, j) when as_b
                float want = round_bf16(source);
                if (flushes && std::fpclassify(want) == FP_SUBNORMAL) want = std::copysign(0.0f, want);
                const float got = C[size_t(i * N + j)];
                INFO("rows " << rows << " layout " << layout_index << " bf16 source " << bf16_source << " as B " << as_b
                             << " at (" << i << ", " << j << "): source " << source);
                REQUIRE(got == want);
              }
          }
        }
      }
    }
    for (float x : {max, -max, float(INFINITY), -float(INFINITY), float(NAN)}) {
      const float one = 1.0f;
      const BFloat16 x16(x), one16(1.0f);
      float c[4] = {};
      cpu::gemm_bf16(1, 1, 1, 1.0f, &x, 1, 1, &one, 1, 1, 0.0f, &c[0], 1);
      cpu::gemm_bf16(1, 1, 1, 1.0f, &one, 1, 1, &x, 1, 1, 0.0f, &c[1], 1);
      cpu::gemm_bf16(1, 1, 1, 1.0f, &x16, 1, 1, &one16, 1, 1, 0.0f, &c[2], 1);
      cpu::gemm_bf16(1, 1, 1, 1.0f, &one16, 1, 1, &x16, 1, 1, 0.0f, &c[3], 1);
      for (float got : c) {
        INFO("x " << x << " got " << got);
        if (std::isnan(x)) CHECK(std::isnan(got));
        else CHECK(got == std::copysign(float(INFINITY), x));  // the largest float rounds up to infinity
      }
    }
  }
}

TEST_CASE("gemm_bf16 auto: the measured choice, or the kernel EMBER_BF16_KERNEL names; a bad name is a clear error") {
  // ctest runs this case three times: as it is, and with EMBER_BF16_KERNEL=rounded and =no_such (CMakeLists.txt).
  Guard guard;
  REQUIRE(cpu::set_gemm_bf16_kernel("auto"));
  const char* env = std::getenv("EMBER_BF16_KERNEL");
  const std::string named = env != nullptr ? env : "";
  float a = 1.5f, b = 2.0f, c = 0.0f;
  if (named == "no_such") {
    CHECK_THROWS_WITH_AS(cpu::gemm_bf16(1, 1, 1, 1.0f, &a, 1, 1, &b, 1, 1, 0.0f, &c, 1),
                         doctest::Contains("EMBER_BF16_KERNEL=no_such: unknown kernel"), ember::Error);
    return;
  }
  cpu::gemm_bf16(1, 1, 1, 1.0f, &a, 1, 1, &b, 1, 1, 0.0f, &c, 1);
  CHECK(c == 3.0f);
  const std::string kernel = cpu::gemm_bf16_kernel_name();
  const double ratio = cpu::gemm_bf16_rate_ratio();
  INFO("auto picked " << kernel << "; vdpbf16ps / FMA multiply-adds per second " << ratio);
  if (!named.empty() && named != "auto") {
    CHECK(kernel == named);
  } else if (ratio == 0.0) {  // no AVX-512 BF16
    CHECK(kernel == "rounded");
  } else {
    CHECK(ratio > 0.1);  // a real measurement: 0.48 and 2 to 2.7 on the two CPUs of docs/performance.md
    CHECK(ratio < 10.0);
    CHECK(kernel == (ratio >= 1.0 ? "avx512_bf16" : "rounded"));
  }
}
