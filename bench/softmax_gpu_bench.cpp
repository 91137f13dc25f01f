// The framework's own softmax kernel (cuda/softmax_kernels.cu) against cuDNN's (cuda/cudnn_softmax.cu; the
// kernel of core/kernels.h takes it when set_softmax_cudnn(true))
// on the GPU, forward and backward, on the shapes of the IMDb recipe's attention scores
// ([batch * heads * T, T]) and a wide classifier-like row. Prints one line per shape with the
// median time of each and the largest difference between their outputs.
// Usage: softmax_gpu_bench [--reps N] [--smoke]   (needs a GPU; says so and exits 0 without one)
//   --smoke: one rep on every shape's first 1/256 of the rows, to check the program runs (CI runs it
//            on the CPU emulator of CUDA: tests/gpu_programs_test.sh); its times mean nothing.
// NOTE: compiled by CI and run small on the CPU emulator (--smoke), not yet on a GPU (see docs/cuda.md).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "autograd/ops.h"
#include "core/cuda_ops.h"
#include "core/kernels.h"

using namespace ember;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median ms of `reps` runs of fn (after 3 warm-up runs), each waited for.
template <typename Fn>
double time_ms(int reps, Device device, Fn&& fn) {
  std::vector<double> ms;
  for (int i = 0; i < reps + 3; ++i) {
    cuda::synchronize(device.index);
    auto start = Clock::now();
    fn();
    cuda::synchronize(device.index);
    if (i >= 3) ms.push_back(1e3 * std::chrono::duration<double>(Clock::now() - start).count());
  }
  return median(ms);
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, double(std::abs(x[i] - y[i])));
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 50;
  int64_t row_divisor = 1;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--reps" && i + 1 < argc) {
      reps = std::stoi(argv[++i]);
    } else if (flag == "--smoke") {
      reps = 1;
      row_divisor = 256;
    } else {
      std::fprintf(stderr, "usage: softmax_gpu_bench [--reps N] [--smoke]\n");
      return 2;
    }
  }
  if (cuda_device_count() == 0) {
    std::printf("softmax_gpu_bench: skipped: no CUDA device\n");
    return 0;
  }
  if (!cuda::cudnn_available()) {
    std::printf("softmax_gpu_bench: skipped: this build has no cuDNN\n");
    return 0;
  }
  const Device device = Device::cuda(0);
  struct Shape2 {
    const char* what;
    int64_t rows, n;
  };
  const Shape2 shapes[] = {{"attention scores h=4 (32*4*256 x 256)", 32 * 4 * 256, 256},
                           {"attention scores h=1 (32*256 x 256)", 32 * 256, 256},
                           {"short rows (32*4*64 x 64)", 32 * 4 * 64, 64},
                           {"wide rows (256 x 20002)", 256, 20002}};
  if (row_divisor > 1)
    fmt::print("smoke run: each shape's rows divided by {}, one rep; the times mean nothing\n", row_divisor);
  fmt::print("{:<40} {:>12} {:>12} {:>12} {:>12} {:>10} {:>10}\n", "shape", "own fwd ms", "cuDNN fwd ms",
             "own bwd ms", "cuDNN bwd ms", "fwd diff", "bwd diff");
  for (Shape2 s : shapes) {
    s.rows = std::max<int64_t>(1, s.rows / row_divisor);
    Generator gen(1);
    Tensor x = uniform({s.rows, s.n}, -4, 4, gen).to(device);
    Tensor g = uniform({s.rows, s.n}, -1, 1, gen).to(device);
    Tensor y_own = Tensor::empty({s.rows, s.n}, Dtype::Float32, device), y_dnn = y_own.clone();
    Tensor dx_own = y_own.clone(), dx_dnn = y_own.clone();
    // The softmax kernel of core/kernels.h on the GPU, its own row kernels or cuDNN's by the switch.
    const On on{0, int(Dtype::Float32)};
    auto forward = [&](const Tensor& y) {
      cuda::softmax_forward(on, x.raw_data(), y.raw_data(), s.rows, s.n, 1, false, nullptr);
    };
    auto backward = [&](const Tensor& y, const Tensor& dx) {
      cuda::softmax_backward(on, g.raw_data(), y.raw_data(), dx.raw_data(), s.rows, s.n, 1, false, nullptr);
    };
    cuda::set_softmax_cudnn(false);
    double f_own = time_ms(reps, device, [&] { forward(y_own); });
    double b_own = time_ms(reps, device, [&] { backward(y_own, dx_own); });
    cuda::set_softmax_cudnn(true);
    double f_dnn = time_ms(reps, device, [&] { forward(y_dnn); });
    double b_dnn = time_ms(reps, device, [&] { backward(y_dnn, dx_dnn); });
    cuda::set_softmax_cudnn(false);
    fmt::print("{:<40} {:>12.4f} {:>12.4f} {:>12.4f} {:>12.4f} {:>10.2e} {:>10.2e}\n", s.what, f_own, f_dnn, b_own,
               b_dnn, max_abs_diff(y_own, y_dnn), max_abs_diff(dx_own, dx_dnn));
  }
  return 0;
}
