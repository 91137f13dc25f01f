// What fusing attention buys, and what cross-attention costs: one forward and backward of a multi-head
// attention layer at the IMDb recipe's size (B 32, T 256, D 128, a key padding mask), four ways, alternated
// round by round in one run:
//   self   nn::MultiHeadAttention on x: one projection, the fused `attention` op, the output projection
//   cross  nn::MultiHeadAttention with queries from x and keys / values from another [B, S, D] sequence of
//          the same size (S = T): the projections apart, the fused scaled_dot_product_attention on views
//   seed 001  the seed's class (examples/seed_attention.h): view / transpose / matmul / masked_fill / softmax
//   seed 000  the seed's einops class: chunk / rearrange / einsum / masked_fill / softmax
// Prints each way's median and first quartile per step (over every timed step of every round), its peak
// memory (what the step allocated beyond its inputs), and its ratio to `self`.
// Usage: attention_bench [--heads H ...] [--rounds R] [--steps S] [--threads N] [--batch B] [--len T] [--dim D]
//                        [--device cpu|cuda]   (defaults: heads 1 and 4, 5 rounds of 5 steps, all threads)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/device.h"
#include "core/parallel.h"
#include "examples/seed_attention.h"
#include "nn/attention.h"

using namespace ember;

namespace {

struct Way {
  std::string name;
  std::function<Tensor()> step;  // the forward; the caller runs the backward
  std::vector<double> seconds;
  int64_t peak = 0;
};

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[size_t(q * double(v.size() - 1))];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> heads_list;
  int64_t rounds = 5, steps = 5, threads = 0, B = 32, T = 256, D = 128;
  Device device = Device::cpu();
  for (int i = 1; i < argc; ++i) {
    const auto value = [&] {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "attention_bench: %s needs a value\n", argv[i]);
        std::exit(2);
      }
      return std::atoll(argv[++i]);
    };
    if (std::strcmp(argv[i], "--heads") == 0) heads_list.push_back(value());
    else if (std::strcmp(argv[i], "--rounds") == 0) rounds = value();
    else if (std::strcmp(argv[i], "--steps") == 0) steps = value();
    else if (std::strcmp(argv[i], "--threads") == 0) threads = value();
    else if (std::strcmp(argv[i], "--batch") == 0) B = value();
    else if (std::strcmp(argv[i], "--len") == 0) T = value();
    else if (std::strcmp(argv[i], "--dim") == 0) D = value();
    else if (std::strcmp(argv[i], "--device") == 0 && i + 1 < argc)
      device = std::strcmp(argv[++i], "cuda") == 0 ? Device::cuda(0) : Device::cpu();
    else {
      std::fprintf(stderr, "attention_bench: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (heads_list.empty()) heads_list = {1, 4};
  if (threads > 0) set_num_threads(int(threads));
  if (device.is_cuda() && cuda_device_count() == 0) {
    std::fprintf(stderr, "attention_bench: no CUDA device\n");
    return 2;
  }
  std::printf("B %lld, T = S %lld, D %lld, %d threads, %s; forward + backward per step, %lld rounds of %lld steps\n",
              (long long)B, (long long)T, (long long)D, num_threads(), device.str().c_str(), (long long)rounds,
              (long long)steps);
  for (int64_t H : heads_list) {
    Generator gen(0);
    nn::MultiHeadAttention mha(D, H, gen);
    seeds::ViewMultiHeadAttention seed001(D, H, gen);
    seeds::EinopsMultiHeadAttention seed000(D, H, gen);
    mha.to(device), seed001.to(device), seed000.to(device);
    Tensor x = randn({B, T, D}, gen).to(device).requires_grad_();
    Tensor memory = randn({B, T, D}, gen).to(device).requires_grad_();
    // Reviews padded to T: review b keeps T - 8 b % T tokens (the recipe's batches are padded to their longest).
    Tensor padding = Tensor::empty({B, T}, Dtype::Bool);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) padding.data<bool>()[b * T + t] = t >= T - (8 * b) % T;
    padding = padding.to(device);
    const Tensor seed_mask = (padding == false).to(Dtype::Int64).view({B, 1, 1, T});  // the seeds': 1 = seen
    nn::AttentionMasks cross_masks;
    cross_masks.key_padding_mask = padding;
    std::vector<Way> ways = {
        {"self (fused attention)", [&] { return mha.forward(x, padding).out; }, {}, 0},
        {"cross (fused sdpa, S = T)", [&] { return mha.forward(x, memory, memory, cross_masks).out; }, {}, 0},
        {"seed 001 (view, matmul)", [&] { return seed001.forward(x, x, x, seed_mask).first; }, {}, 0},
        {"seed 000 (einops)", [&] { return seed000.forward(x, seed_mask).first; }, {}, 0},
    };
    Tensor g = randn({B, T, D}, gen).to(device);
    for (int64_t round = 0; round <= rounds; ++round) {  // round 0 warms up, untimed
      for (Way& way : ways) {
        for (int64_t s = 0; s < steps; ++s) {
          reset_peak_memory(device);
          const int64_t before = memory_stats(device).allocated;
          const auto start = std::chrono::steady_clock::now();
          Tensor out = way.step();
          sum(out * g).backward();
          if (device.is_cuda()) (void)sum(out).to(Device::cpu()).item<float>();  // wait for the GPU
          const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          way.peak = std::max(way.peak, memory_stats(device).peak_allocated - before);
          if (round > 0) way.seconds.push_back(seconds);
          x.zero_grad(), memory.zero_grad();
          mha.zero_grad(), seed001.zero_grad(), seed000.zero_grad();
        }
      }
    }
    const double base = quantile(ways[0].seconds, 0.5);
    std::printf("\nheads %lld (head size %lld)\n%-28s %10s %10s %12s %9s\n", (long long)H, (long long)(D / H), "way",
                "median", "q1", "peak MiB", "x self");
    for (const Way& way : ways)
      std::printf("%-28s %8.2fms %8.2fms %12.1f %8.2fx\n", way.name.c_str(), 1e3 * quantile(way.seconds, 0.5),
                  1e3 * quantile(way.seconds, 0.25), double(way.peak) / (1024.0 * 1024.0),
                  quantile(way.seconds, 0.5) / base);
  }
  return 0;
}
