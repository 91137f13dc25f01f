// optim/train/: one GPU's kind of step (train::DeviceStep) for a model that is not the IMDb classifier: a bag of
// embeddings classifying sequences of ids. Through train::Loop, its prefetched steps op by op and replayed as CUDA
// graphs give the plain step's losses and weights bit for bit (the plain step: host arrays uploaded by the ops);
// an id out of its bound is an error naming the array; graphs need an Adam. Run on the CUDA emulator in CI
// (ember_tests_emulated), on a GPU where there is one; skipped otherwise.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/random.h"
#include "nn/module.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "optim/train/batch.h"
#include "optim/train/device_step.h"
#include "optim/train/loop.h"
#include "tests/helpers.h"

using namespace ember;

namespace {

constexpr int64_t kVocab = 11, kDim = 6, kClasses = 3, kBatch = 4;

// logits = mean over the sequence of the ids' embeddings, times a matrix; dropout on the mean (the generator's
// numbers, which a graph's replay must draw as the eager step does).
struct Bag : nn::Module {
  explicit Bag(Generator& init)
      : table(register_parameter("table", randn({kVocab, kDim}, init))),
        out(register_parameter("out", randn({kDim, kClasses}, init))) {}
  Tensor logits(const Tensor& embedded, Generator& gen) const {
    return matmul(dropout(mean(embedded, {1}), 0.2, is_training(), gen), out);
  }
  Tensor table, out;
};

// Step n's batch: ids [4, T] with T 5 on even steps and 3 on odd ones (two shapes, two graphs), its targets [4].
// Made from the step alone (a staged batch must not draw from the run's generator).
train::Batch batch_at(const train::StepAt& at) {
  const int64_t T = at.step % 2 == 0 ? 5 : 3;
  std::vector<int64_t> ids(size_t(kBatch * T)), targets(static_cast<size_t>(kBatch));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t((i * 7 + size_t(at.step) * 3) % kVocab);
  for (size_t r = 0; r < targets.size(); ++r) targets[r] = int64_t((r + size_t(at.step)) % kClasses);
  return {{"ids", from_vector(ids, {kBatch, T})}, {"targets", from_vector(targets, {kBatch})}};
}

const train::Layout kLayout{{"ids", {.id_bound = kVocab, .buckets = true}}, {"targets", {.id_bound = kClasses}}};

struct Run {
  Generator gen{3};
  Bag model{gen};
  optim::AdamW adam{{{model.parameters(), 0.01}}, 0.05};
  train::LoopSettings settings;
  Run() {
    model.to(Device::cuda(0));
    model.train();
    settings.steps = 8;
    settings.steps_per_epoch = 4;
    settings.schedule = optim::Schedule{optim::ScheduleKind::WarmupLinear, 0.05, 2, 8};
    settings.clip = 1.0;
    settings.device = Device::cuda(0);
    settings.generator = &gen;
    settings.quiet = true;
  }
  // The plain step (train::HostStep): the batch's host arrays to the GPU, the ops check and bucket the ids.
  train::LoopResult plain() {
    return train::Loop(model, adam, settings).run(batch_at, [&](const train::Batch& b) {
      return cross_entropy(model.logits(embedding(model.table, b.at("ids")), gen), b.at("targets"));
    });
  }
  train::LoopResult on_device(bool graphs, optim::Optimizer* optimizer = nullptr) {
    optim::Optimizer& opt = optimizer != nullptr ? *optimizer : adam;
    train::DeviceStep step(
        model, opt, gen, Device::cuda(0), [](const train::StepAt& at) { return train::DeviceStepData{batch_at(at)}; },
        [&](const train::DeviceBatch& b) {
          return cross_entropy(model.logits(embedding(model.table, b.ids_at("ids")), gen), b.ids_at("targets"));
        },
        {.layout = kLayout, .capacity = {{"ids", kBatch * 5}, {"targets", kBatch}}, .clip = 1.0, .cuda_graphs = graphs,
         .quiet = true});
    train::LoopResult result = train::Loop(model, opt, settings).run(step);
    replays = step.graph_counts().replays;
    return result;
  }
  int64_t replays = 0;
};

std::vector<float> host(const Tensor& t) { return t.to(Device::cpu()).to_vector<float>(); }

void check_same(Run& a, Run& b) {
  CHECK(host(a.model.table) == host(b.model.table));
  CHECK(host(a.model.out) == host(b.model.out));
  CHECK(a.gen.offset() == b.gen.offset());
}

}  // namespace

CUDA_TEST_CASE("train::DeviceStep: prefetched steps, op by op and as CUDA graphs, equal the plain step bit for bit") {
  Run plain, eager, graphed;
  const train::LoopResult expected = plain.plain();
  const train::LoopResult op_by_op = eager.on_device(/*graphs=*/false);
  const train::LoopResult replayed = graphed.on_device(/*graphs=*/true);
  REQUIRE(expected.step_losses.size() == 8);
  CHECK(op_by_op.step_losses == expected.step_losses);
  CHECK(replayed.step_losses == expected.step_losses);
  check_same(plain, eager);
  check_same(plain, graphed);
  CHECK(graphed.replays == 6);  // two shapes, each captured after its first step
  CHECK(eager.replays == 0);
  CHECK(graphed.adam.step_count() == 8);
}

CUDA_TEST_CASE("train::DeviceStep: an id out of its bound is an error naming the array; graphs need an Adam") {
  Run run;
  auto stage_bad_ids = [&] {
    train::DeviceStep step(
        run.model, run.adam, run.gen, Device::cuda(0),
        [](const train::StepAt& at) {
          train::Batch b = batch_at(at);
          b["ids"] = full({kBatch, 5}, double(kVocab), Dtype::Int64);  // one past the table
          return train::DeviceStepData{b};
        },
        [](const train::DeviceBatch&) { return Tensor(); }, {.layout = kLayout});
    step.stage({});
  };
  testing::check_error(stage_bad_ids, "batch: array 'ids': stage_ids: id 11 at position");
  testing::check_error(stage_bad_ids, "out of range [0, 11)");
  optim::SGD sgd({{run.model.parameters(), 0.0}}, 0.1);
  testing::check_error([&] { run.on_device(/*graphs=*/true, &sgd); }, "CUDA graphs of the step need an Adam optimiser");
}
