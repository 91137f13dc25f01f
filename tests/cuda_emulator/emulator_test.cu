// Tests of the CPU emulator itself: that it catches what it claims to (docs/cuda.md). Written in
// CUDA like cuda/*.cu and translated the same way (translate.py); built into ember_tests_emulated
// only. The kernels here are wrong on purpose where a test says so.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>
#include <doctest/doctest.h>

#include <cstdint>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int kBlock = 64;

// WMMA (mma.h). Warp w makes rows 16 w .. 16 w + 15 of C [32][32] = A [32][48] B + C0, where B [48][32]
// is given as its transpose Bt [32][48] (read as a column-major operand) and C0 column-major: every
// layout the calls take. Fragments are loaded, multiplied and stored by all lanes of a warp together.
__global__ void wmma_product_kernel(const __nv_bfloat16* A, const __nv_bfloat16* Bt, const float* C0, float* C) {
  using namespace nvcuda;
  const int tm = int(threadIdx.x) / warpSize;
  for (int tn = 0; tn < 2; ++tn) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
    wmma::load_matrix_sync(c, C0 + tn * 16 * 32 + tm * 16, 32, wmma::mem_col_major);
    for (int k = 0; k < 48; k += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
      wmma::load_matrix_sync(a, A + tm * 16 * 48 + k, 48);
      wmma::load_matrix_sync(b, Bt + tn * 16 * 48 + k, 48);
      wmma::mma_sync(c, a, b, c);
    }
    wmma::store_matrix_sync(C + tm * 16 * 32 + tn * 16, c, 32, wmma::mem_row_major);
  }
}

// C [16][16] = A B with B row-major, by one warp, from a zero-filled accumulator; then lanes 16..31
// alone fill another fragment (wrong: a WMMA call is the whole warp's).
__global__ void wmma_row_major_kernel(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C, bool diverge) {
  using namespace nvcuda;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
  wmma::fill_fragment(c, 0.0f);
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b;
  wmma::load_matrix_sync(a, A, 16);
  wmma::load_matrix_sync(b, B, 16);
  wmma::mma_sync(c, a, b, c);
  wmma::store_matrix_sync(C, c, 16, wmma::mem_row_major);
  if (diverge && threadIdx.x >= 16) wmma::fill_fragment(c, 1.0f);
}


// Each block: thread t writes t to shared memory, then thread 0 adds them up.
__global__ void block_sum_kernel(int* out, bool with_barrier) {
  __shared__ int values[kBlock];
  values[threadIdx.x] = int(threadIdx.x);
  if (with_barrier) __syncthreads();
  if (threadIdx.x == 0) {
    int sum = 0;
    for (int i = 0; i < kBlock; ++i) sum += values[i];
    out[blockIdx.x] = sum;
  }
}

__global__ void divergent_kernel(int* out) {
  if (threadIdx.x < 16) __syncthreads();  // wrong: the other threads never get here
  out[threadIdx.x] = 1;
}

__global__ void two_barriers_kernel(int* out) {
  if (threadIdx.x % 2 == 0) {
    __syncthreads();  // wrong: odd threads wait at the other one
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}

__global__ void dynamic_shared_kernel(float* out) {
  extern __shared__ float scratch[];
  out[threadIdx.x] = scratch[threadIdx.x];  // never written: the block's shared memory is 0xFF
}

__global__ void copy_kernel(const float* in, float* out, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = in[i];
}

// Warps. Each warp sums its lanes' values by a butterfly of shuffles: every lane gets the sum.
__global__ void warp_sum_kernel(const int* in, int* out) {
  int v = in[threadIdx.x];
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
  out[threadIdx.x] = v;
}

// Lane i gets lane i - 1's value (lane 0 its own), then lane i + 2's (the last two their own), then
// lane 5's; out2 = the ballot of odd lanes, out3 = any / all of them.
__global__ void warp_moves_kernel(int* out, unsigned* ballots) {
  const int lane = int(threadIdx.x) % warpSize;
  int up = __shfl_up_sync(0xFFFFFFFFu, lane, 1);
  int down = __shfl_down_sync(0xFFFFFFFFu, lane, 2);
  int five = __shfl_sync(0xFFFFFFFFu, lane, 5);
  __syncwarp();
  out[threadIdx.x] = up * 10000 + down * 100 + five;
  unsigned odd = __ballot_sync(0xFFFFFFFFu, lane % 2 == 1);
  if (lane == 0) {
    ballots[0] = odd;
    ballots[1] = unsigned(__any_sync(0x1u, lane > 0));  // lane 0 alone
    ballots[2] = unsigned(__all_sync(0x1u, lane == 0));
  }
}

__global__ void shuffle_divergent_kernel(int* out) {  // wrong: lanes 16-31 never reach the shuffle
  int v = int(threadIdx.x);
  if (threadIdx.x < 16) v = __shfl_xor_sync(0xFFFFFFFFu, v, 1);
  out[threadIdx.x] = v;
}

__global__ void shuffle_wrong_mask_kernel(int* out) {  // wrong: the mask leaves out the upper half
  int v = __shfl_xor_sync(0x0000FFFFu, int(threadIdx.x), 1);
  out[threadIdx.x] = v;
}

__global__ void shuffle_outside_mask_kernel(int* out) {  // wrong: lane 15 reads lane 16, outside the mask
  int v = int(threadIdx.x);
  if (threadIdx.x < 16) v = __shfl_down_sync(0x0000FFFFu, v, 1, 32);
  out[threadIdx.x] = v;
}

__global__ void atomic_count_kernel(int* counter) { atomicAdd(counter, 1); }

int evaluations = 0;
int counted(int value) {
  ++evaluations;
  return value;
}

std::string last_error_text() { return cudaGetErrorString(cudaGetLastError()); }

template <typename T>
std::vector<T> to_host(const T* device, size_t n) {
  std::vector<T> host(n);
  REQUIRE(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
  return host;
}

}  // namespace

TEST_CASE("emulator: __syncthreads is a barrier, and without it one block order or the other reads unwritten shared memory") {
  int* out = nullptr;
  REQUIRE(cudaMalloc(&out, 2 * sizeof(int)) == cudaSuccess);
  block_sum_kernel<<<2, kBlock>>>(out, true);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  CHECK(to_host(out, 2) == std::vector<int>{kBlock * (kBlock - 1) / 2, kBlock * (kBlock - 1) / 2});
  // Without the barrier: block 0 runs thread 0 first (it reads 0xFF bytes, -1 as an int), block 1
  // runs its threads in reverse order (thread 0 last, and by luck right).
  block_sum_kernel<<<2, kBlock>>>(out, false);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  CHECK(to_host(out, 2) == std::vector<int>{0 + (kBlock - 1) * -1, kBlock * (kBlock - 1) / 2});
  cudaFree(out);
}

TEST_CASE("emulator: a barrier that not every thread reaches is a launch error") {
  int* out = nullptr;
  REQUIRE(cudaMalloc(&out, kBlock * sizeof(int)) == cudaSuccess);
  divergent_kernel<<<1, kBlock>>>(out);
  CHECK(last_error_text().find("divergent __syncthreads(): 16 threads wait at emulator_test.cu:") != std::string::npos);
  two_barriers_kernel<<<1, kBlock>>>(out);
  CHECK(last_error_text().find("wait at different barriers") != std::string::npos);
  CHECK(cudaGetLastError() == cudaSuccess);  // reported once, then cleared
  cudaFree(out);
}

TEST_CASE("emulator: launch limits: block size, grid size, dynamic shared memory and cudaFuncSetAttribute") {
  float* out = nullptr;
  REQUIRE(cudaMalloc(&out, 1024 * sizeof(float)) == cudaSuccess);
  copy_kernel<<<1, 2048>>>(out, out, 1);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  copy_kernel<<<dim3(1, 70000), 32>>>(out, out, 1);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  copy_kernel<<<0, 32>>>(out, out, 1);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  dynamic_shared_kernel<<<1, 32, 64 * 1024>>>(out);  // over the default 48 KiB
  CHECK(last_error_text().find("over the kernel's limit of 49152") != std::string::npos);
  REQUIRE(cudaFuncSetAttribute(dynamic_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024) == cudaSuccess);
  dynamic_shared_kernel<<<1, 32, 64 * 1024>>>(out);
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(std::isnan(to_host(out, 32)[5]));  // shared memory nobody wrote reads as NaN
  CHECK(cudaFuncSetAttribute(dynamic_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 300 * 1024) ==
        cudaErrorInvalidValue);
  cudaGetLastError();  // a failed call is also the last error, as on a GPU: cleared for the next test
  cudaFree(out);
}

TEST_CASE("emulator: launch arguments are evaluated once, and fresh device memory reads as NaN") {
  float *in = nullptr, *out = nullptr;
  REQUIRE(cudaMalloc(&in, 1000 * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMalloc(&out, 1000 * sizeof(float)) == cudaSuccess);
  CHECK(std::isnan(to_host(in, 1000)[999]));
  std::vector<float> values(1000);
  for (int i = 0; i < 1000; ++i) values[size_t(i)] = float(i);
  REQUIRE(cudaMemcpy(in, values.data(), 1000 * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  evaluations = 0;
  copy_kernel<<<3, 128>>>(in, out, counted(1000));
  REQUIRE(cudaGetLastError() == cudaSuccess);
  CHECK(evaluations == 1);
  CHECK(to_host(out, 1000) == values);
  cudaFree(in);
  cudaFree(out);
}

TEST_CASE("emulator: copies are checked against where their pointers live, and memory has a capacity") {
  float* device = nullptr;
  REQUIRE(cudaMalloc(&device, 16 * sizeof(float)) == cudaSuccess);
  std::vector<float> host(32);
  CHECK(cudaMemcpy(host.data(), host.data() + 16, 64, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  CHECK(last_error_text().find("destination") != std::string::npos);
  CHECK(cudaMemcpy(host.data(), device, 64, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  CHECK(cudaMemcpy(device, host.data(), 128, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);  // runs past
  CHECK(last_error_text().find("run past its allocation") != std::string::npos);
  CHECK(cudaMemcpy(device, host.data(), 64, cudaMemcpyHostToDevice) == cudaSuccess);
  cudaGetLastError();
  size_t free_before = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free_before, &total) == cudaSuccess);
  void* huge = nullptr;
  CHECK(cudaMalloc(&huge, total) == cudaErrorMemoryAllocation);
  CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
  size_t free_after = 0;
  REQUIRE(cudaMemGetInfo(&free_after, &total) == cudaSuccess);
  CHECK(free_after == free_before);
  cudaFree(device);
  REQUIRE(cudaMemGetInfo(&free_after, &total) == cudaSuccess);
  CHECK(free_after == free_before + 64);
}

TEST_CASE("emulator: with EMBER_EMULATOR_PROTECT=1, host code that reads device memory faults") {
  const char* protect = std::getenv("EMBER_EMULATOR_PROTECT");
  if (protect == nullptr || protect[0] != '1') {
    std::printf("skipped: run with EMBER_EMULATOR_PROTECT=1 (ctest emulated_protected does)\n");
    if (std::getenv("EMBER_CTEST_SKIP") != nullptr) std::_Exit(77);
    return;
  }
  float* device = nullptr;
  REQUIRE(cudaMalloc(&device, 1000 * sizeof(float)) == cudaSuccess);
  std::vector<float> values(1000, 2.0f);
  REQUIRE(cudaMemcpy(device, values.data(), 1000 * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  float* out = nullptr;
  REQUIRE(cudaMalloc(&out, 1000 * sizeof(float)) == cudaSuccess);
  copy_kernel<<<4, 256>>>(device, out, 1000);  // kernels and copies still reach it
  REQUIRE(cudaGetLastError() == cudaSuccess);
  CHECK(to_host(out, 1000) == values);
  std::fflush(nullptr);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    signal(SIGSEGV, SIG_DFL);  // die of the fault, without doctest's crash report
    signal(SIGBUS, SIG_DFL);
    volatile float read = device[0];  // wrong: a device pointer dereferenced by host code
    (void)read;
    std::_Exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK((WIFSIGNALED(status) && (WTERMSIG(status) == SIGSEGV || WTERMSIG(status) == SIGBUS)));
  cudaFree(device);
  cudaFree(out);
}

TEST_CASE("emulator: cuBLAS GEMM is column-major, with transposes, leading dimensions and beta = 0 not reading C") {
  cublasHandle_t handle = nullptr;
  REQUIRE(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS);
  // Column-major A (2 x 3, lda 2) = [1 3 5; 2 4 6], B (3 x 2, ldb 3) = [1 4; 2 5; 3 6].
  const std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {1, 2, 3, 4, 5, 6};
  float *A, *B, *C;
  REQUIRE(cudaMalloc(&A, 6 * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMalloc(&B, 6 * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMalloc(&C, 9 * sizeof(float)) == cudaSuccess);  // fresh: NaN
  cudaMemcpy(A, a.data(), 24, cudaMemcpyHostToDevice);
  cudaMemcpy(B, b.data(), 24, cudaMemcpyHostToDevice);
  const float one = 1, zero = 0;
  // C (2 x 2) = A B = [22 49; 28 64], column-major.
  REQUIRE(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, A, 2, B, 3, &zero, C, 2) == CUBLAS_STATUS_SUCCESS);
  CHECK(to_host(C, 4) == std::vector<float>{22, 28, 49, 64});
  // C (3 x 3) = A^T B^T, A read as 3 x 2 transposed (lda 2), B as 2 x 3 transposed (ldb 3):
  // A^T = [1 2; 3 4; 5 6], B^T = [1 2 3; 4 5 6].
  REQUIRE(cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_T, 3, 3, 2, &one, A, 2, B, 3, &zero, C, 3) == CUBLAS_STATUS_SUCCESS);
  CHECK(to_host(C, 9) == std::vector<float>{9, 19, 29, 12, 26, 40, 15, 33, 51});
  // A leading dimension smaller than the stored rows is cuBLAS's invalid value.
  CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, A, 1, B, 3, &zero, C, 2) ==
        CUBLAS_STATUS_INVALID_VALUE);
  CHECK(std::string(cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE)).find("lda=1") != std::string::npos);
  // Operands that run past their allocation (or are host memory) are refused.
  CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 4, &one, A, 2, B, 4, &zero, C, 2) ==
        CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, a.data(), 2, B, 3, &zero, C, 2) ==
        CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cudaGetLastError() == cudaSuccess);  // cuBLAS reports through its status only
  cublasDestroy(handle);
  cudaFree(A);
  cudaFree(B);
  cudaFree(C);
}

// The emulator's float GEMMs run on Ember's CPU GEMM (cublas.cpp): every transpose, leading
// dimensions larger than the rows, strided batches, alpha and beta, against a plain loop in double.
TEST_CASE("emulator: cuBLAS GEMM through the CPU GEMM: transposes, padded leading dimensions, batches, alpha and beta") {
  cublasHandle_t handle = nullptr;
  REQUIRE(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS);
  const int m = 13, n = 7, k = 9, batch = 3, pad = 2;
  const long long lda_max = k + pad, ldb_max = k + pad, ldc = m + pad;
  const long long stride_a = lda_max * (k > m ? k : m) + 5, stride_b = ldb_max * (k > n ? k : n) + 5,
                  stride_c = ldc * n + 5;
  std::vector<float> a(size_t(stride_a * batch)), b(size_t(stride_b * batch)), c0(size_t(stride_c * batch));
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(int(i * 37 % 23) - 11) / 8;
  for (size_t i = 0; i < b.size(); ++i) b[i] = float(int(i * 53 % 19) - 9) / 4;
  for (size_t i = 0; i < c0.size(); ++i) c0[i] = float(int(i * 29 % 17) - 8);
  float *A, *B, *C;
  REQUIRE(cudaMalloc(&A, a.size() * 4) == cudaSuccess);
  REQUIRE(cudaMalloc(&B, b.size() * 4) == cudaSuccess);
  REQUIRE(cudaMalloc(&C, c0.size() * 4) == cudaSuccess);
  cudaMemcpy(A, a.data(), a.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(B, b.data(), b.size() * 4, cudaMemcpyHostToDevice);
  const float alpha = 0.75f, beta = -0.5f;
  for (cublasOperation_t ta : {CUBLAS_OP_N, CUBLAS_OP_T})
    for (cublasOperation_t tb : {CUBLAS_OP_N, CUBLAS_OP_T}) {
      INFO("transa " << int(ta) << ", transb " << int(tb));
      const int lda = int((ta == CUBLAS_OP_N ? m : k) + pad), ldb = int((tb == CUBLAS_OP_N ? k : n) + pad);
      cudaMemcpy(C, c0.data(), c0.size() * 4, cudaMemcpyHostToDevice);
      REQUIRE(cublasSgemmStridedBatched(handle, ta, tb, m, n, k, &alpha, A, lda, stride_a, B, ldb, stride_b, &beta, C,
                                        int(ldc), stride_c, batch) == CUBLAS_STATUS_SUCCESS);
      const std::vector<float> c = to_host(C, c0.size());
      double worst = 0;
      for (int p = 0; p < batch; ++p)
        for (int j = 0; j < n; ++j)
          for (int i = 0; i < m; ++i) {
            double sum = 0;
            for (int l = 0; l < k; ++l) {
              const double x = a[size_t(p * stride_a + (ta == CUBLAS_OP_N ? i + l * lda : l + i * lda))];
              const double y = b[size_t(p * stride_b + (tb == CUBLAS_OP_N ? l + j * ldb : j + l * ldb))];
              sum += x * y;
            }
            const size_t at = size_t(p * stride_c + i + j * ldc);
            const double expected = alpha * sum + beta * c0[at];
            worst = std::fmax(worst, std::fabs(c[at] - expected) / (1 + std::fabs(expected)));
          }
      CHECK(worst < 1e-5);
      // The padding rows of C and the gaps between the batches are not written.
      bool untouched = true;
      for (int p = 0; p < batch; ++p)
        for (long long at = p * stride_c; at < (p + 1) * stride_c; ++at) {
          const long long within = at - p * stride_c, row = within % ldc;
          if (within >= ldc * n || row >= m) untouched = untouched && c[size_t(at)] == c0[size_t(at)];
        }
      CHECK(untouched);
    }
  // alpha == 0: A and B are not read (NaN there does not reach C), C = beta C.
  std::vector<float> nans(a.size(), std::nanf(""));
  cudaMemcpy(A, nans.data(), nans.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(C, c0.data(), c0.size() * 4, cudaMemcpyHostToDevice);
  const float no = 0;
  REQUIRE(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &no, A, m, B, k, &beta, C, int(ldc)) ==
          CUBLAS_STATUS_SUCCESS);
  const std::vector<float> c = to_host(C, size_t(ldc * n));
  CHECK(c[0] == beta * c0[0]);
  CHECK(c[size_t(ldc * (n - 1) + m - 1)] == beta * c0[size_t(ldc * (n - 1) + m - 1)]);
  cublasDestroy(handle);
  cudaFree(A);
  cudaFree(B);
  cudaFree(C);
}

TEST_CASE("emulator: warp shuffles and votes run the lanes in lockstep and give each lane its value") {
  int *in = nullptr, *out = nullptr;
  unsigned* ballots = nullptr;
  REQUIRE(cudaMalloc(&in, 64 * sizeof(int)) == cudaSuccess);
  REQUIRE(cudaMalloc(&out, 64 * sizeof(int)) == cudaSuccess);
  REQUIRE(cudaMalloc(&ballots, 3 * sizeof(unsigned)) == cudaSuccess);
  std::vector<int> values(64);
  for (int i = 0; i < 64; ++i) values[size_t(i)] = i * i;
  REQUIRE(cudaMemcpy(in, values.data(), 64 * sizeof(int), cudaMemcpyHostToDevice) == cudaSuccess);
  warp_sum_kernel<<<1, 64>>>(in, out);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  int first = 0, second = 0;
  for (int i = 0; i < 32; ++i) first += i * i, second += (i + 32) * (i + 32);
  std::vector<int> sums = to_host(out, 64);
  for (int i = 0; i < 64; ++i) CHECK(sums[size_t(i)] == (i < 32 ? first : second));

  warp_moves_kernel<<<1, 32>>>(out, ballots);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  std::vector<int> moved = to_host(out, 32);
  for (int lane = 0; lane < 32; ++lane) {
    const int up = lane == 0 ? 0 : lane - 1, down = lane + 2 < 32 ? lane + 2 : lane;
    CHECK(moved[size_t(lane)] == up * 10000 + down * 100 + 5);
  }
  std::vector<unsigned> votes = to_host(ballots, 3);
  CHECK(votes[0] == 0xAAAAAAAAu);
  CHECK(votes[1] == 0u);  // __any_sync over lane 0 alone: lane 0 > 0 is false
  CHECK(votes[2] == 1u);
  cudaFree(in), cudaFree(out), cudaFree(ballots);
}

TEST_CASE("emulator: a shuffle that lanes of its mask never reach, a mask without the caller, a read outside the mask") {
  int* out = nullptr;
  REQUIRE(cudaMalloc(&out, 32 * sizeof(int)) == cudaSuccess);
  shuffle_divergent_kernel<<<1, 32>>>(out);
  std::string text = last_error_text();
  CHECK(text.find("__shfl_xor_sync at emulator_test.cu:") != std::string::npos);
  CHECK(text.find("lane 16 of the mask ended without reaching it") != std::string::npos);
  shuffle_wrong_mask_kernel<<<1, 32>>>(out);
  CHECK(last_error_text().find("lane 16 calls it with a mask that leaves it out") != std::string::npos);
  shuffle_outside_mask_kernel<<<1, 32>>>(out);
  CHECK(last_error_text().find("lane 15 reads lane 16, which is not in the mask") != std::string::npos);
  cudaFree(out);
}

TEST_CASE("emulator: WMMA (mma.h) multiplies bfloat16 tiles like a plain product, in every layout, as a warp") {
  // Entries that are multiples of 1/4 in [-2, 2] (exact in bfloat16) and C0 multiples of 1/16: every
  // product and sum is exact in float, so the emulated tensor-core product equals the plain one exactly.
  std::vector<__nv_bfloat16> a(32 * 48), bt(32 * 48), b16(16 * 16);
  std::vector<float> c0(32 * 32);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = __float2bfloat16_rn(float(int(i * 7 % 17) - 8) / 4);
    bt[i] = __float2bfloat16_rn(float(int(i * 5 % 13) - 6) / 4);
  }
  for (size_t i = 0; i < c0.size(); ++i) c0[i] = float(int(i * 3 % 11) - 5) / 16;
  for (size_t i = 0; i < b16.size(); ++i) b16[i] = __float2bfloat16_rn(float(int(i % 9) - 4) / 4);
  __nv_bfloat16 *da = nullptr, *dbt = nullptr, *db = nullptr;
  float *dc0 = nullptr, *dc = nullptr;
  REQUIRE(cudaMalloc(&da, a.size() * sizeof(__nv_bfloat16)) == cudaSuccess);
  REQUIRE(cudaMalloc(&dbt, bt.size() * sizeof(__nv_bfloat16)) == cudaSuccess);
  REQUIRE(cudaMalloc(&db, b16.size() * sizeof(__nv_bfloat16)) == cudaSuccess);
  REQUIRE(cudaMalloc(&dc0, c0.size() * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMalloc(&dc, 32 * 32 * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMemcpy(da, a.data(), a.size() * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(dbt, bt.data(), bt.size() * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(db, b16.data(), b16.size() * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(dc0, c0.data(), c0.size() * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);

  wmma_product_kernel<<<1, 64>>>(da, dbt, dc0, dc);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const std::vector<float> c = to_host(dc, 32 * 32);
  int64_t nonzero = 0;
  for (int m = 0; m < 32; ++m)
    for (int n = 0; n < 32; ++n) {
      double want = c0[size_t(n * 32 + m)];  // C0 is column-major
      for (int k = 0; k < 48; ++k) want += double(float(a[size_t(m * 48 + k)])) * double(float(bt[size_t(n * 48 + k)]));
      INFO("C[" << m << "][" << n << "]");
      CHECK(double(c[size_t(m * 32 + n)]) == want);
      nonzero += want != 0 ? 1 : 0;
    }
  CHECK(nonzero > 900);  // the comparison is of real sums, not of zeros

  wmma_row_major_kernel<<<1, 32>>>(da, db, dc, false);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const std::vector<float> c16 = to_host(dc, 16 * 16);
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n) {
      double want = 0;
      for (int k = 0; k < 16; ++k) want += double(float(a[size_t(m * 16 + k)])) * double(float(b16[size_t(k * 16 + n)]));
      CHECK(double(c16[size_t(m * 16 + n)]) == want);
    }
  wmma_row_major_kernel<<<1, 32>>>(da, db, dc, true);
  const std::string text = last_error_text();
  CHECK(text.find("emulator_test.cu:") != std::string::npos);
  CHECK(text.find("lane 0 of the mask ended without reaching it") != std::string::npos);
  cudaFree(da), cudaFree(dbt), cudaFree(db), cudaFree(dc0), cudaFree(dc);
}

TEST_CASE("emulator: atomics add up every thread's update") {
  int* counter = nullptr;
  REQUIRE(cudaMalloc(&counter, sizeof(int)) == cudaSuccess);
  REQUIRE(cudaMemset(counter, 0, sizeof(int)) == cudaSuccess);
  atomic_count_kernel<<<3, 100>>>(counter);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  CHECK(to_host(counter, 1)[0] == 300);
  cudaFree(counter);
}

// ---- Streams, events and graphs (streams.cpp).

namespace {

__global__ void fill_kernel(float* out, float value, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = value;
}

__global__ void twice_plus_one_kernel(float* x, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) x[i] = 2 * x[i] + 1;
}

bool protected_run() {
  const char* protect = std::getenv("EMBER_EMULATOR_PROTECT");
  return protect != nullptr && protect[0] == '1';
}

// Whether reading host memory at p makes a child process die of a fault (EMBER_EMULATOR_PROTECT=1).
bool read_faults(const float* p) {
  std::fflush(nullptr);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    signal(SIGSEGV, SIG_DFL);
    signal(SIGBUS, SIG_DFL);
    volatile float read = p[0];
    (void)read;
    std::_Exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  return WIFSIGNALED(status) && (WTERMSIG(status) == SIGSEGV || WTERMSIG(status) == SIGBUS);
}

// How many of the whole pages inside [p, p + bytes) are resident (mincore sees PROT_NONE pages too).
size_t resident_pages(const void* p, size_t bytes) {
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t first = (uintptr_t(p) + page - 1) / page * page, end = (uintptr_t(p) + bytes) / page * page;
  if (end <= first) return 0;
  std::vector<unsigned char> in_core((end - first) / page);
  REQUIRE(mincore(reinterpret_cast<void*>(first), end - first, in_core.data()) == 0);
  size_t resident = 0;
  for (unsigned char c : in_core) resident += c & 1;
  return resident;
}

}  // namespace

TEST_CASE("emulator: with EMBER_EMULATOR_PROTECT=1, freed pages go back to the system, and blocks handed out again are NaN and out of reach") {
  if (!protected_run()) {
    std::printf("skipped: run with EMBER_EMULATOR_PROTECT=1 (ctest emulated_protected does)\n");
    if (std::getenv("EMBER_CTEST_SKIP") != nullptr) std::_Exit(77);
    return;
  }
  constexpr int n = 1 << 18;  // 1 MiB of floats each
  constexpr size_t bytes = n * sizeof(float);
  float *a = nullptr, *b = nullptr, *c = nullptr;
  REQUIRE(cudaMalloc(&a, bytes) == cudaSuccess);
  REQUIRE(cudaMalloc(&b, bytes) == cudaSuccess);
  REQUIRE(cudaMalloc(&c, bytes) == cudaSuccess);
  const std::vector<float> values(n, 3.0f);
  for (float* block : {a, b, c})
    REQUIRE(cudaMemcpy(block, values.data(), bytes, cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK(resident_pages(b, bytes) > 0);
  CHECK(resident_pages(c, bytes) > 0);
  REQUIRE(cudaFree(b) == cudaSuccess);  // between two live blocks
  REQUIRE(cudaFree(c) == cudaSuccess);  // the top one
  CHECK(resident_pages(b, bytes) == 0);
  CHECK(resident_pages(c, bytes) == 0);
  // Two blocks again, over the freed middle and above the lowered top: NaN-filled, out of the host's
  // reach, and reached by kernels.
  float *d = nullptr, *e = nullptr;
  REQUIRE(cudaMalloc(&d, bytes) == cudaSuccess);
  REQUIRE(cudaMalloc(&e, bytes) == cudaSuccess);
  for (float* block : {d, e}) {
    const std::vector<float> fresh = to_host(block, n);
    CHECK(std::all_of(fresh.begin(), fresh.end(), [](float v) { return std::isnan(v); }));
    CHECK(read_faults(block));
    copy_kernel<<<64, 256>>>(a, block, n);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    CHECK(to_host(block, n) == values);
  }
  CHECK(read_faults(a));
  for (float* block : {a, d, e}) REQUIRE(cudaFree(block) == cudaSuccess);
}

TEST_CASE("emulator streams: a copy's result reaches the host only at the synchronisation that completes it") {
  constexpr int n = 256;
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  cudaEvent_t done = nullptr;
  REQUIRE(cudaEventCreateWithFlags(&done, cudaEventDisableTiming) == cudaSuccess);
  float* device = nullptr;
  float* host = nullptr;
  REQUIRE(cudaMalloc(&device, n * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&host), n * sizeof(float)) == cudaSuccess);
  for (int i = 0; i < n; ++i) host[i] = -1.0f;

  fill_kernel<<<2, 64, 0, stream>>>(device, 7.0f, n);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(host, device, n * sizeof(float), cudaMemcpyDeviceToHost, stream) == cudaSuccess);
  REQUIRE(cudaEventRecord(done, stream) == cudaSuccess);
  // Wrong on purpose: the host reads before the event. Without protection it sees the old bytes;
  // with EMBER_EMULATOR_PROTECT=1 the read faults.
  if (protected_run()) CHECK(read_faults(host));
  else CHECK(host[n - 1] == -1.0f);
  CHECK(cudaEventQuery(done) == cudaErrorNotReady);
  CHECK(cudaGetLastError() == cudaErrorNotReady);  // "not ready" is the last error too, as on a GPU
  REQUIRE(cudaEventSynchronize(done) == cudaSuccess);
  CHECK(cudaEventQuery(done) == cudaSuccess);
  CHECK(host[0] == 7.0f);
  CHECK(host[n - 1] == 7.0f);
  if (protected_run()) CHECK_FALSE(read_faults(host));

  // A pinned source is read when the copy runs, not at the call: a host write in between (wrong:
  // before the event) changes what arrives (or, protected, faults).
  for (int i = 0; i < n; ++i) host[i] = 1.0f;
  REQUIRE(cudaMemcpyAsync(device, host, n * sizeof(float), cudaMemcpyHostToDevice, stream) == cudaSuccess);
  if (!protected_run()) host[0] = 2.0f;
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  CHECK(to_host(device, 1)[0] == (protected_run() ? 1.0f : 2.0f));

  cudaFreeHost(host);
  cudaFree(device);
  cudaEventDestroy(done);
  cudaStreamDestroy(stream);
}

TEST_CASE("emulator streams: another stream sees a stream's result after waiting on an event, not before") {
  constexpr int n = 128;
  cudaStream_t producer = nullptr, consumer = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking) == cudaSuccess);
  cudaEvent_t ready = nullptr;
  REQUIRE(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming) == cudaSuccess);
  float *x = nullptr, *y = nullptr;
  REQUIRE(cudaMalloc(&x, n * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMalloc(&y, n * sizeof(float)) == cudaSuccess);

  // Right: the consumer waits on an event recorded after the producer's write.
  fill_kernel<<<1, 64, 0, producer>>>(x, 3.0f, n);
  REQUIRE(cudaEventRecord(ready, producer) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(consumer, ready, 0) == cudaSuccess);
  copy_kernel<<<1, 64, 0, consumer>>>(x, y, n);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(consumer) == cudaSuccess);
  CHECK(to_host(y, n) == std::vector<float>(n, 3.0f));

  // Wrong on purpose: no event, so the consumer reads x before the producer's new write.
  fill_kernel<<<1, 64, 0, producer>>>(x, 5.0f, n);
  copy_kernel<<<1, 64, 0, consumer>>>(x, y, n);
  REQUIRE(cudaStreamSynchronize(consumer) == cudaSuccess);
  CHECK(to_host(y, n) == std::vector<float>(n, 3.0f));
  REQUIRE(cudaStreamSynchronize(producer) == cudaSuccess);
  CHECK(to_host(x, n) == std::vector<float>(n, 5.0f));

  cudaFree(x), cudaFree(y);
  cudaEventDestroy(ready);
  cudaStreamDestroy(producer), cudaStreamDestroy(consumer);
}

TEST_CASE("emulator streams: an error inside queued work is reported by the synchronisation that runs it") {
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  int* out = nullptr;
  REQUIRE(cudaMalloc(&out, kBlock * sizeof(int)) == cudaSuccess);
  divergent_kernel<<<1, kBlock, 0, stream>>>(out);
  CHECK(cudaGetLastError() == cudaSuccess);  // the launch itself was fine; the kernel has not run
  CHECK(cudaStreamSynchronize(stream) == cudaErrorLaunchFailure);
  CHECK(last_error_text().find("divergent __syncthreads()") != std::string::npos);
  CHECK(cudaStreamSynchronize(stream) == cudaSuccess);  // reported once
  cudaFree(out);
  cudaStreamDestroy(stream);
}

TEST_CASE("emulator graphs: a captured sequence replays like eager execution, and one graph launch is one launch") {
  constexpr int n = 100;
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  float *x = nullptr, *y = nullptr;
  REQUIRE(cudaMalloc(&x, n * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMalloc(&y, n * sizeof(float)) == cudaSuccess);
  cublasHandle_t handle = nullptr;
  REQUIRE(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasSetStream(handle, stream) == CUBLAS_STATUS_SUCCESS);
  float* device_one = nullptr;
  REQUIRE(cudaMalloc(&device_one, sizeof(float)) == cudaSuccess);
  const float one = 1, zero = 0;
  REQUIRE(cudaMemcpy(device_one, &one, sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  // The sequence: x = 2x + 1; y = x (a GEMM: n x 1 times 1 x 1); x = 2x + 1.
  auto sequence = [&] {
    twice_plus_one_kernel<<<2, 32, 0, stream>>>(x, n);
    REQUIRE(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, 1, 1, &one, x, n, device_one, 1, &zero, y, n) ==
            CUBLAS_STATUS_SUCCESS);
    twice_plus_one_kernel<<<2, 32, 0, stream>>>(x, n);
  };
  // Eager, twice, from x = 0.
  REQUIRE(cudaMemsetAsync(x, 0, n * sizeof(float), stream) == cudaSuccess);
  sequence();
  sequence();
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  const std::vector<float> eager_x = to_host(x, n), eager_y = to_host(y, n);
  CHECK(eager_x[0] == 15.0f);  // 0 -> 1 -> 3 -> 7 -> 15
  CHECK(eager_y[0] == 7.0f);

  // Captured once: nothing runs at capture.
  REQUIRE(cudaMemsetAsync(x, 0, n * sizeof(float), stream) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) == cudaSuccess);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  REQUIRE(cudaStreamIsCapturing(stream, &status) == cudaSuccess);
  CHECK(status == cudaStreamCaptureStatusActive);
  sequence();
  REQUIRE(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
  size_t nodes = 0;
  REQUIRE(cudaGraphGetNodes(graph, nullptr, &nodes) == cudaSuccess);
  CHECK(nodes == 3);
  CHECK(to_host(x, n)[0] == 0.0f);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  // Replayed twice: the same numbers as eager, one launch each.
  ember_emu::reset_counts();
  REQUIRE(cudaGraphLaunch(exec, stream) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, stream) == cudaSuccess);
  const ember_emu::Counts c = ember_emu::counts();
  CHECK(c.kernel_launches == 2);
  CHECK(c.graph_launches == 2);
  CHECK(c.library_calls == 0);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  CHECK(to_host(x, n) == eager_x);
  CHECK(to_host(y, n) == eager_y);
  REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  cublasDestroy(handle);
  cudaFree(x), cudaFree(y), cudaFree(device_one);
  cudaStreamDestroy(stream);
}

TEST_CASE("emulator graphs: a host wait, cudaMalloc or cudaFree inside a capture is refused and invalidates it") {
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  float* x = nullptr;
  REQUIRE(cudaMalloc(&x, 64 * sizeof(float)) == cudaSuccess);
  // Each mistake in its own capture: the call fails, and ending the capture gives no graph.
  auto refused = [&](const char* what, auto mistake, cudaError_t expected) {
    INFO(what);
    REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) == cudaSuccess);
    fill_kernel<<<1, 32, 0, stream>>>(x, 1.0f, 64);
    CHECK(mistake() == expected);
    CHECK(cudaGetLastError() == expected);
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    REQUIRE(cudaStreamIsCapturing(stream, &status) == cudaSuccess);
    CHECK(status == cudaStreamCaptureStatusInvalidated);
    cudaGraph_t graph = nullptr;
    CHECK(cudaStreamEndCapture(stream, &graph) == cudaErrorStreamCaptureInvalidated);
    CHECK(graph == nullptr);
    CHECK(std::string(cudaGetErrorString(cudaGetLastError())).find(what) != std::string::npos);
  };
  refused("cudaStreamSynchronize", [&] { return cudaStreamSynchronize(stream); }, cudaErrorStreamCaptureUnsupported);
  refused("cudaDeviceSynchronize", [&] { return cudaDeviceSynchronize(); }, cudaErrorStreamCaptureUnsupported);
  refused("cudaMalloc", [&] {
    void* p = nullptr;
    return cudaMalloc(&p, 256);
  }, cudaErrorStreamCaptureUnsupported);
  refused("cudaFree", [&] { return cudaFree(x); }, cudaErrorStreamCaptureUnsupported);
  refused("cudaMemcpy", [&] {
    float value = 0;
    return cudaMemcpy(&value, x, sizeof(float), cudaMemcpyDeviceToHost);
  }, cudaErrorStreamCaptureUnsupported);
  refused("legacy default stream", [&] {
    fill_kernel<<<1, 32>>>(x, 2.0f, 64);
    return cudaPeekAtLastError();
  }, cudaErrorStreamCaptureImplicit);
  // The refused calls did nothing: x is still allocated and never filled with 2.
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  CHECK(to_host(x, 64)[0] != 2.0f);
  CHECK(cudaFree(x) == cudaSuccess);
  cudaStreamDestroy(stream);
}

TEST_CASE("emulator dry mode: every call counted exactly, no kernel or library work done, copies to the host read 0") {
  // A small program, run eagerly and then as a graph, in dry mode (EMBER_EMULATOR_DRY=1).
  struct DryMode {
    DryMode() { ember_emu::set_dry_mode(true); }
    ~DryMode() { ember_emu::set_dry_mode(false); }
  } dry;
  constexpr int n = 100;
  cudaStream_t stream = nullptr, copies = nullptr;
  REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  REQUIRE(cudaStreamCreate(&copies) == cudaSuccess);
  cudaEvent_t uploaded = nullptr;
  REQUIRE(cudaEventCreate(&uploaded) == cudaSuccess);
  cublasHandle_t handle = nullptr;
  REQUIRE(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasSetStream(handle, stream) == CUBLAS_STATUS_SUCCESS);
  float *pinned = nullptr, *x = nullptr, *y = nullptr, *device_one = nullptr;
  REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&pinned), n * sizeof(float)) == cudaSuccess);
  ember_emu::reset_counts();
  REQUIRE(cudaMalloc(&x, n * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMalloc(&y, n * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMalloc(&device_one, sizeof(float)) == cudaSuccess);
  const float one = 1, zero = 0;
  for (int i = 0; i < n; ++i) pinned[i] = float(i);
  // Upload on one stream, the other waits for it; x = 2x + 1; y = x (a GEMM); copy y back.
  auto program = [&] {
    twice_plus_one_kernel<<<2, 32, 0, stream>>>(x, n);
    REQUIRE(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, 1, 1, &one, x, n, device_one, 1, &zero, y, n) ==
            CUBLAS_STATUS_SUCCESS);
    REQUIRE(cudaMemcpyAsync(x, y, n * sizeof(float), cudaMemcpyDeviceToDevice, stream) == cudaSuccess);
  };
  REQUIRE(cudaMemcpyAsync(x, pinned, n * sizeof(float), cudaMemcpyHostToDevice, copies) == cudaSuccess);
  REQUIRE(cudaMemsetAsync(device_one, 0, sizeof(float), copies) == cudaSuccess);
  REQUIRE(cudaEventRecord(uploaded, copies) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(stream, uploaded, 0) == cudaSuccess);
  program();
  program();
  REQUIRE(cudaMemcpyAsync(pinned, y, n * sizeof(float), cudaMemcpyDeviceToHost, stream) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  ember_emu::Counts c = ember_emu::counts();
  INFO(ember_emu::describe(c));
  CHECK(c.mallocs == 3);
  CHECK(c.kernel_launches == 2);
  CHECK(c.launches_by_kernel.at("twice_plus_one_kernel") == 2);
  CHECK(c.library_calls == 2);
  CHECK(c.launches_by_kernel.at("cublasSgemm") == 2);
  CHECK(c.copies_to_device == 1);
  CHECK(c.bytes_to_device == n * 4);
  CHECK(c.copies_on_device == 2);
  CHECK(c.bytes_on_device == 2 * n * 4);
  CHECK(c.copies_to_host == 1);
  CHECK(c.bytes_to_host == n * 4);
  CHECK(c.memsets == 1);
  CHECK(c.event_records == 1);
  CHECK(c.stream_waits == 1);
  CHECK(c.host_waits.size() == 1);
  CHECK(c.work_items() == 2 + 2 + 1 + 2 + 1 + 1);
  // Nothing ran: the host reads zeros (the kernel and GEMM would have given 2i + 1).
  CHECK(std::all_of(pinned, pinned + n, [](float v) { return v == 0.0f; }));

  // The program as a graph: captured (its calls are the graph's, not counted), replayed 3 times.
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) == cudaSuccess);
  program();
  REQUIRE(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  for (int i = 0; i < 3; ++i) REQUIRE(cudaGraphLaunch(exec, stream) == cudaSuccess);
  for (int i = 0; i < n; ++i) pinned[i] = 7.0f;
  REQUIRE(cudaMemcpy(pinned, x, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  c = ember_emu::counts();
  CHECK(c.captures == 1);
  CHECK(c.graph_launches == 3);
  CHECK(c.kernel_launches == 2 + 3);
  CHECK(c.library_calls == 2);
  CHECK(c.copies_on_device == 2);
  CHECK(c.copies_to_host == 2);
  CHECK(c.host_waits.size() == 2);
  CHECK(std::all_of(pinned, pinned + n, [](float v) { return v == 0.0f; }));
  const std::string json = ember_emu::to_json(c);
  CHECK(json.find("\"graph_launches\": 3") != std::string::npos);
  CHECK(json.find("\"twice_plus_one_kernel\": 2") != std::string::npos);

  REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  cublasDestroy(handle);
  cudaFree(x), cudaFree(y), cudaFree(device_one);
  cudaFreeHost(pinned);
  cudaEventDestroy(uploaded);
  cudaStreamDestroy(stream);
  cudaStreamDestroy(copies);
}
