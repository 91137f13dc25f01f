// Times ember::cpu::gemm at the model's matmul shapes and prints GFLOP/s (median of several runs).
//
// Usage: matmul_bench [--threads N] [--reps R] [--json] [--transposed] [--peak] [--kernel NAME]
//                     [--only TEXT] [--bf16]
//   --transposed  also time A^T B and A B^T (the backward-pass layouts)
//   --only TEXT   time only the shapes whose name contains TEXT (e.g. "8192", "attn")
//   --peak        also measure the FP32 FMA peak of this machine with N threads
//   --kernel      force a micro-kernel: avx512, avx2, generic (default: the best available)
//   --bf16        time each shape twice, float32 (cpu::gemm) and bfloat16 products (cpu::gemm_bf16),
//                 alternating rep by rep, and print the ratio; with --peak also the bf16 peak (a vdpbf16ps loop)
// Shapes are kept in sync with bench/matmul_torch.py.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/json_number.h"
#include "core/cpu/gemm.h"
#include "core/parallel.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

struct Shape {
  std::string name;
  int64_t batch, M, N, K;
  bool transpose_a, transpose_b;
  // As the fused attention kernel runs them (core/cpu/attention.cpp): the batch's products spread over the
  // threads, and the [T, T] matrix (the scores S = Q K^T written, the probabilities P of P V read) is a
  // per-thread buffer that stays in cache. Otherwise each product of a batch has its own A, B and C in
  // memory: for the attention shapes, 32 MiB of [T, T] written or read, bound by memory traffic.
  bool tt_in_scratch = false;
  // The bf16 product reads bfloat16 operands (rounded once beforehand, not timed), as the bf16 step's
  // linear layers feed theirs (g and the kept x: autograd/ops/linear.cpp); otherwise float32 ones, rounded
  // while packed. The float32 product reads float32 operands either way.
  bool bf16_operands = false;
};

std::vector<Shape> shapes(bool transposed) {
  const std::vector<Shape> main_shapes = {
      {"8192x384x128", 1, 8192, 384, 128, false, false},
      {"8192x128x128", 1, 8192, 128, 128, false, false},
      {"8192x512x128", 1, 8192, 512, 128, false, false},
      {"8192x128x512", 1, 8192, 128, 512, false, false},
      {"1024x1024x1024", 1, 1024, 1024, 1024, false, false},
  };
  std::vector<Shape> list = main_shapes;
  if (transposed) {
    for (const Shape& s : main_shapes) {
      list.push_back({s.name + " AtB", 1, s.M, s.N, s.K, true, false});
      list.push_back({s.name + " ABt", 1, s.M, s.N, s.K, false, true});
    }
    // Weight gradients of the 8192-row layers, X^T dY: a small output and a long K.
    list.push_back({"dW 128x384x8192 AtB", 1, 128, 384, 8192, true, false});
    list.push_back({"dW 128x512x8192 AtB", 1, 128, 512, 8192, true, false});
    list.push_back({"dW 512x128x8192 AtB", 1, 512, 128, 8192, true, false});
    list.push_back({"dW 128x384x8192 AtB bf16 in", 1, 128, 384, 8192, true, false, false, true});
    list.push_back({"dW 128x512x8192 AtB bf16 in", 1, 128, 512, 8192, true, false, false, true});
    list.push_back({"dW 512x128x8192 AtB bf16 in", 1, 512, 128, 8192, true, false, false, true});
  }
  list.push_back({"attn 128x(256x256x32)", 128, 256, 256, 32, false, false});
  list.push_back({"attn 128x(256x32x256)", 128, 256, 32, 256, false, false});
  list.push_back({"attn 256x(256x256x16)", 256, 256, 256, 16, false, false});
  list.push_back({"attn 256x(256x16x256)", 256, 256, 16, 256, false, false});
  list.push_back({"attn 128x(256x256x32) T x T in cache", 128, 256, 256, 32, false, false, true});
  list.push_back({"attn 128x(256x32x256) T x T in cache", 128, 256, 32, 256, false, false, true});
  list.push_back({"attn 256x(256x256x16) T x T in cache", 256, 256, 256, 16, false, false, true});
  list.push_back({"attn 256x(256x16x256) T x T in cache", 256, 256, 16, 256, false, false, true});
  return list;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// Median seconds of one product (or batch of products) at this shape, for each precision asked:
// float32 (cpu::gemm) and/or bfloat16 products (cpu::gemm_bf16). With both, the two alternate rep by rep
// (f, b, f, b, ...), so that a change of load on a shared machine moves both alike.
std::vector<double> time_shape_as(const Shape& s, int reps, const std::vector<bool>& bf16_modes) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> a(s.batch * s.M * s.K), b(s.batch * s.K * s.N), c(s.batch * s.M * s.N);
  for (float& x : a) x = uniform(rng);
  for (float& x : b) x = uniform(rng);
  // A^T B: A is stored K x M; A B^T: B is stored N x K (the layouts backward passes see).
  const int64_t a_rs = s.transpose_a ? 1 : s.K, a_cs = s.transpose_a ? s.M : 1;
  const int64_t b_rs = s.transpose_b ? 1 : s.N, b_cs = s.transpose_b ? s.K : 1;
  std::vector<ember::BFloat16> a16, b16;
  if (s.bf16_operands) {
    for (float x : a) a16.push_back(ember::BFloat16(x));
    for (float x : b) b16.push_back(ember::BFloat16(x));
  }
  auto run = [&](bool bf16) {
    if (bf16 && s.bf16_operands && s.batch == 1) {
      ember::cpu::gemm_bf16(s.M, s.N, s.K, 1.0f, a16.data(), a_rs, a_cs, b16.data(), b_rs, b_cs, 0.0f, c.data(), s.N);
    } else if (s.tt_in_scratch) {  // one product per task, on one thread each (gemm runs inline inside parallel_for)
      const bool a_is_tt = s.M * s.K >= s.M * s.N;  // P V: A is P; Q K^T: C is S
      ember::parallel_for(0, s.batch, 1, [&](int64_t first, int64_t last) {
        thread_local std::vector<float> tt, small;  // the [T, T] block, and the other side's C
        if (tt.size() != size_t(s.M * std::max(s.K, s.N))) {
          tt.assign(a.begin(), a.begin() + s.M * s.K);  // P's values: the first product's A
          tt.resize(size_t(s.M * std::max(s.K, s.N)));
          small.resize(size_t(s.M * s.N));
        }
        for (int64_t i = first; i < last; ++i) {
          const float* ai = a_is_tt ? tt.data() : a.data() + i * s.M * s.K;
          const float* bi = b.data() + i * s.K * s.N;
          float* ci = a_is_tt ? small.data() : tt.data();
          if (bf16) ember::cpu::gemm_bf16(s.M, s.N, s.K, 1.0f, ai, a_rs, a_cs, bi, b_rs, b_cs, 0.0f, ci, s.N);
          else ember::cpu::gemm(s.M, s.N, s.K, 1.0f, ai, a_rs, a_cs, bi, b_rs, b_cs, 0.0f, ci, s.N);
        }
      });
    } else if (bf16 && s.batch == 1) {
      ember::cpu::gemm_bf16(s.M, s.N, s.K, 1.0f, a.data(), a_rs, a_cs, b.data(), b_rs, b_cs, 0.0f, c.data(), s.N);
    } else if (bf16) {
      ember::cpu::gemm_bf16_batched(s.batch, s.M, s.N, s.K, 1.0f, a.data(), s.M * s.K, a_rs, a_cs, b.data(),
                                    s.K * s.N, b_rs, b_cs, 0.0f, c.data(), s.M * s.N, s.N);
    } else if (s.batch == 1) {
      ember::cpu::gemm(s.M, s.N, s.K, 1.0f, a.data(), a_rs, a_cs, b.data(), b_rs, b_cs, 0.0f,
                       c.data(), s.N);
    } else {
      ember::cpu::gemm_batched(s.batch, s.M, s.N, s.K, 1.0f, a.data(), s.M * s.K, a_rs, a_cs,
                               b.data(), s.K * s.N, b_rs, b_cs, 0.0f, c.data(), s.M * s.N, s.N);
    }
  };
  for (bool bf16 : bf16_modes)
    for (int i = 0; i < 2; ++i) run(bf16);  // warm-up: page faults, packing buffers, thread wake-up
  std::vector<std::vector<double>> times(bf16_modes.size());
  for (int i = 0; i < reps; ++i) {
    for (size_t m = 0; m < bf16_modes.size(); ++m) {
      auto start = std::chrono::steady_clock::now();
      run(bf16_modes[m]);
      times[m].push_back(seconds_since(start));
    }
  }
  std::vector<double> medians;
  for (auto& t : times) medians.push_back(median(t));
  return medians;
}

double time_shape(const Shape& s, int reps) { return time_shape_as(s, reps, {false})[0]; }

#if defined(__x86_64__) && defined(__GNUC__)
// 24 independent FMA chains (enough to cover 4-cycle latency on 2 ports, with room to spare).
__attribute__((target("avx512f"))) double fma_loop_avx512(int64_t iterations) {
  __m512 acc[24];
  for (int i = 0; i < 24; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < 24; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
  }
  alignas(64) float lanes[16];
  double total = 0.0;
  for (int i = 0; i < 24; ++i) {
    _mm512_store_ps(lanes, acc[i]);
    for (float lane : lanes) total += lane;
  }
  return total;  // returned so the loop is not optimized away
}

// FP32 FMA GFLOP/s with every pool thread running the FMA loop at once (median of 5).
double measure_peak() {
  if (!__builtin_cpu_supports("avx512f")) return 0.0;
  const int64_t iterations = 20'000'000;
  const int threads = ember::num_threads();
  std::vector<double> sink(threads);
  std::vector<double> rates;
  for (int rep = 0; rep < 5; ++rep) {
    auto start = std::chrono::steady_clock::now();
    ember::parallel_for(0, threads, 1, [&](int64_t first, int64_t last) {
      for (int64_t t = first; t < last; ++t) sink[t] = fma_loop_avx512(iterations);
    });
    double seconds = seconds_since(start);
    rates.push_back(2.0 * 16 * 24 * static_cast<double>(iterations) * threads / seconds / 1e9);
  }
  return median(rates);
}

// 24 independent vdpbf16ps chains: each instruction is 16 lanes x 2 products = 64 FLOP.
__attribute__((target("avx512f,avx512bf16"))) double dpbf16_loop(int64_t iterations) {
  __m512 acc[24];
  for (int i = 0; i < 24; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m512bh x = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(0.25f));
  const __m512bh y = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(2e-3f));
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < 24; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], x, y);
  }
  alignas(64) float lanes[16];
  double total = 0.0;
  for (int i = 0; i < 24; ++i) {
    _mm512_store_ps(lanes, acc[i]);
    for (float lane : lanes) total += lane;
  }
  return total;
}

// bfloat16 GFLOP/s (vdpbf16ps, 2 multiply-adds per float32 lane) on every pool thread (median of 5).
double measure_bf16_peak() {
  if (!__builtin_cpu_supports("avx512bf16")) return 0.0;
  const int64_t iterations = 10'000'000;
  const int threads = ember::num_threads();
  std::vector<double> sink(threads);
  std::vector<double> rates;
  for (int rep = 0; rep < 5; ++rep) {
    auto start = std::chrono::steady_clock::now();
    ember::parallel_for(0, threads, 1, [&](int64_t first, int64_t last) {
      for (int64_t t = first; t < last; ++t) sink[t] = dpbf16_loop(iterations);
    });
    double seconds = seconds_since(start);
    rates.push_back(2.0 * 32 * 24 * static_cast<double>(iterations) * threads / seconds / 1e9);
  }
  return median(rates);
}
#else
double measure_peak() { return 0.0; }
double measure_bf16_peak() { return 0.0; }
#endif

// --bf16: float32 and bfloat16 GEMMs side by side, each shape's ratio, and the two peaks.
int run_bf16(const std::string& only, bool transposed, int reps, bool peak, double fp32_peak) {
  std::printf("ember gemm: float kernel %s, bf16 kernel %s (vdpbf16ps / FMA multiply-adds per second on one core: "
              "%.2f), %d threads\n", ember::cpu::gemm_float_kernel_name(), ember::cpu::gemm_bf16_kernel_name(),
              ember::cpu::gemm_bf16_rate_ratio(), ember::num_threads());
  if (peak) {
    const double bf16_peak = measure_bf16_peak();
    std::printf("peak: FP32 FMA %.1f GFLOP/s, BF16 vdpbf16ps %.1f GFLOP/s (%.2fx)\n", fp32_peak, bf16_peak,
                fp32_peak > 0 ? bf16_peak / fp32_peak : 0.0);
  }
  std::printf("%-38s %12s %12s %8s\n", "shape", "fp32 GFLOP/s", "bf16 GFLOP/s", "bf16/fp32");
  std::vector<Shape> list = shapes(transposed);
  std::erase_if(list, [&](const Shape& s) { return s.name.find(only) == std::string::npos; });
  for (const Shape& s : list) {
    const double flop = 2.0 * s.batch * s.M * s.N * s.K;
    const std::vector<double> seconds = time_shape_as(s, reps, {false, true});  // interleaved
    const double fp32 = flop / seconds[0] / 1e9, bf = flop / seconds[1] / 1e9;
    std::printf("%-38s %12.1f %12.1f %7.2fx\n", s.name.c_str(), fp32, bf, bf / fp32);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 0, reps = 9;
  bool json = false, transposed = false, peak = false, bf16 = false;
  const char* kernel = nullptr;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (arg == "--reps" && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (arg == "--kernel" && i + 1 < argc) kernel = argv[++i];
    else if (arg == "--only" && i + 1 < argc) only = argv[++i];
    else if (arg == "--json") json = true;
    else if (arg == "--transposed") transposed = true;
    else if (arg == "--peak") peak = true;
    else if (arg == "--bf16") bf16 = true;
    else {
      std::fprintf(stderr, "usage: %s [--threads N] [--reps R] [--json] [--transposed] [--peak] [--kernel NAME] [--only TEXT] [--bf16]\n", argv[0]);
      return 2;
    }
  }
  if (threads > 0) ember::set_num_threads(threads);
  if (kernel != nullptr && !ember::cpu::set_gemm_kernel(kernel)) {
    std::fprintf(stderr, "kernel '%s' is not available on this CPU\n", kernel);
    return 2;
  }

  const double peak_gflops = peak ? measure_peak() : 0.0;
  if (bf16 && !json) return run_bf16(only, transposed, reps, peak, peak_gflops);
  nlohmann::ordered_json report = {{"kernel", ember::cpu::gemm_float_kernel_name()}, {"threads", ember::num_threads()}};
  if (json) {
    if (peak) report["fma_peak_gflops"] = json_number(peak_gflops, "{:.1f}");
    report["results"] = nlohmann::ordered_json::array();
  } else {
    std::printf("ember gemm: kernel %s, %d threads\n", ember::cpu::gemm_float_kernel_name(),
                ember::num_threads());
    if (peak) std::printf("FP32 FMA peak: %.1f GFLOP/s\n", peak_gflops);
  }
  std::vector<Shape> list = shapes(transposed);
  std::erase_if(list, [&](const Shape& s) { return s.name.find(only) == std::string::npos; });
  for (size_t i = 0; i < list.size(); ++i) {
    const Shape& s = list[i];
    const double seconds = time_shape(s, reps);
    const double gflops = 2.0 * s.batch * s.M * s.N * s.K / seconds / 1e9;
    if (json) {
      report["results"].push_back({{"name", s.name},
                                   {"batch", s.batch},
                                   {"M", s.M},
                                   {"N", s.N},
                                   {"K", s.K},
                                   {"seconds", json_number(seconds, "{:.6g}")},
                                   {"gflops", json_number(gflops, "{:.2f}")}});
    } else {
      std::printf("%-38s %9.3f ms %8.1f GFLOP/s\n", s.name.c_str(), seconds * 1e3, gflops);
    }
    std::fflush(stdout);
  }
  if (json) fmt::print("{}\n", report.dump(1));
  return 0;
}
