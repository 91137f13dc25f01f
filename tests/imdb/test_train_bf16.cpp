// The IMDb trainer with --precision bf16 on the shipped small data: it learns as the float32 run does,
// and its weights and AdamW state stay float32 (master weights).
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <vector>

#include "core/precision.h"
#include "examples/imdb/trainer.h"
#include "tests/helpers.h"
#include "tests/imdb_helpers.h"

using namespace ember;
using namespace ember::imdb;
using ember::testing::tiny_train_config;

namespace {
double mean_of(const std::vector<double>& v, size_t begin, size_t end) {
  double s = 0;
  for (size_t i = begin; i < end; ++i) s += v[i];
  return s / double(end - begin);
}
}  // namespace

TEST_CASE("train bf16: the small model learns as the float32 one does; weights stay float32") {
  TrainConfig fp32 = tiny_train_config("ember_train_bf16", "fp32");
  TrainConfig bf16 = tiny_train_config("ember_train_bf16", "bf16");
  bf16.precision = "bf16";
  Data data = prepare_data(fp32);
  RunResult a = train_classifier(fp32, data), b = train_classifier(bf16, data);
  CHECK(product_precision() == Precision::Float32);  // the trainer's scope ended with it
  REQUIRE(a.step_losses.size() == b.step_losses.size());
  const size_t n = a.step_losses.size(), per_epoch = n / size_t(fp32.epochs);
  const double first_a = mean_of(a.step_losses, 0, per_epoch), last_a = mean_of(a.step_losses, n - per_epoch, n);
  const double first_b = mean_of(b.step_losses, 0, per_epoch), last_b = mean_of(b.step_losses, n - per_epoch, n);
  INFO("fp32 loss " << first_a << " -> " << last_a << ", bf16 " << first_b << " -> " << last_b);
  CHECK(last_b < first_b - 0.1);                         // it learns
  CHECK(std::abs(last_b - last_a) <= 0.05);              // as float32 does
  CHECK(std::abs(first_b - first_a) <= 0.01);            // the same start: the same weights, products rounded
  CHECK(b.step_losses != a.step_losses);                 // and the products really were bfloat16
  CHECK(b.epochs.back().test_accuracy > 0.5);
  CHECK(std::abs(b.epochs.back().test_accuracy - a.epochs.back().test_accuracy) <= 0.1);
  // Master weights: the saved model's parameters are float32, and so are the checkpoint's moments.
  SavedRun saved = load_run(bf16.out);
  for (const auto& [name, p] : saved.model->named_parameters()) {
    INFO(name);
    CHECK(p.dtype() == Dtype::Float32);
  }
  CHECK(saved.config.precision == "bf16");
}
