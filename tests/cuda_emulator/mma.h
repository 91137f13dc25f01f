// A stand-in for CUDA's <mma.h> (nvcuda::wmma, the warp's tensor-core products) in the CPU emulator:
// the 16 x 16 x 16 shape with bfloat16 operands and a float accumulator, the one cuda/*.cu uses.
//
// On a GPU a fragment is spread over the 32 lanes of a warp in a layout CUDA leaves unspecified, so
// correct code touches it only through these calls (or element-wise the same way on every element).
// The emulator picks the simplest layout: every lane holds the whole tile, row-major ([rows][cols] for
// matrix_a [M][K], matrix_b [K][N] and the accumulator [M][N]). Each call is a warp collective, as on
// a GPU: the 32 lanes of the warp meet there (a __syncwarp at the caller's line, so lanes that reach
// different calls, or a lane that never does, are reported like any diverged collective: launch.cpp),
// then each lane loads, multiplies or stores the whole tile by itself. mma_sync sums in float, k in
// order (a bfloat16 product is exact in float32; a tensor core adds them in its own order). The
// operands' rules of the real calls are checked, not left undefined: the pointer 32-byte aligned,
// ldm a multiple of 16 bytes (8 bfloat16, 4 floats).
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <source_location>
#include <type_traits>

#include "cuda_bf16.h"
#include "warp.h"

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulator's WMMA has the 16 x 16 x 16 shape only");
  static_assert(std::is_same_v<Use, accumulator> ? std::is_same_v<T, float> : std::is_same_v<T, __nv_bfloat16>,
                "the emulator's WMMA multiplies __nv_bfloat16 operands into a float accumulator");
  static constexpr int rows = std::is_same_v<Use, matrix_b> ? K : M;
  static constexpr int cols = std::is_same_v<Use, matrix_a> ? K : N;
  static constexpr int num_elements = rows * cols;
  T x[num_elements];  // row-major, the whole tile in every lane
};

namespace emulated {

// The warp meets at the caller's line, as at any warp collective.
inline void meet(const std::source_location& where) {
  (void)::ember_emu::warp_collective(::ember_emu::WarpOp::kSync, 0xFFFFFFFFu, 0, 0, 32, where.file_name(),
                                     int(where.line()));
}

inline void check_operand(const void* p, unsigned ldm, size_t element_bytes, const std::source_location& where) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0 || (ldm * element_bytes) % 16 != 0) {
    std::fprintf(stderr,
                 "CUDA emulator: a WMMA load or store at %s:%u with pointer %p and ldm %u: the pointer must be "
                 "32-byte aligned and ldm a multiple of 16 bytes\n",
                 where.file_name(), unsigned(where.line()), p, ldm);
    std::abort();
  }
}

}  // namespace emulated

template <typename Use, typename T, typename Layout>
void fill_fragment(fragment<Use, 16, 16, 16, T, Layout>& f, T value,
                   const std::source_location& where = std::source_location::current()) {
  emulated::meet(where);
  for (T& e : f.x) e = value;
}

// matrix_a or matrix_b: the layout is the fragment's (row_major: element (r, c) at p[r * ldm + c];
// col_major: at p[c * ldm + r]).
template <typename Use, typename Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, __nv_bfloat16, Layout>& f, const __nv_bfloat16* p, unsigned ldm,
                      const std::source_location& where = std::source_location::current()) {
  static_assert(std::is_same_v<Layout, row_major> || std::is_same_v<Layout, col_major>,
                "a matrix_a or matrix_b fragment names its layout");
  emulated::meet(where);
  emulated::check_operand(p, ldm, sizeof(__nv_bfloat16), where);
  using F = fragment<Use, 16, 16, 16, __nv_bfloat16, Layout>;
  for (int r = 0; r < F::rows; ++r)
    for (int c = 0; c < F::cols; ++c)
      f.x[r * F::cols + c] = std::is_same_v<Layout, row_major> ? p[size_t(r) * ldm + c] : p[size_t(c) * ldm + r];
}

// The accumulator: the layout is the call's.
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ldm, layout_t layout,
                             const std::source_location& where = std::source_location::current()) {
  emulated::meet(where);
  emulated::check_operand(p, ldm, sizeof(float), where);
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      f.x[r * 16 + c] = layout == mem_row_major ? p[size_t(r) * ldm + c] : p[size_t(c) * ldm + r];
}

inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm,
                              layout_t layout, const std::source_location& where = std::source_location::current()) {
  emulated::meet(where);
  emulated::check_operand(p, ldm, sizeof(float), where);
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) (layout == mem_row_major ? p[size_t(r) * ldm + c] : p[size_t(c) * ldm + r]) = f.x[r * 16 + c];
}

// d = a b + c (d may be c).
template <typename LayoutA, typename LayoutB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LayoutA>& a,
              const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LayoutB>& b,
              const fragment<accumulator, 16, 16, 16, float>& c,
              const std::source_location& where = std::source_location::current()) {
  emulated::meet(where);
  float out[256];
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n) {
      float sum = c.x[m * 16 + n];
      for (int k = 0; k < 16; ++k) sum += float(a.x[m * 16 + k]) * float(b.x[k * 16 + n]);
      out[m * 16 + n] = sum;
    }
  for (int i = 0; i < 256; ++i) d.x[i] = out[i];
}

}  // namespace nvcuda::wmma
