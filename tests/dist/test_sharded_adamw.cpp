// optim::ShardedAdamW (ZeRO-1): the same parameters as plain data parallelism with AdamW and
// global-norm clipping, bit-identical on every rank; its state whole and interchangeable with
// AdamW's, whatever the number of ranks that saved or loads it.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/distributed/world.h"
#include "dist_helpers.h"
#include "helpers.h"
#include "nn/data_parallel.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "optim/sharded_adamw.h"

using namespace ember;
using namespace ember::testing;

namespace {

// Matrices with weight decay, the rest without, at `no_decay_lr_scale` of the learning rate.
std::vector<optim::ParamGroup> two_groups(const nn::Module& model, double no_decay_lr_scale = 1.0) {
  optim::ParamGroup decay{{}, 0.1}, no_decay{{}, 0.0, no_decay_lr_scale};
  for (const Tensor& p : model.parameters()) (p.dim() >= 2 ? decay : no_decay).params.push_back(p);
  return {decay, no_decay};
}

// One step of the rank's slice of `batch` (weighted as in test_data_parallel.cpp).
void backward_on_slice(nn::TransformerClassifier& model, Generator& gen, const SmallBatch& batch) {
  const int64_t rows = batch.labels.numel();
  distributed::Range mine = distributed::shard_range(rows, world().rank(), world().size());
  gen.set_batch_slice({rows, mine.begin, mine.size()});
  SmallBatch local = batch.rows(mine.begin, mine.size());
  Tensor loss = cross_entropy(model.forward(local.tokens, local.padding), local.labels);
  (loss * (double(mine.size()) * world().size() / double(rows))).backward();
}

}  // namespace

TEST_CASE("ShardedAdamW: the same parameters as data parallelism with AdamW, clipping exact over all shards") {
  // With one learning rate, and with a group at half of it (--encoder-lr-scale): shards then cut across
  // runs of the two rates.
  for (const double scale : {1.0, 0.5}) {
    INFO("the second group's learning-rate scale: " << scale);
    Generator plain_gen(6), zero_gen(6);
    nn::TransformerClassifier plain(small_model(), plain_gen), sharded(small_model(), zero_gen);
    plain.to(Dtype::Float64);
    sharded.to(Dtype::Float64);
    nn::DataParallel plain_dp(plain, world());
    nn::DataParallel sharded_dp(sharded, world(), {.reduce_gradients = false});
    optim::AdamW adamw(two_groups(plain, scale), 3e-2);
    optim::ShardedAdamW zero(two_groups(sharded, scale), world(), 3e-2, /*max_grad_norm=*/0.3);
    // Every rank owns a shard; together they cover the (padded) flat vector.
    CHECK(zero.shard_size() * world().size() >= sharded.num_parameters());
    CHECK((zero.shard_size() - 1) * world().size() < sharded.num_parameters());
    for (int step = 0; step < 6; ++step) {
      SmallBatch batch = small_batch(11, 50 + step);
      adamw.zero_grad();
      backward_on_slice(plain, plain_gen, batch);
      plain_dp.synchronize_gradients();
      const double norm = optim::clip_grad_norm(plain.parameters(), 0.3);
      adamw.step();

      zero.zero_grad();
      backward_on_slice(sharded, zero_gen, batch);
      sharded_dp.synchronize_gradients();  // no reduction: the optimiser reduce-scatters
      zero.step();
      CHECK(zero.last_grad_norm() == doctest::Approx(norm).epsilon(1e-12));
      CHECK(norm > 0.3);  // the clipping did act
    }
    std::vector<Tensor> a = plain.parameters(), b = sharded.parameters();
    for (size_t k = 0; k < a.size(); ++k) {
      INFO("parameter " << k);
      check_close(b[k], a[k], 1e-10);
      CHECK(same_on_every_rank(b[k]));
    }
    // The state, gathered whole, is AdamW's.
    std::map<std::string, Tensor> full = zero.state_dict(), expected = adamw.state_dict();
    REQUIRE(full.size() == expected.size());
    for (auto& [name, t] : expected) {
      INFO(name);
      REQUIRE(full.count(name) == 1);
      check_close(full[name], t, 1e-9);
    }
  }
}

TEST_CASE("ShardedAdamW: its state resumes on any number of ranks (here: into AdamW on one process)") {
  Generator gen(12);
  nn::TransformerClassifier model(small_model(), gen);
  model.to(Dtype::Float64);
  nn::DataParallel dp(model, world(), {.reduce_gradients = false});
  optim::ShardedAdamW zero(two_groups(model), world(), 1e-2);
  for (int step = 0; step < 3; ++step) {
    zero.zero_grad();
    backward_on_slice(model, gen, small_batch(7, 20 + step));
    dp.synchronize_gradients();
    zero.step();
  }
  std::map<std::string, Tensor> saved = zero.state_dict();
  std::map<std::string, Tensor> weights;
  for (auto& [name, t] : model.state_dict()) weights[name] = t.clone();  // state_dict() shares the model's memory
  const uint64_t offset = gen.offset();
  // Go on with the shards...
  SmallBatch batch = small_batch(7, 99);
  zero.zero_grad();
  backward_on_slice(model, gen, batch);
  dp.synchronize_gradients();
  zero.step();
  // ... and, from the saved state, as one process with plain AdamW on the whole batch.
  Generator one_gen(12);
  nn::TransformerClassifier one(small_model(), one_gen);
  one_gen.set_state(12, offset);  // where the run's dropout draws were
  one.to(Dtype::Float64);
  one.load_state_dict(weights);
  optim::AdamW adamw(two_groups(one), 1e-2);
  adamw.load_state_dict(saved);
  CHECK(adamw.step_count() == 3);
  Tensor loss = cross_entropy(one.forward(batch.tokens, batch.padding), batch.labels);
  loss.backward();
  adamw.step();
  std::vector<Tensor> a = model.parameters(), b = one.parameters();
  for (size_t k = 0; k < a.size(); ++k) {
    INFO("parameter " << k);
    check_close(a[k], b[k], 1e-10);
  }
  // And back: AdamW's state loads into the shards of this group.
  optim::ShardedAdamW again(two_groups(model), world(), 1e-2);
  again.load_state_dict(adamw.state_dict());
  std::map<std::string, Tensor> round_trip = again.state_dict(), original = adamw.state_dict();
  for (auto& [name, t] : original) check_close(round_trip[name], t, 0);
  check_error([&] { again.load_state_dict({{"step", from_vector(std::vector<int64_t>{1})}, {"0.momentum", zeros({1})}}); },
              "unexpected entry '0.momentum'");
}
