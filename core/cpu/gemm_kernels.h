// GEMM internals shared by the driver (gemm.cpp) and the micro-kernel files (gemm_avx512.cpp, ...).
#pragma once
#include <cstdint>

namespace ember {
struct BFloat16;  // core/bfloat16.h
}

namespace ember::cpu::detail {

// Packed layouts the micro-kernels read (both written by the driver's packing routines):
//   A micro-panel: mr rows x kc; element (r, k) at a_panel[k*mr + r]; rows past the matrix are 0.
//   B micro-panel: kc x width; element (k, j) at b_panel[k*width + j], where
//                  width = min(nr, round_up(n_cols, n_granule)); columns past the matrix are 0.
//
// A tile function computes one m_rows x n_cols block of C (m_rows <= mr, n_cols <= nr):
//   C[r, j] = alpha * sum_k a_panel(r, k) * b_panel(k, j) + beta * C[r, j]
// NOTE: beta == 0 means C is not read (it may hold NaN garbage).
// P is the packed element type, Out the type of C (the same but for the bfloat16 kernels, which
// pack bfloat16 and accumulate into float: core/cpu/gemm_bf16.h).
template <typename P, typename Out = P>
using TileFunction = void (*)(int64_t kc, const P* a_panel, const P* b_panel, Out* c, int64_t c_rs,
                              int m_rows, int n_cols, Out alpha, Out beta);
// Optional: C[r, j] = bias[j] + sum_k a_panel(r, k) * b_panel(k, j) (alpha 1, C not read), the sums
// started from the bias so that a Linear layer's bias costs no pass over C.
template <typename P, typename Out = P>
using BiasTileFunction = void (*)(int64_t kc, const P* a_panel, const P* b_panel, Out* c, int64_t c_rs,
                                  int m_rows, int n_cols, const Out* bias);

// Optional: the tile with A read in place, element (r, k) at a[r * a_rs + k * a_cs], not from a packed
// panel (the driver uses it when B's block is one micro-panel wide: each A element is then used once).
// A bfloat16 kernel reads the pair (k, k + 1) as the two words at a[r * a_rs + k * a_cs] (k even): a_cs 1,
// or a pair-major A (gemm.h's gemm_bf16_pair_major), whose pairs sit a_cs apart per k.
template <typename P, typename Out = P>
using DirectTileFunction = void (*)(int64_t kc, const P* a, int64_t a_rs, int64_t a_cs, const P* b_panel, Out* c,
                                    int64_t c_rs, int m_rows, int n_cols, Out alpha, Out beta);
// Packing into those layouts: A block m x kc, B block kc x n of source type S, read through any
// strides (the pointers are at the block's first element). Portable versions: gemm_pack.h.
template <typename S, typename P = S>
using PackAFunction = void (*)(const S* A, int64_t a_rs, int64_t a_cs, int64_t m, int64_t kc, P* out);
template <typename S, typename P = S>
using PackBFunction = void (*)(const S* B, int64_t b_rs, int64_t b_cs, int64_t kc, int64_t n, P* out);
// Optional, for a bfloat16 C: out[i * out_rs + j] = BFloat16(in[i * in_rs + j]) for i < rows, j < cols
// (round to nearest even, NaN kept; a kernel may flush subnormals to zero, as its packing does).
using RoundRowsFunction = void (*)(const float* in, int64_t in_rs, BFloat16* out, int64_t out_rs, int rows, int cols);
// Optional, for a bfloat16 C (one K block, beta 0): the tile summed in float, each entry rounded (as
// round_rows) as it is stored, with no float tile in between. a_rs 0: a packed A micro-panel; else A read
// in place, as tile_direct reads it. C = alpha A B (+ bias), the bias added where the float
// C path adds it: the sums start from it for a packed A and alpha 1 (tile_bias), else it is added last.
template <typename P>
using Bf16TileFunction = void (*)(int64_t kc, const P* a, int64_t a_rs, int64_t a_cs, const P* b_panel, BFloat16* c,
                                  int64_t c_rs, int m_rows, int n_cols, float alpha, const float* bias);

// A micro-kernel, its packing routines and the cache blocking that suits it. S: the operands' type
// in memory; P: packed; Out: C's (GemmKernel<float> is the plain float GEMM).
template <typename S, typename P = S, typename Out = S>
struct GemmKernel {
  using Source = S;
  using Packed = P;
  using Output = Out;
  const char* name;
  int mr;         // register tile rows
  int nr;         // register tile columns
  int n_granule;  // a partial B panel is padded to a multiple of this (the SIMD width)
  int64_t kc;     // K per packed pass (A and B micro-panels are kc long)
  int64_t mc;     // rows of A packed at once (a multiple of mr): the L2-resident block
  int64_t nc;     // columns of B packed at once (a multiple of nr)
  TileFunction<P, Out> tile;
  PackAFunction<S, P> pack_a;
  PackBFunction<S, P> pack_b;
  BiasTileFunction<P, Out> tile_bias = nullptr;  // null: the driver writes the bias into C first
  // K is packed in groups of this many (2: the bfloat16 kernels multiply pairs of k); a micro-panel
  // is then round_up(kc, k_granule) long, the missing k packed as zeros.
  int k_granule = 1;
  DirectTileFunction<P, Out> tile_direct = nullptr;  // null: A is always packed (kernels whose S != P)
  RoundRowsFunction round_rows = nullptr;  // null: a plain loop stores a bfloat16 C (gemm.cpp)
  Bf16TileFunction<P> tile_to_bf16 = nullptr;  // null: a bfloat16 C goes through a float tile and round_rows
};

// Software prefetch for the packers. Packing streams its operand from memory (a weight gradient's operands,
// 8,192 tokens long, are up to 20 MiB in float32), reading many rows side by side (a group of k's, or a
// panel's rows), and the hardware prefetchers do not run far enough ahead on that many streams: the packers
// then wait on each line. So as a packer reads a row it prefetches the row it will read kPrefetchRows rows
// (k's) further on, or, reading a panel's rows, the panel after next. Only for rows less than 4 KiB apart:
// rows a multiple of 4 KiB apart share their L1 sets, and the rows fetched ahead evict the ones being read.
// (What each bought and cost: docs/performance.md, "the packers prefetch".) The prefetched address may lie
// past the operand (the last rows look ahead of its end): a prefetch never faults, and the address is made
// as an integer, so no pointer outside the operand is formed.
constexpr int64_t kPrefetchRows = 32;
constexpr int64_t kPrefetchPanels = 2;
inline bool prefetches_rows(int64_t row_stride_bytes) { return row_stride_bytes < 4096; }
inline void prefetch_at(const void* base, int64_t byte_offset) {
  __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(base) + uintptr_t(byte_offset)));
}

// The x86 kernels are null when this CPU (or compiler) lacks the instructions.
const GemmKernel<float>* avx512_float_kernel();
const GemmKernel<double>* avx512_double_kernel();
const GemmKernel<float>* avx2_float_kernel();
// NEON (gemm_neon.cpp): on 64-bit ARM, where NEON is always there; null elsewhere.
const GemmKernel<float>* neon_float_kernel();
// Portable C++ kernels: always available.
const GemmKernel<float>* generic_float_kernel();
const GemmKernel<double>* generic_double_kernel();

// bfloat16 products summed in float (cpu::gemm_bf16), S = float (rounded while packed) or BFloat16:
// vdpbf16ps on bfloat16 pairs (gemm_avx512_bf16.cpp; null without AVX-512 BF16), and the fallback:
// the operands rounded to bfloat16 while packed as floats, then multiplied by the float kernel
// `base` (gemm_bf16_rounded.cpp; the same products, exact in float, so the same result up to the
// order of the float sums). Null when `base` has a tile shape it has no packing for.
template <typename S> const GemmKernel<S, uint16_t, float>* avx512_bf16_kernel();
template <> const GemmKernel<float, uint16_t, float>* avx512_bf16_kernel<float>();
template <> const GemmKernel<BFloat16, uint16_t, float>* avx512_bf16_kernel<BFloat16>();
// Intel AMX tiles (tdpbf16ps, a 32 x 32 block of C; gemm_amx_bf16.cpp): null unless CPUID and the OS
// allow them; and the same kernel over tiles emulated in plain C++, always available (for tests).
template <typename S> const GemmKernel<S, uint16_t, float>* amx_bf16_kernel();
template <> const GemmKernel<float, uint16_t, float>* amx_bf16_kernel<float>();
template <> const GemmKernel<BFloat16, uint16_t, float>* amx_bf16_kernel<BFloat16>();
template <typename S> const GemmKernel<S, uint16_t, float>* amx_bf16_emulated_kernel();
template <> const GemmKernel<float, uint16_t, float>* amx_bf16_emulated_kernel<float>();
template <> const GemmKernel<BFloat16, uint16_t, float>* amx_bf16_emulated_kernel<BFloat16>();
template <typename S> const GemmKernel<S, float, float>* rounded_bf16_kernel(const GemmKernel<float>& base);
// The same over the AVX-512 float kernel with vectorised packers (gemm_avx512.cpp; null without AVX-512).
template <typename S> const GemmKernel<S, float, float>* avx512_rounded_kernel();
template <> const GemmKernel<float, float, float>* avx512_rounded_kernel<float>();
template <> const GemmKernel<BFloat16, float, float>* avx512_rounded_kernel<BFloat16>();
// Multiply-adds per second of vdpbf16ps over those of the float FMA on this core, measured by two short
// loops (about a millisecond; gemm_avx512_bf16.cpp); 0 without AVX-512 BF16.
double avx512_bf16_rate_ratio();
template <> const GemmKernel<float, float, float>* rounded_bf16_kernel<float>(const GemmKernel<float>& base);
template <> const GemmKernel<BFloat16, float, float>* rounded_bf16_kernel<BFloat16>(const GemmKernel<float>& base);

// NOTE: helpers in headers that kernel files include go in an unnamed namespace (one copy per
// file): an ordinary inline function compiled under gemm_avx512.cpp's AVX-512 target could be
// the copy the linker keeps for everyone, and fault on a CPU without AVX-512.
namespace {
constexpr int64_t round_up(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}
}  // namespace

}  // namespace ember::cpu::detail
