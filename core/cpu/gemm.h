// CPU matrix multiply: a packed, cache-blocked, multithreaded SIMD GEMM with BLIS-style strides.
#pragma once
#include <cstdint>

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

// Which float micro-kernel gemm runs: "avx512", "avx2" or "generic".
const char* gemm_float_kernel_name();

// Forces a micro-kernel ("avx512", "avx2", "generic"; "auto" = the best this CPU runs), for
// tests and benchmarks. Returns false (and changes nothing) when this CPU lacks it.
// NOTE: not safe to call while another thread is inside gemm.
bool set_gemm_kernel(const char* name);

}  // namespace ember::cpu
