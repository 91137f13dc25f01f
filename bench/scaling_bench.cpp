// Ember's half of bench/scaling.sh: the IMDb recipe's training step (forward, backward, gradient
// all-reduce, clipping, AdamW) on one process or on each rank of an mpirun job, each rank on its
// slice of the same global batch. Prints one JSON object (rank 0): step time, tokens/s, and the
// all-reduce time per step with the share of it that backward hid.
//
// Usage: [scripts/mpirun.sh -np N] scaling_bench [--threads T] [--steps S] [--warmup W]
//            [--batch-size B] [--len L] [--heads H] [--bucket-kb K] [--no-overlap] [--zero] [--comm-only]
//   B x L is the global batch (default the recipe's full 32 x 256), random tokens, no padding.
//   --comm-only: one backward, then S times only the gradient all-reduce of that step (the same
//   buckets, the same touched embedding rows): the communication alone, for a link's cost.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "autograd/ops.h"
#include "bench/json_number.h"
#include "core/distributed/world.h"
#include "core/parallel.h"
#include "nn/data_parallel.h"
#include "nn/transformer.h"
#include "optim/schedule.h"
#include "optim/sharded_adamw.h"
#include "optim/weight_decay.h"

namespace {

using namespace ember;
using Clock = std::chrono::steady_clock;

struct Flags {
  int64_t threads = 1, steps = 20, warmup = 3, batch_size = 32, len = 256, heads = 4, bucket_kb = 256;
  bool overlap = true, zero = false, comm_only = false;
};

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--no-overlap") f.overlap = false;
    else if (flag == "--zero") f.zero = true;
    else if (flag == "--comm-only") f.comm_only = true;
    else {
      EMBER_CHECK(i + 1 < argc, "scaling_bench: {} needs a value", flag);
      const int64_t value = std::stoll(argv[++i]);
      if (flag == "--threads") f.threads = value;
      else if (flag == "--steps") f.steps = value;
      else if (flag == "--warmup") f.warmup = value;
      else if (flag == "--batch-size") f.batch_size = value;
      else if (flag == "--len") f.len = value;
      else if (flag == "--heads") f.heads = value;
      else if (flag == "--bucket-kb") f.bucket_kb = value;
      else fail("scaling_bench: unknown flag {}", flag);
    }
  }
  return f;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

void run(const Flags& f, distributed::ProcessGroup& world) {
  set_num_threads(int(f.threads));
  nn::ClassifierConfig config;  // the recipe's model
  config.heads = f.heads;
  Generator gen(0);
  nn::TransformerClassifier model(config, gen);
  // The same global batch on every rank (random tokens, seeded); each rank takes its rows.
  const int64_t B = f.batch_size, T = f.len;
  Generator data_gen(1);
  Tensor tokens = (uniform({B, T}, 2, double(config.vocab_size), data_gen, Dtype::Float64)).to(Dtype::Int64);
  Tensor labels = lt(uniform({B}, 0, 1, data_gen, Dtype::Float64), full({B}, 0.5, Dtype::Float64)).to(Dtype::Int64);
  const distributed::Range rows = distributed::shard_range(B, world.rank(), world.size());
  Tensor my_tokens = tokens.narrow(0, rows.begin, rows.size()).contiguous();
  Tensor my_labels = labels.narrow(0, rows.begin, rows.size()).contiguous();
  Tensor mask = zeros({rows.size(), T}, Dtype::Bool);
  const double weight = double(rows.size()) * world.size() / double(B);

  nn::DataParallel dp(model, world, {f.bucket_kb * 1024, f.overlap, /*reduce_gradients=*/!f.zero});
  std::unique_ptr<optim::Optimizer> optimizer;
  if (f.zero) optimizer = std::make_unique<optim::ShardedAdamW>(optim::weight_decay_groups(model, 0.01), world, 5e-4, 1.0);
  else optimizer = std::make_unique<optim::AdamW>(optim::weight_decay_groups(model, 0.01), 5e-4);

  if (f.comm_only) {
    gen.set_batch_slice({B, rows.begin, rows.size()});
    (cross_entropy(model.forward(my_tokens, mask), my_labels) * weight).backward();
    dp.synchronize_gradients();  // the buckets backward started; then these averages are resent
    std::vector<Tensor> grads;
    for (const Tensor& p : model.parameters()) grads.push_back(p.grad().clone());
    std::vector<double> ms;
    int64_t bytes = 0, calls = 0;
    for (int64_t i = 0; i < f.warmup + f.steps; ++i) {
      std::vector<Tensor> params = model.parameters();
      for (size_t k = 0; k < params.size(); ++k) params[k].grad().copy_(grads[k]);
      world.barrier();
      const int64_t bytes_before = dp.stats().bytes, calls_before = dp.stats().collectives;
      const auto start = Clock::now();
      dp.synchronize_gradients();
      if (i >= f.warmup) ms.push_back(1e3 * std::chrono::duration<double>(Clock::now() - start).count());
      bytes = dp.stats().bytes - bytes_before;
      calls = dp.stats().collectives - calls_before;
    }
    const double step = median(ms);
    if (world.rank() == 0)
      fmt::print("{}\n",
                 nlohmann::ordered_json{
                     {"framework", "ember"},
                     {"ranks", world.size()},
                     {"comm_only", true},
                     {"bucket_kb", f.bucket_kb},
                     {"buckets", dp.num_buckets()},
                     {"collectives_per_step", calls},
                     {"allreduce_ms_per_step", json_number(step, "{:.3f}")},
                     {"bytes_per_step", bytes},
                     // a ring all-reduce moves 2 (n - 1) / n of the bytes through each rank's link
                     {"bus_gbit_per_s",
                      json_number(8.0 * 2.0 * (world.size() - 1) / world.size() * double(bytes) / (step / 1e3) / 1e9,
                                  "{:.2f}")},
                     {"allreduce_ms_all", json_numbers(ms, "{:.2f}")}}
                     .dump());
    return;
  }
  std::vector<double> step_ms, backward_ms;
  nn::DataParallelStats before;
  for (int64_t i = 0; i < f.warmup + f.steps; ++i) {
    if (i == f.warmup) before = dp.stats();
    gen.set_batch_slice({B, rows.begin, rows.size()});
    const auto start = Clock::now();
    Tensor loss = cross_entropy(model.forward(my_tokens, mask), my_labels) * weight;
    optimizer->zero_grad();
    const auto backward_start = Clock::now();
    loss.backward();
    const auto backward_end = Clock::now();
    dp.synchronize_gradients();
    if (!f.zero) optim::clip_grad_norm(model.parameters(), 1.0);
    optimizer->step();
    if (i >= f.warmup) {
      step_ms.push_back(1e3 * std::chrono::duration<double>(Clock::now() - start).count());
      backward_ms.push_back(1e3 * std::chrono::duration<double>(backward_end - backward_start).count());
    }
  }
  const nn::DataParallelStats& after = dp.stats();
  const double steps = double(f.steps);
  const double comm_ms = 1e3 * (after.comm_seconds - before.comm_seconds) / steps;
  const double exposed_ms = 1e3 * (after.exposed_seconds - before.exposed_seconds) / steps;
  const double step = median(step_ms);
  if (world.rank() == 0)
    fmt::print("{}\n",
               nlohmann::ordered_json{
                   {"framework", "ember"},
                   {"ranks", world.size()},
                   {"threads", num_threads()},
                   {"overlap", f.overlap},
                   {"zero", f.zero},
                   {"bucket_kb", f.bucket_kb},
                   {"buckets", dp.num_buckets()},
                   {"step_ms", json_number(step, "{:.2f}")},
                   {"backward_ms", json_number(median(backward_ms), "{:.2f}")},
                   {"tokens_per_s", json_number(double(B * T) / (step / 1e3), "{:.0f}")},
                   {"allreduce_ms_per_step", json_number(comm_ms, "{:.3f}")},
                   {"exposed_ms_per_step", json_number(exposed_ms, "{:.3f}")},
                   {"hidden_share", json_number(comm_ms > 0 ? std::max(0.0, 1 - exposed_ms / comm_ms) : 0.0, "{:.3f}")},
                   {"bytes_per_step", (after.bytes - before.bytes) / std::max<int64_t>(1, f.steps)},
                   {"step_ms_all", json_numbers(step_ms, "{:.1f}")}}
                   .dump());
}

}  // namespace

int main(int argc, char** argv) {
  std::unique_ptr<distributed::ProcessGroup> world;
  try {
    world = distributed::init_world();
    run(parse(argc, argv), *world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "scaling_bench: %s\n", e.what());
    if (world && world->size() > 1) world->abort_job("scaling_bench: stopping every rank", 1);
    return 1;
  }
  return 0;
}
