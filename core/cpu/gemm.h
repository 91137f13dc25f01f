// CPU matrix multiply: a packed, cache-blocked, multithreaded SIMD GEMM with BLIS-style strides.
#pragma once
#include <cstdint>

#include "core/bfloat16.h"

namespace ember::cpu {

// C[i,j] = alpha * sum_k A(i,k) * B(k,j) + beta * C[i,j]   for i < M, j < N
//   A(i,k) = A[i*a_rs + k*a_cs]     B(k,j) = B[k*b_rs + j*b_cs]     C[i,j] = C[i*c_rs + j]
// Any strides work for A and B (a transpose is just swapped strides, never a copy); C rows are
// contiguous. beta == 0 means C is overwritten and never read (NaN garbage in C is fine).
// K == 0 gives C = beta * C. Threads come from core/parallel.h (num_threads()).
// bias (N values, or nullptr) is added to every row: C[i,j] += bias[j], once, tile by tile while the
// tile is in cache (a Linear layer's bias without a pass of its own).
void gemm(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t a_rs, int64_t a_cs,
          const float* B, int64_t b_rs, int64_t b_cs, float beta, float* C, int64_t c_rs,
          const float* bias = nullptr);
void gemm(int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t a_rs,
          int64_t a_cs, const double* B, int64_t b_rs, int64_t b_cs, double beta, double* C,
          int64_t c_rs, const double* bias = nullptr);

// `batch` independent products; product i uses A + i*a_bs, B + i*b_bs, C + i*c_bs.
// Threads split over the batch when it is large enough, else inside each product.
void gemm_batched(int64_t batch, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                  int64_t a_bs, int64_t a_rs, int64_t a_cs, const float* B, int64_t b_bs,
                  int64_t b_rs, int64_t b_cs, float beta, float* C, int64_t c_bs, int64_t c_rs);
void gemm_batched(int64_t batch, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
                  int64_t a_bs, int64_t a_rs, int64_t a_cs, const double* B, int64_t b_bs,
                  int64_t b_rs, int64_t b_cs, double beta, double* C, int64_t c_bs,
                  int64_t c_rs);

// The plain triple loop, same contract as gemm (accumulates in double): what tests compare against.
void gemm_reference(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t a_rs,
                    int64_t a_cs, const float* B, int64_t b_rs, int64_t b_cs, float beta,
                    float* C, int64_t c_rs);
void gemm_reference(int64_t M, int64_t N, int64_t K, double alpha, const double* A,
                    int64_t a_rs, int64_t a_cs, const double* B, int64_t b_rs, int64_t b_cs,
                    double beta, double* C, int64_t c_rs);

// bfloat16 products summed in float32 (the mixed-precision GEMM; error bound: docs/precision.md):
// the same contract as gemm, with A and B read as bfloat16: float32 operands are rounded to
// bfloat16 (nearest even) while they are packed, so a float32 tensor needs no conversion pass;
// bfloat16 operands are read as they are. The sums, alpha, beta, the bias and C are float32.
// NOTE: the AVX-512 BF16 kernel (vcvtne2ps2bf16, vdpbf16ps) flushes subnormal operands to zero.
void gemm_bf16(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t a_rs, int64_t a_cs,
               const float* B, int64_t b_rs, int64_t b_cs, float beta, float* C, int64_t c_rs,
               const float* bias = nullptr);
void gemm_bf16(int64_t M, int64_t N, int64_t K, float alpha, const BFloat16* A, int64_t a_rs, int64_t a_cs,
               const BFloat16* B, int64_t b_rs, int64_t b_cs, float beta, float* C, int64_t c_rs,
               const float* bias = nullptr);
// The same with a bfloat16 C (a mixed-precision layer's bfloat16 output): C = alpha A B (+ bias), each
// entry summed in float32 and rounded once (nearest even) as its tile is stored; C is never read.
// NOTE: the vdpbf16ps kernel stores a subnormal sum as zero (as its packing flushes subnormal operands).
void gemm_bf16(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t a_rs, int64_t a_cs,
               const float* B, int64_t b_rs, int64_t b_cs, BFloat16* C, int64_t c_rs, const float* bias = nullptr);
void gemm_bf16(int64_t M, int64_t N, int64_t K, float alpha, const BFloat16* A, int64_t a_rs, int64_t a_cs,
               const BFloat16* B, int64_t b_rs, int64_t b_cs, BFloat16* C, int64_t c_rs,
               const float* bias = nullptr);
// The same with A given pair-major, the layout the vdpbf16ps kernel multiplies (pairs of k side by side):
//   A(i, k) = A[(k / 2) * a_ps + 2 * i + k % 2]        (a_ps even, >= 2 M; an odd K's last pair's second word unread)
// so a matrix kept that way is read in place, never packed, when B is one micro-panel (N <= 32) wide: the
// fused attention keeps its probabilities and dS in it for dV = P^T dO and dK = dS^T Q (core/cpu/attention.cpp).
// Any other kernel or N: A is de-interleaved into a column-major copy first. C is bfloat16, as gemm_bf16's (no bias).
void gemm_bf16_pair_major(int64_t M, int64_t N, int64_t K, float alpha, const BFloat16* A, int64_t a_ps,
                          const BFloat16* B, int64_t b_rs, int64_t b_cs, BFloat16* C, int64_t c_rs);
void gemm_bf16_batched(int64_t batch, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t a_bs,
                       int64_t a_rs, int64_t a_cs, const float* B, int64_t b_bs, int64_t b_rs, int64_t b_cs,
                       float beta, float* C, int64_t c_bs, int64_t c_rs);
void gemm_bf16_batched(int64_t batch, int64_t M, int64_t N, int64_t K, float alpha, const BFloat16* A,
                       int64_t a_bs, int64_t a_rs, int64_t a_cs, const BFloat16* B, int64_t b_bs, int64_t b_rs,
                       int64_t b_cs, float beta, float* C, int64_t c_bs, int64_t c_rs);

// Which bfloat16 kernel gemm_bf16 runs: "avx512_bf16" (vdpbf16ps), or "rounded" (operands rounded to
// bfloat16 while packed, the float kernel: on a CPU without AVX-512 BF16, or whose vdpbf16ps does fewer
// multiply-adds per second than its float FMA); by name only: "amx" (Intel AMX tiles) and "amx_emulated"
// (the AMX kernel over tiles emulated in C++).
const char* gemm_bf16_kernel_name();
// Forces one ("avx512_bf16", "amx", "amx_emulated", "rounded"; "auto" = the one EMBER_BF16_KERNEL names if
// set, else vdpbf16ps where gemm_bf16_rate_ratio() >= 1, else "rounded"), for tests and benchmarks. Returns
// false (and changes nothing) when this CPU lacks it. NOTE: not while a gemm runs. "amx" is not in "auto":
// it has not yet run on such a CPU. A bad EMBER_BF16_KERNEL is an ember::Error at the first bfloat16 product.
bool set_gemm_bf16_kernel(const char* name);
// vdpbf16ps's multiply-adds per second over the float FMA's on this core (measured once: two short loops of
// independent chains; 0 without AVX-512 BF16). What "auto" decides by.
double gemm_bf16_rate_ratio();

// Which float micro-kernel gemm runs: "avx512", "avx2" (x86-64, picked by what the CPU has), "neon" (aarch64)
// or "generic" (any other CPU).
const char* gemm_float_kernel_name();

// Forces a micro-kernel ("avx512", "avx2", "neon", "generic"; "auto" = the best this CPU runs), for
// tests and benchmarks. Returns false (and changes nothing) when this CPU lacks it.
// NOTE: not safe to call while another thread is inside gemm.
bool set_gemm_kernel(const char* name);

}  // namespace ember::cpu
