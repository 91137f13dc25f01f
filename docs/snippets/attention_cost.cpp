// docs/attention.md's numbers, compiled and run by CI: the shapes multi-head attention produces,
// that the head count leaves the parameters unchanged, and the cost table for the IMDb recipe.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "nn/attention.h"

using namespace ember;

int failures = 0;
void check(bool ok, const char* what) {
  if (!ok) std::printf("WRONG: %s\n", what);
  failures += !ok;
}

int main() {
  // Small sizes, real module: B = 2 reviews, T = 5 tokens, D = 8 wide.
  const int64_t B = 2, T = 5, D = 8;
  int64_t parameters_one_head = 0;
  for (int64_t H : {1, 2, 4, 8}) {
    Generator gen(0);
    nn::MultiHeadAttention attention(D, H, gen);
    auto [out, weights] = attention.forward(randn({B, T, D}, gen), Tensor(), /*causal=*/true, /*need_weights=*/true);
    std::printf("H = %lld: out %s, weights %s, %lld parameters\n", (long long)H, shape_str(out.shape()).c_str(),
                shape_str(weights.shape()).c_str(), (long long)attention.num_parameters());
    check(out.shape() == Shape({B, T, D}), "out is [B, T, D]");
    check(weights.shape() == Shape({B, H, T, T}), "weights are [B, H, T, T]");
    if (H == 1) parameters_one_head = attention.num_parameters();
    check(attention.num_parameters() == parameters_one_head, "the head count does not change the parameters");
    check(attention.num_parameters() == 3 * D * D + 3 * D + D * D + D, "QKV (3D x D + 3D) + output (D x D + D)");
    std::vector<float> w = weights.to_vector<float>();
    for (int64_t row = 0; row < B * H * T; ++row) {  // each query's weights: a distribution over keys <= itself
      double total = 0;
      for (int64_t k = 0; k < T; ++k) total += w[size_t(row * T + k)];
      check(std::abs(total - 1) < 1e-5, "every row of weights sums to 1");
      for (int64_t k = row % T + 1; k < T; ++k) check(w[size_t(row * T + k)] == 0, "causal: no weight on future keys");
    }
  }

  // The recipe's cost per encoder layer, forward, at the longest batch (B = 32, T = 256, D = 128,
  // FFN 512). A multiply-add counts as 2 FLOPs.
  const double b = 32, t = 256, d = 128, ffn = 512;
  std::printf("\nper layer, forward      H = 1      H = 4      H = 8   (GFLOP)\n");
  for (const char* part : {"QKV projection", "scores Q K^T", "weights V", "out projection", "feed-forward"}) {
    std::printf("%-18s", part);
    for (double h : {1.0, 4.0, 8.0}) {
      double dh = d / h, flops = 0;
      if (part[0] == 'Q') flops = 2 * b * t * d * 3 * d;
      if (part[0] == 's') flops = 2 * b * h * t * t * dh;  // B*H products of [T, Dh] x [Dh, T]
      if (part[0] == 'w') flops = 2 * b * h * t * t * dh;  // B*H products of [T, T] x [T, Dh]
      if (part[0] == 'o') flops = 2 * b * t * d * d;
      if (part[0] == 'f') flops = 2 * b * t * d * ffn * 2;
      std::printf("%11.3f", flops / 1e9);
    }
    std::printf("\n");
  }
  std::printf("%-18s", "[B, H, T, T] fp32");
  for (double h : {1.0, 4.0, 8.0}) std::printf("%8.0f MiB", b * h * t * t * 4 / 1048576);
  std::printf("\n");
  std::printf(failures ? "%d checks failed\n" : "all checks passed\n", failures);
  return failures ? 1 : 0;
}
