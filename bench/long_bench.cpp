// Ember's half of bench/long.sh: training steps of the IMDb recipe's model on long inputs (B reviews of T
// real tokens), with full or sliding-window attention, with or without activation checkpointing. Prints
// one JSON line: the median step time, the peak tensor bytes of a step (the allocator's count of live
// tensors above what was live before it) and the process's peak RSS. bench/long_torch.py is PyTorch's half.
//
// Usage: long_bench --len T --batch B [--attention full|window:W[,global:G]] [--checkpoint]
//                   [--steps S] [--warmup W] [--threads N] [--precision fp32|bf16]
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/json_number.h"
#include "core/allocator.h"
#include "core/attention_band.h"
#include "core/parallel.h"
#include "core/precision.h"
#include "nn/transformer.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "optim/weight_decay.h"

namespace {

using namespace ember;
using Clock = std::chrono::steady_clock;

struct Flags {
  int64_t len = 512, batch = 8, steps = 3, warmup = 1, threads = 2;
  std::string attention = "full", precision = "fp32";
  bool checkpoint = false;
};

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--checkpoint") {
      f.checkpoint = true;
      continue;
    }
    EMBER_CHECK(i + 1 < argc, "long_bench: {} needs a value", flag);
    const std::string value = argv[++i];
    if (flag == "--len") f.len = std::stoll(value);
    else if (flag == "--batch") f.batch = std::stoll(value);
    else if (flag == "--steps") f.steps = std::stoll(value);
    else if (flag == "--warmup") f.warmup = std::stoll(value);
    else if (flag == "--threads") f.threads = std::stoll(value);
    else if (flag == "--attention") f.attention = value;
    else if (flag == "--precision") f.precision = value;
    else fail("long_bench: unknown flag {}", flag);
  }
  return f;
}

int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return int64_t(usage.ru_maxrss) * 1024;
}

void run(const Flags& f) {
  set_num_threads(int(f.threads));
  MixedPrecisionGuard precision(parse_precision(f.precision));  // bf16: as `imdb train --precision bf16`
  std::optional<AttentionBand> attention = parse_attention_band(f.attention, f.len);
  EMBER_CHECK(attention.has_value(), "long_bench: --attention {}: expected full or window:W[,global:G]", f.attention);
  nn::ClassifierConfig config;  // the recipe: dim 128, 4 heads, 2 blocks, FFN 512
  config.max_len = f.len;
  config.attention_window = attention->window;
  config.attention_global = attention->global;
  config.checkpoint = f.checkpoint;
  Generator gen(0);
  nn::TransformerClassifier model(config, gen);
  model.train();
  optim::AdamW optimizer(optim::weight_decay_groups(model, 0.01), 5e-4);
  Generator data(1);
  Tensor tokens = uniform({f.batch, f.len}, 2, double(config.vocab_size), data).to(Dtype::Int64);
  Tensor mask = zeros({f.batch, f.len}, Dtype::Bool);  // whole reviews of T tokens: no padding
  std::vector<int64_t> label_values;
  for (int64_t b = 0; b < f.batch; ++b) label_values.push_back(b % 2);
  Tensor labels = from_vector(label_values, {f.batch});
  std::vector<double> times;
  int64_t peak_tensor_bytes = 0;
  for (int64_t s = 0; s < f.warmup + f.steps; ++s) {
    const int64_t live_before = memory_stats().allocated;
    reset_peak_memory();
    const auto start = Clock::now();
    Tensor loss = cross_entropy(model.forward(tokens, mask), labels);
    optimizer.zero_grad();
    loss.backward();
    optim::clip_grad_norm(model.parameters(), 1.0);
    optimizer.step();
    (void)loss.item<float>();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    peak_tensor_bytes = std::max(peak_tensor_bytes, memory_stats().peak_allocated - live_before);
    if (s >= f.warmup) times.push_back(seconds);
  }
  std::sort(times.begin(), times.end());
  const double median = times.empty() ? 0 : times[times.size() / 2];
  const nlohmann::ordered_json result = {{"framework", "ember"},
                                         {"len", f.len},
                                         {"batch", f.batch},
                                         {"attention", f.attention},
                                         {"checkpoint", f.checkpoint},
                                         {"precision", f.precision},
                                         {"step_s", json_number(median, "{:.4f}")},
                                         {"peak_tensor_bytes", peak_tensor_bytes},
                                         {"peak_rss_bytes", peak_rss_bytes()},
                                         {"threads", f.threads}};
  fmt::print("{}\n", result.dump());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "long_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
