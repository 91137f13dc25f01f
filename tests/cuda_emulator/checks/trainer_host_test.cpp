// The IMDb trainer's loop on one GPU (imdb train --device cuda: prefetched batches, replayed step
// graphs, evaluation graphs), run in the emulator's dry mode (counters.h: every call counted, no
// work done, reads give 0): the host waits for the GPU only to log (once per log line, for every
// pending loss at once), to evaluate (once) and to save, never per step. Built into
// ember_tests_emulated only (it reads the emulator's counts).
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "counters.h"
#include "examples/imdb/trainer.h"
#include "tests/imdb_helpers.h"

using namespace ember;

namespace {

struct DryMode {
  DryMode() { ember_emu::set_dry_mode(true); }
  ~DryMode() { ember_emu::set_dry_mode(false); }
};

struct Counted {
  imdb::RunResult result;
  ember_emu::Counts counts;
};

// One epoch on the first `train_reviews` training reviews (the same test reviews each time).
Counted run(const imdb::Data& all, int64_t train_reviews, const std::string& name) {
  imdb::TrainConfig c = testing::tiny_train_config("ember_dry_trainer", name);
  c.epochs = 1;
  c.device = "cuda";
  c.log_every = 1000;  // no log line inside the epoch: its end reads the losses
  imdb::Data data = all;
  data.train_tokens.resize(size_t(train_reviews));
  data.train_labels.resize(size_t(train_reviews));
  ember_emu::reset_counts();
  Counted out;
  out.result = imdb::train_classifier(c, data);
  out.counts = ember_emu::counts();
  return out;
}

}  // namespace

TEST_CASE("emulator dry mode: the trainer's loop waits for the GPU per log line, evaluation and save, not per step") {
  imdb::TrainConfig c = testing::tiny_train_config("ember_dry_trainer", "data");
  const imdb::Data all = imdb::prepare_data(c);
  REQUIRE(all.train_tokens.size() >= 192);
  DryMode dry;
  const Counted six = run(all, 96, "six"), twelve = run(all, 192, "twelve");  // 6 and 12 steps of 16
  INFO("6 steps: " << ember_emu::describe(six.counts));
  INFO("12 steps: " << ember_emu::describe(twelve.counts));
  REQUIRE(six.result.steps == 6);
  REQUIRE(twelve.result.steps == 12);
  CHECK(twelve.result.graph_replays >= 6 + six.result.graph_replays - 2);  // (a padded length new to the longer run)
  // Six more steps, not one more host wait: the steps queue work and never wait for it.
  CHECK(twelve.counts.host_waits.size() == six.counts.host_waits.size());
  CHECK(twelve.counts.pageable_copies == six.counts.pageable_copies);
}
