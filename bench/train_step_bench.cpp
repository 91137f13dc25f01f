// Ember's half of bench/train_step.sh: one training step, inference and a short real run of the
// IMDb recipe's model, timed; prints one JSON object. bench/train_step_torch.py is the PyTorch half
// and reads the same files, so both start from the same weights and see the same batches.
//
// Usage:
//   train_step_bench --write-init FILE [--heads H] [--seed S] [--batch-size B] [--len T]
//       initial weights ("model.*") and one full B x T batch, 32 x 256 unless given ("batch.tokens",
//       "batch.labels"); the timing runs use whatever batch the file holds
//   train_step_bench --init FILE [--heads H] [--threads N] [--steps S] [--warmup W]
//                    [--batches FILE] [--run-steps N] [--device cpu|cuda[:N]] [--precision fp32|bf16]
//                    [--cuda-graph]
//       times S training steps and S forward passes after W warm-up steps (--steps-only: no forward
//       passes; --forward-only: no training steps), then (with --batches: `imdb batches --file FILE --count N`
//       writes the recipe's first N batches on IMDb, "<i>.tokens", "<i>.mask", "<i>.labels")
//       trains N steps on the real batches from fresh copies of the same weights; --precision bf16
//       runs all of it in the mixed-precision scope (core/precision.h), as `imdb train --precision bf16`;
//       --cuda-graph (a GPU) runs each training step as the trainer does with --cuda-graph on: the
//       batch padded to a multiple of 32 tokens and staged, then the whole step (forward to AdamW)
//       replayed as one CUDA graph (optim/train/graph_step.h), captured after the first warm-up step (W >= 1).
// The model is nn::TransformerClassifier at the recipe's sizes; nothing here is the IMDb program's.
// On the CUDA emulator the JSON also holds "emulator_counts": what the timed steps asked of the GPU
// (counters.h: launches by kernel, copies, host waits), for S steps; with EMBER_EMULATOR_DRY=1 the
// step times are then the host's alone (bench/host_time.sh, docs/cuda.md "The host's share").
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "bench/json_number.h"
#include "core/allocator.h"
#include "core/cuda_ops.h"
#include "core/parallel.h"
#include "core/precision.h"
#include "core/random.h"
#include "core/gpu_stream.h"
#include "nn/checkpoint.h"
#include "nn/transformer.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "optim/train/batch.h"
#include "optim/train/graph_step.h"
#include "optim/weight_decay.h"

// The CUDA emulator's counts (tests/cuda_emulator/counters.h), when this program runs on it: weak
// references, null on a GPU.
extern "C" __attribute__((weak)) void ember_emulator_reset_counts();
extern "C" __attribute__((weak)) std::size_t ember_emulator_counts_json(char* out, std::size_t size);

namespace {

using namespace ember;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return int64_t(usage.ru_maxrss) * 1024;
}

struct Flags {
  std::string write_init, init, batches, device = "cpu", precision = "fp32";
  int64_t heads = 4, threads = 2, steps = 20, warmup = 3, run_steps = 0;
  int64_t batch_size = 32, len = 256;  // the batch --write-init writes
  bool forward_only = false;  // time only the forward passes (for profiling inference)
  bool steps_only = false;    // time only the training steps (for profiling a step: bench/profile_ops.sh)
  bool cuda_graph = false;    // each training step replayed as a CUDA graph (the trainer's --cuda-graph on)
  uint64_t seed = 0;
};

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--forward-only" || flag == "--steps-only" || flag == "--cuda-graph") {
      (flag == "--forward-only" ? f.forward_only : flag == "--steps-only" ? f.steps_only : f.cuda_graph) = true;
      continue;
    }
    EMBER_CHECK(i + 1 < argc, "train_step_bench: {} needs a value", flag);
    std::string value = argv[++i];
    if (flag == "--write-init") f.write_init = value;
    else if (flag == "--init") f.init = value;
    else if (flag == "--batches") f.batches = value;
    else if (flag == "--device") f.device = value;
    else if (flag == "--precision") f.precision = value;
    else if (flag == "--heads") f.heads = std::stoll(value);
    else if (flag == "--threads") f.threads = std::stoll(value);
    else if (flag == "--steps") f.steps = std::stoll(value);
    else if (flag == "--warmup") f.warmup = std::stoll(value);
    else if (flag == "--run-steps") f.run_steps = std::stoll(value);
    else if (flag == "--seed") f.seed = std::stoull(value);
    else if (flag == "--batch-size") f.batch_size = std::stoll(value);
    else if (flag == "--len") f.len = std::stoll(value);
    else fail("train_step_bench: unknown flag {}", flag);
  }
  EMBER_CHECK(!f.cuda_graph || f.warmup >= 1, "train_step_bench: --cuda-graph captures the step after a warm-up "
              "step: give --warmup 1 or more");
  return f;
}

bool on_emulator() { return &ember_emulator_counts_json != nullptr; }

std::string emulator_counts() {
  std::string text(ember_emulator_counts_json(nullptr, 0) + 1, '\0');
  text.resize(ember_emulator_counts_json(text.data(), text.size()));
  return text;
}

nn::ClassifierConfig model_config(int64_t heads) {
  nn::ClassifierConfig config;  // the recipe: vocab 20,002, dim 128, 2 layers, FFN 512, max_len 256
  config.heads = heads;
  return config;
}

void write_init(const Flags& f) {
  Generator gen(f.seed);
  nn::TransformerClassifier model(model_config(f.heads), gen);
  nn::TensorMap tensors = nn::with_prefix_added(model.state_dict(), "model.");
  const int64_t B = f.batch_size, T = f.len;
  EMBER_CHECK(B >= 1 && T >= 1 && T <= model.config.max_len, "--batch-size must be >= 1 and --len in [1, {}]",
              model.config.max_len);
  Generator draws(f.seed + 1);  // the batch: tokens in [2, vocabulary) (0 and 1 are [PAD] and [UNK]), labels 0 or 1
  const double V = double(model.config.vocab_size);
  tensors["batch.tokens"] = (rand({B, T}, draws, Dtype::Float64) * (V - 2) + 2).to(Dtype::Int64);  // (truncated: the floor)
  tensors["batch.labels"] = (rand({B}, draws, Dtype::Float64) * 2).to(Dtype::Int64);
  nn::save_tensors(f.write_init, tensors);
}

struct Trainee {
  Generator gen;
  nn::TransformerClassifier model;
  optim::AdamW optimizer;

  Trainee(int64_t heads, const nn::TensorMap& init, Device device)
      : gen(0), model(model_config(heads), gen), optimizer(optim::weight_decay_groups(model, 0.01), 5e-4) {
    model.load_state_dict(nn::with_prefix_removed(init, "model."));
    model.to(device);
  }
  // Forward, backward, clipping and AdamW: the trainer's step. NOTE: noinline, so that a profile's
  // call stacks can tell the step from the other forward passes (bench/profile_ops.py).
  [[gnu::noinline]] double step(const Tensor& tokens, const Tensor& mask, const Tensor& labels) {
    Tensor loss = cross_entropy(model.forward(tokens, mask), labels);
    optimizer.zero_grad();
    loss.backward();
    optim::clip_grad_norm_(model.parameters(), 1.0);  // the norm stays on the device
    optimizer.step();
    return loss.item<float>();  // the one wait of the step: its time includes the GPU's work
  }

  // --cuda-graph: the same step as the trainer's graphed one (clipping to 1, as above): the batch padded to a
  // multiple of 32 tokens (at most 8 shapes for T 256) and staged, then replayed (each shape's first step runs
  // eagerly and is captured).
  [[gnu::noinline]] double graph_step(const Tensor& tokens, const Tensor& padding, const Tensor& labels) {
    const Device device = model.parameters().front().device();
    const nn::ClassifierConfig& c = model.config;
    if (!graphs) {
      auto loss_of = [this](const train::DeviceBatch& b) {
        return cross_entropy(model.forward(b.ids_at("tokens"), b.ids_at("positions"), b.at("mask")), b.ids_at("labels"));
      };
      graphs.emplace(model, optimizer, gen, device, loss_of, 1.0, /*quiet=*/true);
    }
    const int64_t B = tokens.size(0), T = tokens.size(1), padded = std::min(c.max_len, (T + 31) / 32 * 32);
    train::Batch batch{{"tokens", zeros({B, padded}, Dtype::Int64)},  // [PAD]
                       {"mask", ones({B, padded}, Dtype::Bool)},      // padding
                       {"positions", arange(padded).view({1, padded})},
                       {"labels", labels}};
    batch.at("tokens").narrow(1, 0, T).copy_(tokens);
    batch.at("mask").narrow(1, 0, T).copy_(padding);
    const train::Layout layout{{"tokens", {.id_bound = c.vocab_size, .buckets = true}},
                               {"positions", {.id_bound = c.max_len, .buckets = true, .same_per_shape = true}},
                               {"labels", {.id_bound = c.classes}}};
    train::stage(batch, layout, device, GpuStream::Compute, staged);
    return graphs->run(staged).item<float>();  // the step's one wait, as above
  }

 private:
  std::optional<train::GraphStep> graphs;
  train::DeviceBatch staged;  // the batch on the GPU, copied into its shape's graph inputs
};

void run(const Flags& f) {
  set_num_threads(int(f.threads));
  MixedPrecisionGuard precision(parse_precision(f.precision));
  const Device device = Device::parse(f.device);
  EMBER_CHECK(device.is_cpu() || device.index < cuda_device_count(), "train_step_bench: no GPU {} here", f.device);
  nn::TensorMap init = nn::load_weights(f.init);
  // Tokens and labels stay on the host, as in the trainer: the embedding and cross-entropy upload them.
  Tensor tokens = init.at("batch.tokens"), labels = init.at("batch.labels");
  Tensor mask = zeros(tokens.shape(), Dtype::Bool, device);  // a full batch: no padding
  const Tensor no_padding = zeros(tokens.shape(), Dtype::Bool);  // (--cuda-graph's, on the host)
  EMBER_CHECK(!f.cuda_graph || device.is_cuda(), "train_step_bench: --cuda-graph needs --device cuda, not {}", f.device);
  Trainee trainee(f.heads, init, device);
  if (device.is_cuda()) reset_peak_memory(device);

  // The first loss, without dropout, from the shared weights: both frameworks must agree.
  double first_loss = 0;
  {
    trainee.model.eval();
    NoGradGuard no_grad;
    first_loss = cross_entropy(trainee.model.forward(tokens, mask), labels).item<float>();
  }

  trainee.model.train();
  std::vector<double> step_ms, forward_ms, step_cpu_ms;
  double timed_from = 0;  // CLOCK_MONOTONIC seconds when the timed steps began (profiles skip the warm-up)
  std::string step_counts = "null";  // on the emulator: what the timed steps asked of the GPU
  for (int64_t i = 0; i < (f.forward_only ? 0 : f.warmup + f.steps); ++i) {
    if (i == f.warmup && on_emulator()) ember_emulator_reset_counts();
    auto start = Clock::now();
    if (i == f.warmup) timed_from = std::chrono::duration<double>(start.time_since_epoch()).count();
    std::clock_t cpu_start = std::clock();
    if (f.cuda_graph) trainee.graph_step(tokens, no_padding, labels);
    else trainee.step(tokens, mask, labels);
    if (i + 1 == f.warmup + f.steps && on_emulator()) step_counts = emulator_counts();
    if (i >= f.warmup) {
      step_ms.push_back(1e3 * seconds_since(start));
      step_cpu_ms.push_back(1e3 * double(std::clock() - cpu_start) / CLOCKS_PER_SEC);
    }
  }
  trainee.model.eval();
  for (int64_t i = 0; i < (f.steps_only ? 0 : f.warmup + f.steps); ++i) {
    NoGradGuard no_grad;
    auto start = Clock::now();
    Tensor logits = trainee.model.forward(tokens, mask);
    if (device.is_cuda()) cuda::synchronize(device.index);  // GPU work is asynchronous: wait before reading the clock
    if (i >= f.warmup) forward_ms.push_back(1e3 * seconds_since(start));
  }

  double run_tokens_per_s = 0, run_seconds = 0;
  int64_t run_steps = 0;
  double run_last_loss = 0;
  if (!f.batches.empty() && f.run_steps > 0) {
    nn::TensorMap batches = nn::load_tensors(f.batches);
    Trainee fresh(f.heads, init, device);
    fresh.model.train();
    int64_t real_tokens = 0;
    auto start = Clock::now();
    for (; run_steps < f.run_steps && batches.count(std::to_string(run_steps) + ".tokens"); ++run_steps) {
      std::string i = std::to_string(run_steps);
      const Tensor& m = batches.at(i + ".mask");
      run_last_loss = f.cuda_graph ? fresh.graph_step(batches.at(i + ".tokens"), m, batches.at(i + ".labels"))
                                   : fresh.step(batches.at(i + ".tokens"), m.to(device), batches.at(i + ".labels"));
      const bool* padding = m.data<bool>();
      for (int64_t j = 0; j < m.numel(); ++j) real_tokens += padding[j] ? 0 : 1;
    }
    run_seconds = seconds_since(start);
    run_tokens_per_s = double(real_tokens) / run_seconds;
  }

  const nlohmann::ordered_json result = {
      {"framework", "ember"},
      {"precision", f.precision},
      {"heads", f.heads},
      {"threads", num_threads()},
      {"first_loss", json_number(first_loss, "{:.8f}")},
      {"step_ms", json_number(median(step_ms), "{:.3f}")},
      {"step_ms_all", json_numbers(step_ms, "{:.2f}")},
      {"step_cpu_ms", json_number(median(step_cpu_ms), "{:.3f}")},
      {"forward_ms", json_number(median(forward_ms), "{:.3f}")},
      {"run_steps", run_steps},
      {"run_seconds", json_number(run_seconds, "{:.3f}")},
      {"run_tokens_per_s", json_number(run_tokens_per_s, "{:.1f}")},
      {"run_last_loss", json_number(run_last_loss, "{:.6f}")},
      {"peak_rss_bytes", peak_rss_bytes()},
      {"peak_tensor_bytes", memory_stats().peak_allocated},
      {"device", device.str()},
      {"peak_gpu_bytes", device.is_cuda() ? memory_stats(device).peak_allocated : 0},
      {"timed_from_monotonic_s", json_number(timed_from, "{:.6f}")},
      {"cuda_graph", f.cuda_graph},
      {"steps", f.forward_only ? 0 : f.steps},
      {"emulator_counts", nlohmann::ordered_json::parse(step_counts)}};
  fmt::print("{}\n", result.dump());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Flags f = parse(argc, argv);
    if (!f.write_init.empty()) write_init(f);
    else if (!f.init.empty()) run(f);
    else fail("train_step_bench: give --write-init FILE or --init FILE");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_step_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
