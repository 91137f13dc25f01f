// WMMA fragments are laid out per lane as a GPU may (tests/cuda_emulator/mma.h: 8 elements a lane, in
// PTX's mma.m16n8k16 order), so that kernel code which reads a fragment's elements by position, as if
// lane l held row-major elements 8 l .. 8 l + 7 of the tile, gets a wrong result here as on a GPU,
// while code that uses only fill / load / mma / store and element-wise operations applied alike to
// every element gets the right one. Written in CUDA and translated like emulator_test.cu; built into
// ember_tests_emulated only.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace {

using FragA = nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::row_major>;
using FragB = nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::row_major>;
using FragC = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>;

// C [16][16] = relu(2 A B - 1) by one warp, written twice: into `stored` by store_matrix_sync (correct
// code: the scale, shift and relu are applied alike to every element), and into `positional` by each
// lane writing its elements where a row-major split would put them (wrong on purpose).
__global__ void wmma_positional_kernel(const __nv_bfloat16* A, const __nv_bfloat16* B, float* stored,
                                       float* positional) {
  FragA a;
  FragB b;
  FragC c;
  nvcuda::wmma::fill_fragment(c, 0.0f);
  nvcuda::wmma::load_matrix_sync(a, A, 16);
  nvcuda::wmma::load_matrix_sync(b, B, 16);
  nvcuda::wmma::mma_sync(c, a, b, c);
  for (int i = 0; i < c.num_elements; ++i) c.x[i] = fmaxf(2.0f * c.x[i] - 1.0f, 0.0f);
  nvcuda::wmma::store_matrix_sync(stored, c, 16, nvcuda::wmma::mem_row_major);
  for (int i = 0; i < c.num_elements; ++i) positional[threadIdx.x * c.num_elements + i] = c.x[i];
}

std::vector<float> to_host(const float* device, size_t n) {
  std::vector<float> host(n);
  REQUIRE(cudaMemcpy(host.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  return host;
}

}  // namespace

TEST_CASE("emulator: WMMA fragments are spread over the lanes, so reading their elements by position is wrong") {
  // Entries that are multiples of 1/4 in [-2, 2]: every product and sum is exact in float.
  std::vector<__nv_bfloat16> a(256), b(256);
  for (size_t i = 0; i < 256; ++i) {
    a[i] = __float2bfloat16_rn(float(int(i * 7 % 17) - 8) / 4);
    b[i] = __float2bfloat16_rn(float(int(i * 5 % 13) - 6) / 4);
  }
  std::vector<float> want(256);
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n) {
      float sum = 0;
      for (int k = 0; k < 16; ++k) sum += float(a[size_t(m * 16 + k)]) * float(b[size_t(k * 16 + n)]);
      want[size_t(m * 16 + n)] = fmaxf(2.0f * sum - 1.0f, 0.0f);
    }
  __nv_bfloat16 *da = nullptr, *db = nullptr;
  float *stored = nullptr, *positional = nullptr;
  REQUIRE(cudaMalloc(&da, 256 * sizeof(__nv_bfloat16)) == cudaSuccess);
  REQUIRE(cudaMalloc(&db, 256 * sizeof(__nv_bfloat16)) == cudaSuccess);
  REQUIRE(cudaMalloc(&stored, 256 * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMalloc(&positional, 256 * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMemcpy(da, a.data(), 256 * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(db, b.data(), 256 * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice) == cudaSuccess);
  wmma_positional_kernel<<<1, 32>>>(da, db, stored, positional);
  REQUIRE(cudaGetLastError() == cudaSuccess);

  // Through store_matrix_sync: the product, exactly.
  CHECK(to_host(stored, 256) == want);
  // Read by position: every value is there (each lane's 8 are 8 of the tile's 256) but in other places.
  const std::vector<float> read = to_host(positional, 256);
  int misplaced = 0, nonzero = 0;
  for (size_t i = 0; i < 256; ++i) {
    misplaced += read[i] != want[i];
    nonzero += want[i] != 0;
  }
  CHECK(nonzero > 64);  // the relu leaves enough values that a misplaced one shows
  CHECK(misplaced > nonzero / 2);
  std::vector<float> sorted_read = read, sorted_want = want;
  std::sort(sorted_read.begin(), sorted_read.end());
  std::sort(sorted_want.begin(), sorted_want.end());
  CHECK(sorted_read == sorted_want);
  // Where they are: the documented layout, lane l's element 0 at row l / 4, column 2 (l % 4).
  for (int lane = 0; lane < 32; ++lane) {
    INFO("lane " << lane);
    CHECK(read[size_t(lane * 8)] == want[size_t((lane / 4) * 16 + 2 * (lane % 4))]);
    CHECK(read[size_t(lane * 8 + 7)] == want[size_t((lane / 4 + 8) * 16 + 2 * (lane % 4) + 1 + 8)]);
  }
  cudaFree(da), cudaFree(db), cudaFree(stored), cudaFree(positional);
}
