// The GPU's bfloat16 matrix rate, measured: the denominator of model FLOP utilisation (MFU; the
// numerator is nn/model_flops.h, the ratio `imdb flops --peak-tflops`). One cuBLAS product of
// compact bfloat16 n x n matrices, summed and stored in float32 (cuda/gemm_rate.cu: what Ember's own
// bfloat16 products call, without their operand conversions), timed as `timings` rounds of `per_round`
// products between two waits; the best round counts, as in the datasheet sense of a peak (the clock
// at its highest, nothing else running). A few entries of C are checked against the CPU's double sums of
// the same bfloat16 values, so a fast wrong product cannot pass as a rate. Prints one JSON object.
// Usage: gemm_peak [--n N] [--timings R] [--per-round P] [--device cuda[:N]]
//   defaults: n 8192 (2 n^3 = 1.1 TFLOP a product), 10 rounds of 10 products after 3 warm-up products
//   (about 2 s on an H200 with the data's set-up). Needs a GPU; exits 0 with "skipped" without one.
//   CI runs it on the CPU emulator of CUDA with --n 64 (tests/gpu_programs_test.sh): the times mean nothing there.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "autograd/ops.h"
#include "bench/json_number.h"
#include "core/bfloat16.h"
#include "core/cuda_ops.h"
#include "core/device.h"
#include "core/error.h"
#include "core/random.h"
#include "core/tensor.h"

using namespace ember;
using Clock = std::chrono::steady_clock;

namespace {

struct Flags {
  int64_t n = 8192, timings = 10, per_round = 10;
  std::string device = "cuda";
};

int64_t flag_integer(const std::string& flag, const std::string& text, int64_t min, int64_t max) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value, 10);  // digits only, no sign or spaces
  EMBER_CHECK(!text.empty() && error == std::errc() && stop == end && value >= min && value <= max,
              "{} expects an integer in [{}, {}], got '{}'", flag, min, max, text);
  return value;
}

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    EMBER_CHECK(i + 1 < argc, "{} needs a value (usage: gemm_peak [--n N] [--timings R] [--per-round P] "
                "[--device cuda[:N]])", flag);
    const std::string value = argv[++i];
    if (flag == "--n") f.n = flag_integer(flag, value, 1, 65536);
    else if (flag == "--timings") f.timings = flag_integer(flag, value, 1, 10000);
    else if (flag == "--per-round") f.per_round = flag_integer(flag, value, 1, 10000);
    else if (flag == "--device") f.device = value;
    else fail("unknown flag '{}' (usage: gemm_peak [--n N] [--timings R] [--per-round P] [--device cuda[:N]])", flag);
  }
  return f;
}

}  // namespace

int main(int argc, char** argv) try {
  const Flags f = parse(argc, argv);
  const Device device = Device::parse(f.device);
  EMBER_CHECK(device.type == DeviceType::CUDA, "--device must be cuda or cuda:N, got '{}'", f.device);
  if (cuda_device_count() <= device.index) {
    fmt::print("{}\n", nlohmann::ordered_json{{"skipped", "no CUDA device " + device.str()}}.dump());
    return 0;
  }
  const int64_t n = f.n;
  Generator gen(7);
  // Values in [-1, 1] (exact in bfloat16 once rounded): sums of n products stay far from overflow.
  const Tensor a = uniform({n, n}, -1, 1, gen).to(Dtype::BFloat16), b = uniform({n, n}, -1, 1, gen).to(Dtype::BFloat16);
  const Tensor a_gpu = a.to(device), b_gpu = b.to(device);
  Tensor c_gpu = Tensor::empty({n, n}, Dtype::Float32, device);
  auto product = [&] {
    cuda::gemm_bf16_bare(device.index, n, n, n, a_gpu.raw_data(), b_gpu.raw_data(), c_gpu.data<float>());
  };
  for (int i = 0; i < 3; ++i) product();  // cuBLAS's choice of kernel, the clocks up
  cuda::synchronize(device.index);
  std::vector<double> round_ms;
  for (int64_t r = 0; r < f.timings; ++r) {
    const auto start = Clock::now();
    for (int64_t p = 0; p < f.per_round; ++p) product();
    cuda::synchronize(device.index);
    round_ms.push_back(1e3 * std::chrono::duration<double>(Clock::now() - start).count() / double(f.per_round));
  }
  // 16 entries of C (spread over rows and columns) against double sums of the same bfloat16 values.
  const std::vector<float> c = c_gpu.to(Device::cpu()).to_vector<float>();
  const BFloat16* av = a.data<BFloat16>();
  const BFloat16* bv = b.data<BFloat16>();
  double worst = 0;
  const int64_t checked = 16;
  for (int64_t s = 0; s < checked; ++s) {
    const int64_t i = (s * 7919) % n, j = (s * 104729 + 13) % n;
    double sum = 0, magnitude = 0;
    for (int64_t k = 0; k < n; ++k) {
      const double term = double(float(av[i * n + k])) * double(float(bv[k * n + j]));
      sum += term;
      magnitude += std::abs(term);
    }
    worst = std::max(worst, std::abs(double(c[size_t(i * n + j)]) - sum) / std::max(magnitude, 1e-30));
  }
  // float32 sums of n terms: each partial sum rounded, error well under n * 2^-24 of the terms' magnitude.
  const double tolerance = double(n) * 6e-8 + 1e-6;
  const bool correct = worst <= tolerance;
  std::vector<double> sorted = round_ms;
  std::sort(sorted.begin(), sorted.end());
  const double best_ms = sorted.front(), median_ms = sorted[sorted.size() / 2];
  const double flops = 2.0 * double(n) * double(n) * double(n);
  nlohmann::ordered_json result;
  result["device"] = device.str();
  result["n"] = n;
  result["operands"] = "bfloat16, float32 sums and C (cuBLAS)";
  result["timings"] = f.timings;
  result["per_round"] = f.per_round;
  result["best_ms"] = json_number(best_ms, "{:.4f}");
  result["median_ms"] = json_number(median_ms, "{:.4f}");
  result["tflops"] = json_number(flops / (best_ms * 1e-3) / 1e12, "{:.6g}");
  result["median_tflops"] = json_number(flops / (median_ms * 1e-3) / 1e12, "{:.6g}");
  result["checked"] = checked;
  result["worst_relative_error"] = json_number(worst, "{:.3g}");
  result["correct"] = correct;
  fmt::print("{}\n", result.dump());
  return correct ? 0 : 1;
} catch (const std::exception& e) {
  fmt::print(stderr, "gemm_peak: {}\n", e.what());
  return 1;
}
