// The bfloat16 GEMM's fallback for CPUs without AVX-512 BF16: the operands rounded to bfloat16 while
// packed (stored as floats), then multiplied by a float micro-kernel. A product of two bfloat16 is
// exact in float, so this computes what vdpbf16ps computes, at float speed, in another order of sums.
#include "core/bfloat16.h"
#include "core/cpu/gemm_kernels.h"
#include "core/cpu/gemm_pack.h"

namespace ember::cpu::detail {
namespace {

// A source value as the float of its bfloat16 rounding (a bfloat16 source is exact).
inline float rounded(float x) { return BFloat16::to_float(BFloat16::round_to_bits(x)); }
inline float rounded(BFloat16 x) { return float(x); }

// The float kernels' layouts (gemm_pack.h), values rounded on the way.
template <typename S, int kMR>
void pack_a_rounded(const S* A, int64_t a_rs, int64_t a_cs, int64_t m, int64_t kc, float* out) {
  for (int64_t i0 = 0; i0 < m; i0 += kMR) {
    const int rows = static_cast<int>(std::min<int64_t>(kMR, m - i0));
    for (int64_t k = 0; k < kc; ++k)
      for (int r = 0; r < kMR; ++r) out[k * kMR + r] = r < rows ? rounded(A[(i0 + r) * a_rs + k * a_cs]) : 0.0f;
    out += kMR * kc;
  }
}

template <typename S, int kNR, int kGranule>
void pack_b_rounded(const S* B, int64_t b_rs, int64_t b_cs, int64_t kc, int64_t n, float* out) {
  for (int64_t j0 = 0; j0 < n; j0 += kNR) {
    const int cols = static_cast<int>(std::min<int64_t>(kNR, n - j0));
    const int width = static_cast<int>(std::min<int64_t>(kNR, round_up(cols, kGranule)));
    for (int64_t k = 0; k < kc; ++k)
      for (int j = 0; j < width; ++j) out[k * width + j] = j < cols ? rounded(B[k * b_rs + (j0 + j) * b_cs]) : 0.0f;
    out += kNR * kc;
  }
}

template <typename S, int kMR, int kNR, int kGranule>
GemmKernel<S, float, float> rounded_kernel(const GemmKernel<float>& base) {
  return {base.name, base.mr, base.nr, base.n_granule, base.kc, base.mc, base.nc, base.tile,
          &pack_a_rounded<S, kMR>, &pack_b_rounded<S, kNR, kGranule>, base.tile_bias};
}

template <typename S>
const GemmKernel<S, float, float>* rounded_for(const GemmKernel<float>& base) {
  // The tile shapes of the float kernels: AVX-512 14 x 32, AVX2 6 x 16, generic 4 x 16.
  if (base.mr == 14 && base.nr == 32 && base.n_granule == 16) {
    static const auto kernel = rounded_kernel<S, 14, 32, 16>(base);
    return &kernel;
  }
  if (base.mr == 6 && base.nr == 16 && base.n_granule == 8) {
    static const auto kernel = rounded_kernel<S, 6, 16, 8>(base);
    return &kernel;
  }
  if (base.mr == 4 && base.nr == 16 && base.n_granule == 16) {
    static const auto kernel = rounded_kernel<S, 4, 16, 16>(base);
    return &kernel;
  }
  return nullptr;
}

}  // namespace

template <>
const GemmKernel<float, float, float>* rounded_bf16_kernel<float>(const GemmKernel<float>& base) {
  return rounded_for<float>(base);
}
template <>
const GemmKernel<BFloat16, float, float>* rounded_bf16_kernel<BFloat16>(const GemmKernel<float>& base) {
  return rounded_for<BFloat16>(base);
}

}  // namespace ember::cpu::detail
