// The CPU's dropout kernel (declared in core/kernels.h): out[i] = in[i] * scale where element i is kept,
// else 0, element i kept iff (random_bits(seed, first + i) >> 11) >= threshold (core/random.h's
// counter-based hash, the GPU's too).
// Determinism: each element's mask is a pure function of (seed, first + i), so the result is the same
// for any thread count and on either device. Precision: float32 and float64 are scaled in their own
// type; bfloat16 is widened to float in chunks, scaled in float and rounded once (cpu::widen,
// cpu::narrow), as the GPU does.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/bfloat16.h"
#include "core/cpu/elementwise.h"
#include "core/cpu/lanes.h"
#include "core/dtype.h"
#include "core/kernels.h"
#include "core/parallel.h"
#include "core/random.h"

namespace ember::cpu {
namespace {

// out[i] = in[i] * (kept(i) ? scale : 0) for i in [begin, end). `__restrict` (out is a new
// tensor) lets the compiler vectorise the hash's 64-bit multiplies (AVX-512DQ: 8 lanes at once).
template <typename T, typename C = compute_type<T>>
void mask_range(const T* __restrict in, T* __restrict out, int64_t begin, int64_t end, uint64_t seed, uint64_t first,
                uint64_t threshold, C scale) {
  for (int64_t i = begin; i < end; ++i) {
    bool keep = (random_bits(seed, first + uint64_t(i)) >> 11) >= threshold;
    out[i] = T(keep ? C(in[i]) * scale : C(0));
  }
}

template <typename T, typename C = compute_type<T>>
void apply_mask(const T* in, T* out, int64_t n, uint64_t seed, uint64_t first, uint64_t threshold, C scale) {
  parallel_for(0, n, 16384, [&](int64_t begin, int64_t end) {
    if constexpr (std::is_same_v<T, BFloat16>) {  // in float chunks, as float32 (cpu::widen, cpu::narrow)
      float wide[kWideChunk], masked[kWideChunk];
      for (int64_t i0 = begin; i0 < end; i0 += kWideChunk) {
        const int64_t m = std::min(kWideChunk, end - i0);
        widen(in + i0, wide, m);
        mask_range<float>(wide, masked, 0, m, seed, first + uint64_t(i0), threshold, scale);  // element i0 + i
        narrow(masked, out + i0, m);
      }
    } else {
      mask_range(in, out, begin, end, seed, first, threshold, scale);
    }
  });
}

}  // namespace

void dropout_mask(const On& on, const void* in, void* out, int64_t n, uint64_t seed, uint64_t first,
                  uint64_t threshold, double scale, const uint64_t* state) {
  if (state != nullptr) {  // on the CPU, host memory
    seed = state[0];
    first += state[1];
  }
  dispatch_real(Dtype(on.dtype), "dropout", [&](auto tag) {
    using T = typename decltype(tag)::type;
    apply_mask<T>(static_cast<const T*>(in), static_cast<T*>(out), n, seed, first, threshold, compute_type<T>(scale));
  });
}

}  // namespace ember::cpu
