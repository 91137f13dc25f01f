// The readable GEMM reference: a triple loop with a double accumulator, for tests to compare against.
#include <cstdint>

#include "core/cpu/gemm.h"

namespace ember::cpu {
namespace {

template <typename T>
void reference(int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t a_rs, int64_t a_cs,
               const T* B, int64_t b_rs, int64_t b_cs, T beta, T* C, int64_t c_rs) {
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double sum = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        sum += static_cast<double>(A[i * a_rs + k * a_cs]) * static_cast<double>(B[k * b_rs + j * b_cs]);
      }
      T& c = C[i * c_rs + j];
      // NOTE: beta == 0 must not read C (it may hold NaN), so 0 * NaN never happens.
      c = beta == T(0) ? static_cast<T>(alpha * sum) : static_cast<T>(alpha * sum + beta * static_cast<double>(c));
    }
  }
}

}  // namespace

void gemm_reference(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t a_rs,
                    int64_t a_cs, const float* B, int64_t b_rs, int64_t b_cs, float beta,
                    float* C, int64_t c_rs) {
  reference(M, N, K, alpha, A, a_rs, a_cs, B, b_rs, b_cs, beta, C, c_rs);
}

void gemm_reference(int64_t M, int64_t N, int64_t K, double alpha, const double* A,
                    int64_t a_rs, int64_t a_cs, const double* B, int64_t b_rs, int64_t b_cs,
                    double beta, double* C, int64_t c_rs) {
  reference(M, N, K, alpha, A, a_rs, a_cs, B, b_rs, b_cs, beta, C, c_rs);
}

}  // namespace ember::cpu
