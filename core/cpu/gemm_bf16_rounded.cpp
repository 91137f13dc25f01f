// The bfloat16 GEMM on the float kernels, for CPUs without AVX-512 BF16 and those whose vdpbf16ps does fewer
// multiply-adds per second than their float FMA (gemm.cpp's "auto"): the operands rounded to bfloat16 while
// packed (stored as floats), then multiplied by a float micro-kernel. A product of two bfloat16 is exact in
// float, so this computes what vdpbf16ps computes, at float speed, in another order of sums.
#include "core/bfloat16.h"
#include "core/cpu/gemm_kernels.h"
#include "core/cpu/gemm_pack.h"

namespace ember::cpu::detail {
namespace {

template <typename S, int kMR, int kNR, int kGranule>
GemmKernel<S, float, float> rounded_kernel(const GemmKernel<float>& base) {
  return {base.name, base.mr, base.nr, base.n_granule, base.kc, base.mc, base.nc, base.tile,
          &pack_a_generic<S, kMR, float, RoundedToBf16>, &pack_b_generic<S, kNR, kGranule, float, RoundedToBf16>,
          base.tile_bias};
}

template <typename S>
const GemmKernel<S, float, float>* rounded_for(const GemmKernel<float>& base) {
  // The AVX-512 float kernel has its own: the same layouts packed 16 lanes at a time (gemm_avx512.cpp).
  if (&base == avx512_float_kernel()) return avx512_rounded_kernel<S>();
  // The tile shapes of the other float kernels: AVX2 6 x 16, NEON 8 x 12, generic 4 x 16.
  if (base.mr == 6 && base.nr == 16 && base.n_granule == 8) {
    static const auto kernel = rounded_kernel<S, 6, 16, 8>(base);
    return &kernel;
  }
  if (base.mr == 8 && base.nr == 12 && base.n_granule == 4) {
    static const auto kernel = rounded_kernel<S, 8, 12, 4>(base);
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
