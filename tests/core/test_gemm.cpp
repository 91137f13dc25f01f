// Tests for the CPU GEMM (against the triple-loop reference) and for the parallel_for thread pool.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "core/cpu/gemm.h"
#include "core/parallel.h"

namespace {

// Restores the thread count and the GEMM kernel when a test case ends.
struct PoolGuard {
  int saved = ember::num_threads();
  ~PoolGuard() {
    ember::set_num_threads(saved);
    ember::cpu::set_gemm_kernel("auto");
  }
};

// The float kernels this CPU can run ("auto" resolves to one of them).
std::vector<std::string> available_kernels() {
  std::vector<std::string> kernels;
  for (const char* name : {"avx512", "avx2", "neon", "generic"}) {
    if (ember::cpu::set_gemm_kernel(name)) kernels.push_back(name);
  }
  ember::cpu::set_gemm_kernel("auto");
  return kernels;
}

// How an operand of logical size rows x cols sits in memory.
enum class Layout { RowMajor, ColMajor, Strided };

struct Matrix {
  int64_t rows, cols, rs, cs;
  int64_t size() const { return rows == 0 || cols == 0 ? 1 : (rows - 1) * rs + (cols - 1) * cs + 1; }
};

// Leading dimensions are padded (by 3) so that tight-stride assumptions would show up.
Matrix layout_of(int64_t rows, int64_t cols, Layout layout) {
  switch (layout) {
    case Layout::RowMajor: return {rows, cols, cols + 3, 1};
    case Layout::ColMajor: return {rows, cols, 1, rows + 3};
    case Layout::Strided: return {rows, cols, 2 * cols + 5, 2};
  }
  return {};
}

template <typename T>
std::vector<T> random_values(int64_t count, std::mt19937& rng) {
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<T> values(count);
  for (T& v : values) v = static_cast<T>(uniform(rng));
  return values;
}

// Error bound for a K-term dot product of values in [-1, 1] (scaled by alpha, plus beta * C).
template <typename T>
double tolerance(int64_t K, double alpha, double beta) {
  const double eps = std::numeric_limits<T>::epsilon();
  return 2.0 * eps * (static_cast<double>(K) + 4.0) * (std::abs(alpha) + std::abs(beta) + 1.0);
}

struct Case {
  int64_t M, N, K;
  Layout a_layout, b_layout;
  double alpha, beta;
};

// Runs gemm and gemm_reference on the same random inputs and checks every element of C, and
// that the padding between C rows is never written.
template <typename T>
void check_against_reference(const Case& c, std::mt19937& rng) {
  const Matrix a = layout_of(c.M, c.K, c.a_layout);
  const Matrix b = layout_of(c.K, c.N, c.b_layout);
  const int64_t c_rs = c.N + 2;
  std::vector<T> A = random_values<T>(a.size(), rng);
  std::vector<T> B = random_values<T>(b.size(), rng);
  std::vector<T> C = random_values<T>(std::max<int64_t>(1, c.M * c_rs), rng);
  const T sentinel = static_cast<T>(12345.0);
  for (int64_t i = 0; i < c.M; ++i) {
    for (int64_t j = c.N; j < c_rs; ++j) C[i * c_rs + j] = sentinel;
  }
  if (c.beta == 0) {  // beta == 0 must overwrite C without reading it
    for (int64_t i = 0; i < c.M; ++i) {
      for (int64_t j = 0; j < c.N; ++j) C[i * c_rs + j] = std::numeric_limits<T>::quiet_NaN();
    }
  }
  std::vector<T> expected = C;
  ember::cpu::gemm_reference(c.M, c.N, c.K, static_cast<T>(c.alpha), A.data(), a.rs, a.cs, B.data(),
                             b.rs, b.cs, static_cast<T>(c.beta), expected.data(), c_rs);
  ember::cpu::gemm(c.M, c.N, c.K, static_cast<T>(c.alpha), A.data(), a.rs, a.cs, B.data(), b.rs,
                   b.cs, static_cast<T>(c.beta), C.data(), c_rs);
  const double tol = tolerance<T>(c.K, c.alpha, c.beta);
  int64_t bad = 0;
  for (int64_t i = 0; i < c.M; ++i) {
    for (int64_t j = 0; j < c_rs; ++j) {
      const double got = C[i * c_rs + j], want = expected[i * c_rs + j];
      if (!(std::abs(got - want) <= tol)) {  // also catches NaN
        if (bad++ < 3) {
          INFO("M=" << c.M << " N=" << c.N << " K=" << c.K << " a_layout=" << int(c.a_layout)
                    << " b_layout=" << int(c.b_layout) << " alpha=" << c.alpha << " beta=" << c.beta
                    << " at (" << i << "," << j << ")");
          CHECK(got == doctest::Approx(want));
        }
      }
    }
  }
  CHECK(bad == 0);
}

const Layout kLayouts[] = {Layout::RowMajor, Layout::ColMajor, Layout::Strided};

template <typename T>
void check_many_small_shapes(uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t sizes[] = {1, 2, 3, 5, 7, 8, 13, 14, 15, 16, 17, 29, 31, 32, 33, 47, 48, 63, 64, 65, 70};
  const std::pair<double, double> scalings[] = {{1.0, 0.0}, {1.0, 1.0}, {-0.5, 2.0}, {2.0, 0.0}};
  int index = 0;
  for (int64_t M : sizes) {
    for (int64_t N : sizes) {
      // K cycles through the sizes too; layouts and scalings rotate so all combinations occur.
      const int64_t K = sizes[(M * 7 + N * 3) % std::size(sizes)];
      const Layout a_layout = kLayouts[index % 3];
      const Layout b_layout = kLayouts[(index / 3) % 3];
      const auto [alpha, beta] = scalings[index % 4];
      check_against_reference<T>({M, N, K, a_layout, b_layout, alpha, beta}, rng);
      ++index;
    }
  }
}

// Shapes that cross the cache blocks (K > kc, M > mc, N > nc) and the thread split.
template <typename T>
void check_big_shapes(uint32_t seed) {
  std::mt19937 rng(seed);
  const Case cases[] = {
      {300, 200, 600, Layout::RowMajor, Layout::RowMajor, 1.0, 0.0},
      {300, 200, 600, Layout::ColMajor, Layout::RowMajor, 1.0, 1.0},
      {300, 200, 600, Layout::RowMajor, Layout::ColMajor, 0.5, -1.0},
      {300, 200, 600, Layout::ColMajor, Layout::ColMajor, 1.0, 0.0},
      {200, 1100, 257, Layout::RowMajor, Layout::RowMajor, 1.0, 0.0},
      {1000, 70, 513, Layout::Strided, Layout::RowMajor, 1.0, 0.5},
      {513, 129, 130, Layout::RowMajor, Layout::Strided, 1.0, 0.0},
      {1, 777, 300, Layout::RowMajor, Layout::ColMajor, 1.0, 0.0},
      {777, 1, 300, Layout::ColMajor, Layout::RowMajor, 1.0, 1.0},
      {130, 130, 1, Layout::RowMajor, Layout::RowMajor, 1.0, 0.0},
      // Thin products (at most two rows or columns: plain loops, not the kernels). A's rows and B's columns
      // contiguous: dot products 16 at a time along C's longer side (window attention's global key), with
      // the tails of 16 in rows and in K.
      {64, 1, 32, Layout::RowMajor, Layout::ColMajor, 0.125, 0.0},
      {77, 2, 35, Layout::RowMajor, Layout::ColMajor, -0.5, 2.0},
      {1, 4096, 32, Layout::RowMajor, Layout::ColMajor, 1.0, 1.0},
      {2, 301, 16, Layout::RowMajor, Layout::ColMajor, 2.0, 0.0},
      {2, 301, 15, Layout::RowMajor, Layout::ColMajor, 1.0, 0.0},
      // One or two terms (rank-one updates), through the kernels.
      {64, 32, 1, Layout::RowMajor, Layout::RowMajor, 1.0, 1.0},
      {4096, 32, 1, Layout::ColMajor, Layout::RowMajor, 0.5, 0.0},
      {300, 40, 2, Layout::Strided, Layout::ColMajor, 1.0, -1.0},
  };
  for (const Case& c : cases) check_against_reference<T>(c, rng);
}

}  // namespace

TEST_CASE("parallel_for covers the range exactly once") {
  PoolGuard guard;
  for (int threads : {1, 2, 3, 8}) {
    ember::set_num_threads(threads);
    CHECK(ember::num_threads() == threads);
    for (auto [begin, end, grain] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
             {0, 1000, 1}, {5, 6, 1}, {-10, 37, 4}, {0, 100, 1000}, {3, 3, 1}, {0, 7, 0}}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(std::max<int64_t>(end - begin, 0)));
      ember::parallel_for(begin, end, grain, [&](int64_t first, int64_t last) {
        for (int64_t i = first; i < last; ++i) hits[i - begin].fetch_add(1);
      });
      for (size_t i = 0; i < hits.size(); ++i) {
        INFO("threads=" << threads << " range=[" << begin << "," << end << ") grain=" << grain << " i=" << i);
        CHECK(hits[i].load() == 1);
      }
    }
  }
}

TEST_CASE("parallel_for chunking is deterministic and respects grain and thread count") {
  PoolGuard guard;
  for (int threads : {1, 2, 4}) {
    ember::set_num_threads(threads);
    std::set<std::pair<int64_t, int64_t>> first_run;
    for (int run = 0; run < 20; ++run) {
      std::mutex mutex;
      std::set<std::pair<int64_t, int64_t>> chunks;
      ember::parallel_for(0, 1001, 100, [&](int64_t first, int64_t last) {
        std::lock_guard<std::mutex> lock(mutex);
        chunks.insert({first, last});
      });
      if (run == 0) first_run = chunks;
      CHECK(chunks == first_run);
    }
    CHECK(static_cast<int>(first_run.size()) == threads);
    int64_t expected_begin = 0;
    for (auto [first, last] : first_run) {  // contiguous, in order, each at least the grain
      CHECK(first == expected_begin);
      CHECK(last - first >= 100);
      expected_begin = last;
    }
    CHECK(expected_begin == 1001);
  }
  ember::set_num_threads(2);
  int calls = 0;
  ember::parallel_for(0, 150, 100, [&](int64_t first, int64_t last) {  // two chunks would be < grain
    ++calls;
    CHECK(first == 0);
    CHECK(last == 150);
  });
  CHECK(calls == 1);
}

TEST_CASE("parallel_for uses several threads, runs small ranges and nested calls inline") {
  PoolGuard guard;
  ember::set_num_threads(2);
  const std::thread::id caller = std::this_thread::get_id();
  std::mutex mutex;
  std::set<std::thread::id> ids;
  ember::parallel_for(0, 2, 1, [&](int64_t, int64_t) {
    std::lock_guard<std::mutex> lock(mutex);
    ids.insert(std::this_thread::get_id());
  });
  CHECK(ids.size() == 2);
  CHECK(ids.count(caller) == 1);  // the caller runs a chunk itself

  int calls = 0;
  ember::parallel_for(0, 10, 10, [&](int64_t first, int64_t last) {  // one grain: inline
    ++calls;
    CHECK(first == 0);
    CHECK(last == 10);
    CHECK(std::this_thread::get_id() == caller);
  });
  CHECK(calls == 1);

  std::atomic<int> inner_total{0};
  ember::parallel_for(0, 2, 1, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) {
      const std::thread::id outer = std::this_thread::get_id();
      ember::parallel_for(0, 100, 1, [&](int64_t a, int64_t b) {
        CHECK(std::this_thread::get_id() == outer);  // nested: inline on the same thread
        inner_total.fetch_add(static_cast<int>(b - a));
      });
    }
  });
  CHECK(inner_total.load() == 200);

  // threads_here(): the pool's size outside, 1 inside (so a GEMM in a worker does not cut its work
  // for threads that will not come).
  CHECK(ember::threads_here() == 2);
  std::atomic<int> most_inside{0};
  ember::parallel_for(0, 2, 1, [&](int64_t, int64_t) {
    int seen = ember::threads_here(), before = most_inside.load();
    while (seen > before && !most_inside.compare_exchange_weak(before, seen)) {
    }
  });
  CHECK(most_inside.load() == 1);
  CHECK(ember::threads_here() == 2);

  ember::set_num_threads(1);
  CHECK(ember::num_threads() == 1);
  ids.clear();
  ember::parallel_for(0, 1000, 1, [&](int64_t, int64_t) { ids.insert(std::this_thread::get_id()); });
  CHECK(ids.size() == 1);
  CHECK(ids.count(caller) == 1);
  CHECK_THROWS(ember::set_num_threads(0));
}

TEST_CASE("parallel_for rethrows a worker's exception and stays usable") {
  PoolGuard guard;
  ember::set_num_threads(2);
  for (int throwing_chunk : {0, 1}) {
    CHECK_THROWS_AS(ember::parallel_for(0, 2, 1,
                                        [&](int64_t first, int64_t) {
                                          if (first == throwing_chunk) throw std::runtime_error("boom");
                                        }),
                    std::runtime_error);
  }
  std::atomic<int64_t> sum{0};
  ember::parallel_for(0, 100, 1, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) sum.fetch_add(i);
  });
  CHECK(sum.load() == 4950);
}

TEST_CASE("gemm float matches the reference: odd shapes, all layouts, alpha/beta, every kernel") {
  PoolGuard guard;
  for (const std::string& kernel : available_kernels()) {
    REQUIRE(ember::cpu::set_gemm_kernel(kernel.c_str()));
    for (int threads : {1, 2}) {
      ember::set_num_threads(threads);
      INFO("kernel=" << kernel << " threads=" << threads);
      check_many_small_shapes<float>(1);
      check_big_shapes<float>(2);
    }
  }
}

TEST_CASE("gemm double matches the reference: odd shapes, all layouts, alpha/beta") {
  PoolGuard guard;
  for (const std::string& kernel : available_kernels()) {
    REQUIRE(ember::cpu::set_gemm_kernel(kernel.c_str()));
    for (int threads : {1, 2}) {
      ember::set_num_threads(threads);
      INFO("kernel=" << kernel << " threads=" << threads);
      check_many_small_shapes<double>(3);
      check_big_shapes<double>(4);
    }
  }
}

TEST_CASE("gemm gives bit-identical results for 1 to 4 threads (row, column and 2 x 2 splits)") {
  PoolGuard guard;
  std::mt19937 rng(5);
  for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{300, 200, 600}, {64, 700, 100},
                         {1000, 33, 64}, {1024, 1024, 64}}) {
    std::vector<float> A = random_values<float>(M * K, rng), B = random_values<float>(K * N, rng);
    std::vector<std::vector<float>> results;
    for (int threads : {1, 2, 3, 4}) {
      ember::set_num_threads(threads);
      std::vector<float> C(M * N);
      ember::cpu::gemm(M, N, K, 1.0f, A.data(), K, 1, B.data(), N, 1, 0.0f, C.data(), N);
      results.push_back(std::move(C));
    }
    CHECK(results[0] == results[1]);
    CHECK(results[0] == results[2]);
    CHECK(results[0] == results[3]);
  }
}

TEST_CASE("gemm edge cases: empty sizes, K = 0, alpha = 0") {
  PoolGuard guard;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> A = {nan, nan, nan, nan}, B = {nan, nan, nan, nan};

  std::vector<float> C = {1, 2, 3, 4};
  ember::cpu::gemm(0, 2, 2, 1.0f, A.data(), 2, 1, B.data(), 2, 1, 0.0f, C.data(), 2);
  ember::cpu::gemm(2, 0, 2, 1.0f, A.data(), 2, 1, B.data(), 2, 1, 0.0f, C.data(), 2);
  CHECK(C == std::vector<float>{1, 2, 3, 4});  // nothing to compute, nothing written

  ember::cpu::gemm(2, 2, 0, 1.0f, A.data(), 2, 1, B.data(), 2, 1, 3.0f, C.data(), 2);
  CHECK(C == std::vector<float>{3, 6, 9, 12});  // K = 0: C = beta * C

  C = {nan, nan, nan, nan};
  ember::cpu::gemm(2, 2, 0, 1.0f, A.data(), 2, 1, B.data(), 2, 1, 0.0f, C.data(), 2);
  CHECK(C == std::vector<float>{0, 0, 0, 0});  // K = 0, beta = 0: zeros, old C unread

  C = {1, 2, 3, 4};
  ember::cpu::gemm(2, 2, 2, 0.0f, A.data(), 2, 1, B.data(), 2, 1, 2.0f, C.data(), 2);
  CHECK(C == std::vector<float>{2, 4, 6, 8});  // alpha = 0: A and B (NaN) are not read

  std::vector<double> a1 = {3.0}, b1 = {-2.0}, c1 = {nan};
  ember::cpu::gemm(1, 1, 1, 1.0, a1.data(), 1, 1, b1.data(), 1, 1, 0.0, c1.data(), 1);
  CHECK(c1[0] == -6.0);

  CHECK_THROWS(ember::cpu::gemm(-1, 2, 2, 1.0f, A.data(), 2, 1, B.data(), 2, 1, 0.0f, C.data(), 2));
  CHECK_THROWS(ember::cpu::gemm(2, 2, 2, 1.0f, A.data(), 2, 1, B.data(), 2, 1, 0.0f, C.data(), 1));
}

TEST_CASE("gemm_batched matches per-product reference, split over the batch or inside products") {
  PoolGuard guard;
  std::mt19937 rng(6);
  struct BatchCase {
    int64_t batch, M, N, K;
    bool transpose_a, transpose_b;
    bool shared_b;  // b_bs = 0: every product uses the same B
  };
  const BatchCase cases[] = {
      {8, 33, 17, 20, false, false, false}, {3, 70, 45, 31, true, false, false},
      {5, 16, 16, 16, false, true, true},   {64, 20, 32, 16, true, true, false},
      {1, 100, 90, 80, false, false, false}, {2, 1, 1, 1, false, false, false},
      {4, 65, 33, 0, false, false, false},
  };
  for (int threads : {1, 2}) {
    ember::set_num_threads(threads);
    for (const BatchCase& c : cases) {
      INFO("threads=" << threads << " batch=" << c.batch << " M=" << c.M << " N=" << c.N << " K=" << c.K);
      // A stored (K x M) when transposed, B stored (N x K) when transposed; batch strides padded.
      const int64_t a_rs = c.transpose_a ? 1 : c.K, a_cs = c.transpose_a ? c.M : 1;
      const int64_t b_rs = c.transpose_b ? 1 : c.N, b_cs = c.transpose_b ? c.K : 1;
      const int64_t a_bs = c.M * c.K + 7, b_bs = c.shared_b ? 0 : c.K * c.N + 5, c_bs = c.M * c.N + 3;
      std::vector<float> A = random_values<float>(c.batch * a_bs, rng);
      std::vector<float> B = random_values<float>(std::max<int64_t>(1, c.batch * (c.K * c.N + 5)), rng);
      std::vector<float> C = random_values<float>(c.batch * c_bs, rng);
      std::vector<float> expected = C;
      for (int64_t i = 0; i < c.batch; ++i) {
        ember::cpu::gemm_reference(c.M, c.N, c.K, 1.5f, A.data() + i * a_bs, a_rs, a_cs,
                                   B.data() + i * b_bs, b_rs, b_cs, 0.5f,
                                   expected.data() + i * c_bs, c.N);
      }
      ember::cpu::gemm_batched(c.batch, c.M, c.N, c.K, 1.5f, A.data(), a_bs, a_rs, a_cs, B.data(),
                               b_bs, b_rs, b_cs, 0.5f, C.data(), c_bs, c.N);
      const double tol = tolerance<float>(c.K, 1.5, 0.5);
      int64_t bad = 0;
      for (size_t i = 0; i < C.size(); ++i) bad += !(std::abs(C[i] - expected[i]) <= tol);
      CHECK(bad == 0);
    }
  }

  // double, with the batch split across threads
  ember::set_num_threads(2);
  std::vector<double> A = random_values<double>(16 * 9 * 11, rng), B = random_values<double>(16 * 11 * 13, rng);
  std::vector<double> C(16 * 9 * 13), expected(16 * 9 * 13);
  for (int64_t i = 0; i < 16; ++i) {
    ember::cpu::gemm_reference(9, 13, 11, 1.0, A.data() + i * 99, 11, 1, B.data() + i * 143, 13, 1,
                               0.0, expected.data() + i * 117, 13);
  }
  ember::cpu::gemm_batched(16, 9, 13, 11, 1.0, A.data(), 99, 11, 1, B.data(), 143, 13, 1, 0.0,
                           C.data(), 117, 13);
  for (size_t i = 0; i < C.size(); ++i) CHECK(C[i] == doctest::Approx(expected[i]).epsilon(1e-12));
}

TEST_CASE("gemm with a bias adds it to every row once: beta 0 and 1, several K blocks, 1 and 2 threads, every kernel") {
  PoolGuard guard;
  std::mt19937 rng(77);
  struct Shape3 {
    int64_t M, N, K;
  };
  for (const std::string& kernel : available_kernels())
  for (int threads : {1, 2}) {
    CAPTURE(kernel);
    REQUIRE(ember::cpu::set_gemm_kernel(kernel.c_str()));
    ember::set_num_threads(threads);
    for (Shape3 s : {Shape3{1, 1, 1}, Shape3{15, 33, 7}, Shape3{200, 70, 600}, Shape3{30, 17, 0}}) {
      for (float beta : {0.0f, 1.0f}) {
        CAPTURE(threads);
        CAPTURE(s.M);
        CAPTURE(s.N);
        CAPTURE(s.K);
        CAPTURE(beta);
        std::vector<float> A = random_values<float>(s.M * std::max<int64_t>(s.K, 1), rng);
        std::vector<float> B = random_values<float>(std::max<int64_t>(s.K, 1) * s.N, rng);
        std::vector<float> bias = random_values<float>(s.N, rng);
        std::vector<float> C = random_values<float>(s.M * s.N, rng);
        std::vector<float> expected = C;
        ember::cpu::gemm_reference(s.M, s.N, s.K, 1.0f, A.data(), s.K, 1, B.data(), s.N, 1, beta, expected.data(),
                                   s.N);
        for (int64_t i = 0; i < s.M; ++i)
          for (int64_t j = 0; j < s.N; ++j) expected[i * s.N + j] += bias[j];
        ember::cpu::gemm(s.M, s.N, s.K, 1.0f, A.data(), s.K, 1, B.data(), s.N, 1, beta, C.data(), s.N, bias.data());
        int64_t bad = 0;
        for (size_t i = 0; i < C.size(); ++i) bad += !(std::abs(C[i] - expected[i]) <= tolerance<float>(s.K, 1, 2));
        CHECK(bad == 0);
      }
    }
  }
}

// A weight gradient's product: K (the batch's tokens) far longer than C is wide, which the driver cuts in K
// (gemm.cpp, splits_k): the halves are summed apart and added, the same way for any thread count.
TEST_CASE("gemm far longer in K than C is wide (cut in K): the reference's values with beta and bias, the same bits for 1 to 4 threads, every kernel") {
  PoolGuard guard;
  std::mt19937 rng(91);
  struct Shape3 {
    int64_t M, N, K;
  };
  for (const std::string& kernel : available_kernels()) {
    CAPTURE(kernel);
    REQUIRE(ember::cpu::set_gemm_kernel(kernel.c_str()));
    for (Shape3 s : {Shape3{37, 45, 4500}, Shape3{130, 20, 8200}}) {
      // dW = g^T x: A column-major (g [K, M] read transposed), B row-major (x [K, N]), as linear's backward.
      std::vector<float> A = random_values<float>(s.K * s.M, rng), B = random_values<float>(s.K * s.N, rng);
      std::vector<float> bias = random_values<float>(s.N, rng), C0 = random_values<float>(s.M * s.N, rng);
      for (float beta : {0.0f, 1.0f}) {
        CAPTURE(s.M);
        CAPTURE(s.K);
        CAPTURE(beta);
        std::vector<float> expected = C0;
        ember::cpu::gemm_reference(s.M, s.N, s.K, 0.5f, A.data(), 1, s.M, B.data(), s.N, 1, beta, expected.data(), s.N);
        for (int64_t i = 0; i < s.M; ++i)
          for (int64_t j = 0; j < s.N; ++j) expected[i * s.N + j] += bias[j];
        std::vector<std::vector<float>> results;
        for (int threads : {1, 2, 3, 4}) {
          ember::set_num_threads(threads);
          std::vector<float> C = C0;
          ember::cpu::gemm(s.M, s.N, s.K, 0.5f, A.data(), 1, s.M, B.data(), s.N, 1, beta, C.data(), s.N, bias.data());
          results.push_back(std::move(C));
        }
        int64_t bad = 0;
        for (size_t i = 0; i < results[0].size(); ++i)
          bad += !(std::abs(results[0][i] - expected[i]) <= tolerance<float>(s.K, 0.5, 2));
        CHECK(bad == 0);
        CHECK(results[0] == results[1]);
        CHECK(results[0] == results[2]);
        CHECK(results[0] == results[3]);
      }
    }
  }
}
