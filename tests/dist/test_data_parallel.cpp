// nn::DataParallel across the ranks: the same steps as one process running the whole batch (uneven
// slices included), parameters bit-identical on every rank, overlapped and non-overlapped bucketing
// bit-identical, a rank with no rows, ranks with different models.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "core/distributed/world.h"
#include "dist_helpers.h"
#include "helpers.h"
#include "nn/data_parallel.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"

using namespace ember;
using namespace ember::testing;

namespace {

// This rank's rows of a batch of `batch` rows: the loss of its slice, weighted so that the ranks'
// average is the gradient of the whole batch's mean (nn/data_parallel.h), dropout drawing as one
// process would (core/random.h, BatchSlice).
Tensor slice_loss(nn::TransformerClassifier& model, Generator& gen, const SmallBatch& batch) {
  const int64_t rows = batch.labels.numel();
  distributed::Range mine = distributed::shard_range(rows, world().rank(), world().size());
  gen.set_batch_slice({rows, mine.begin, mine.size()});
  SmallBatch local = batch.rows(mine.begin, mine.size());
  Tensor loss = cross_entropy(model.forward(local.tokens, local.padding), local.labels);
  return loss * (double(mine.size()) * world().size() / double(rows));
}

std::vector<Tensor> grads_of(const nn::Module& model) {
  std::vector<Tensor> out;
  for (const Tensor& p : model.parameters()) out.push_back(p.grad().clone());
  return out;
}

}  // namespace

TEST_CASE("DataParallel: k AdamW steps equal one process on the whole batch; parameters bit-identical on every rank") {
  Generator dp_gen(3), one_gen(3);
  nn::TransformerClassifier model(small_model(), dp_gen), whole(small_model(), one_gen);
  model.to(Dtype::Float64);
  whole.to(Dtype::Float64);
  // Other ranks start elsewhere: DataParallel must copy rank 0's parameters to them.
  if (world().rank() != 0)
    for (Tensor& p : model.parameters()) p.detach().add_(full_like(p.detach(), 0.5 * world().rank()));
  // Small buckets, and the token embedding (40 rows) sent as its touched rows only.
  nn::DataParallel dp(model, world(), {.bucket_bytes = 2048, .sparse_min_rows = 16});
  CHECK(dp.num_buckets() > 3);
  optim::AdamW optimizer({{model.parameters(), 0.01}}, 1e-2), one_optimizer({{whole.parameters(), 0.01}}, 1e-2);
  for (int step = 0; step < 5; ++step) {
    SmallBatch batch = small_batch(10, 100 + step);  // 10 rows: 5 + 5 on two ranks, 4 + 3 + 3 on three
    Tensor loss = slice_loss(model, dp_gen, batch);
    optimizer.zero_grad();
    loss.backward();
    dp.synchronize_gradients();
    optim::clip_grad_norm(model.parameters(), 0.5);
    optimizer.step();

    Tensor one_loss = cross_entropy(whole.forward(batch.tokens, batch.padding), batch.labels);
    one_optimizer.zero_grad();
    one_loss.backward();
    optim::clip_grad_norm(whole.parameters(), 0.5);
    one_optimizer.step();
  }
  CHECK(dp_gen.offset() == one_gen.offset());  // every rank drew the whole batch's dropout numbers
  std::vector<Tensor> ps = model.parameters(), ones = whole.parameters();
  for (size_t k = 0; k < ps.size(); ++k) {
    INFO("parameter " << k);
    check_close(ps[k], ones[k], 1e-10);  // the same steps, the sums in another order
    CHECK(same_on_every_rank(ps[k]));
  }
  CHECK(dp.stats().steps == 5);
  CHECK((dp.stats().early_buckets > 0) == (world().size() > 1));  // buckets did leave during backward
  dp.check_replicas_agree();
  if (world().size() > 1) {  // one rank steps aside: every rank must see it
    if (world().rank() == world().size() - 1) model.parameters()[3].detach().add_(full_like(model.parameters()[3].detach(), 1e-9));
    check_error([&] { dp.check_replicas_agree(); }, fmt::format("rank {}'s parameters differ from rank 0's", world().size() - 1));
  }
}

TEST_CASE("DataParallel: overlapped, non-overlapped and sparse-row bucketing give bit-identical gradients") {
  std::vector<std::vector<Tensor>> results;
  for (auto [overlap, sparse_rows] : {std::pair{true, 0}, {false, 0}, {true, 16}}) {
    INFO("overlap " << overlap << ", sparse rows from " << sparse_rows);
    Generator gen(8);
    nn::TransformerClassifier model(small_model(), gen);  // float32, as training runs
    nn::DataParallel dp(model, world(), {.bucket_bytes = 1024, .overlap = overlap, .sparse_min_rows = sparse_rows});
    SmallBatch batch = small_batch(12, 7);
    Tensor loss = slice_loss(model, gen, batch);
    loss.backward();
    dp.synchronize_gradients();
    CHECK((dp.stats().early_buckets > 0) == (overlap && world().size() > 1));
    results.push_back(grads_of(model));
  }
  for (size_t k = 0; k < results[0].size(); ++k) {
    INFO("gradient " << k);
    Tensor a = results[0][k];
    for (size_t run = 1; run < results.size(); ++run) {
      Tensor b = results[run][k];
      CHECK(std::memcmp(a.raw_data(), b.raw_data(), size_t(a.numel()) * sizeof(float)) == 0);
    }
    CHECK(same_on_every_rank(a));
  }
}

TEST_CASE("DataParallel: a rank with no rows of the batch contributes zeros and still takes the step") {
  Generator gen(4), one_gen(4);
  nn::TransformerClassifier model(small_model(), gen), whole(small_model(), one_gen);
  model.to(Dtype::Float64);
  whole.to(Dtype::Float64);
  nn::DataParallel dp(model, world());
  SmallBatch batch = small_batch(1, 9);  // one row: rank 0 has it, the others have none
  Tensor loss = slice_loss(model, gen, batch);  // a [0, T] batch on the others
  loss.backward();
  dp.synchronize_gradients();
  Tensor one_loss = cross_entropy(whole.forward(batch.tokens, batch.padding), batch.labels);
  one_loss.backward();
  std::vector<Tensor> ps = model.parameters(), ones = whole.parameters();
  for (size_t k = 0; k < ps.size(); ++k) {
    INFO("gradient " << k);
    check_close(ps[k].grad(), ones[k].grad(), 1e-12);
  }
  CHECK(gen.offset() == one_gen.offset());
}

TEST_CASE("DataParallel: ranks with different models stop with an error naming the rank") {
  if (world().size() < 2) return;
  Generator gen(1);
  nn::ClassifierConfig config = small_model();
  if (world().rank() == 1) config.ffn_dim = 12;
  nn::TransformerClassifier model(config, gen);
  check_error([&] { nn::DataParallel dp(model, world()); }, "DataParallel: rank 1 has other parameters than rank 0");
  check_error([&] { nn::DataParallel dp(model.parameters(), world(), {world().rank() == 1 ? 4096 : 8192}); },
              "DataParallel: rank 1 has other parameters than rank 0");
  nn::TransformerClassifier same(small_model(), gen);
  check_error([&] { nn::DataParallel dp(same.parameters(), world(), {world().rank() == 1 ? 4096 : 8192}); },
              "DataParallel: rank 1 was given other options than rank 0 (bucket_bytes");
}
