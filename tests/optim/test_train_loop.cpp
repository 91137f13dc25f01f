// optim/train/: the training loop every trainer shares. A least-squares model trained through it: the
// steps it takes (forward, backward, clipping, update, the schedule's rate), an exact resume (a run stopped
// by --stop-after or a signal and resumed ends with the same bits as one never stopped), the run folder
// (lock, metrics, checkpoint checks), evaluations when asked, and the errors.
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/ops.h"
#include "core/random.h"
#include "nn/layers.h"
#include "nn/module.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "optim/train/checkpoint.h"
#include "optim/train/loop.h"
#include "optim/train/progress.h"
#include "tests/helpers.h"

using namespace ember;
using namespace ember::testing;
namespace fs = std::filesystem;

namespace {

struct Line : nn::Module {  // y = x w + b, float64
  Line() : weight(register_parameter("weight", zeros({3, 1}, Dtype::Float64))), bias(register_parameter("bias", zeros({1}, Dtype::Float64))) {}
  Tensor forward(const Tensor& x) const { return matmul(x, weight) + bias; }
  Tensor weight, bias;
};

std::string folder(const std::string& name) {
  const fs::path path = fs::temp_directory_path() / ("ember_loop_" + std::to_string(::getpid())) / name;
  fs::remove_all(path);
  return path.string();
}

// A run of `steps` steps of 4 random points (drawn from the run's generator, so a resume must restore it)
// of y = 1 x0 - 2 x1 + 3 x2 + 0.5.
struct Run {
  Generator gen{7};
  Line model;
  optim::AdamW adam{{{model.parameters(), 0.0}}, 0.1};
  train::LoopSettings settings;
  std::function<void(const train::StepAt&)> on_data;  // a test's hook (a signal, a check)

  explicit Run(int64_t steps, const std::string& out = "") {
    settings.steps = steps;
    settings.steps_per_epoch = 4;
    settings.schedule = optim::Schedule{optim::ScheduleKind::WarmupCosine, 0.1, 2, steps};
    settings.clip = 1.0;
    settings.generator = &gen;
    settings.out = out;
    settings.settings = {{"steps", std::to_string(steps)}};
    settings.quiet = true;
  }
  train::Batch data(const train::StepAt& at) {
    if (on_data) on_data(at);
    Tensor x = rand({4, 3}, gen, Dtype::Float64);
    Tensor y = matmul(x, tensor({1.0, -2.0, 3.0}, {3, 1}, Dtype::Float64)) + 0.5;
    return {{"x", x}, {"y", y}};
  }
  Tensor loss(const train::Batch& b) { return mean(pow(model.forward(b.at("x")) - b.at("y"), 2.0)); }
  train::LoopResult go() {
    train::Loop loop(model, adam, settings);
    return loop.run([this](const train::StepAt& at) { return data(at); },
                    [this](const train::Batch& b) { return loss(b); });
  }
};

void check_same_bits(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  REQUIRE(x.size() == y.size());
  for (size_t i = 0; i < x.size(); ++i) CHECK(x[i] == y[i]);
}

std::string text_of(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("train loop: each step is forward, backward, clip, update at the schedule's rate") {
  Run run(10);
  std::vector<double> rates;
  run.on_data = [&](const train::StepAt&) { rates.push_back(run.adam.lr()); };
  const train::LoopResult r = run.go();
  CHECK(r.finished);
  CHECK(r.steps == 10);
  REQUIRE(r.step_losses.size() == 10);
  REQUIRE(r.epochs.size() == 3);  // 4 + 4 + 2 steps
  CHECK(r.epochs[2].train_loss == doctest::Approx((r.step_losses[8] + r.step_losses[9]) / 2).epsilon(1e-12));
  CHECK(r.step_losses.back() < 0.5 * r.step_losses.front());
  // The rate is set before the step's data is drawn: the schedule's at that step.
  const optim::Schedule schedule{optim::ScheduleKind::WarmupCosine, 0.1, 2, 10};
  for (int64_t s = 0; s < 10; ++s) CHECK(rates[size_t(s)] == schedule.lr_at(s));
  CHECK(run.adam.step_count() == 10);

  // The same steps by hand give the same bits.
  Generator gen(7);
  Line model;
  optim::AdamW adam({{model.parameters(), 0.0}}, 0.1);
  for (int64_t s = 0; s < 10; ++s) {
    adam.set_lr(schedule.lr_at(s));
    Tensor x = rand({4, 3}, gen, Dtype::Float64);
    Tensor y = matmul(x, tensor({1.0, -2.0, 3.0}, {3, 1}, Dtype::Float64)) + 0.5;
    adam.zero_grad();
    Tensor loss = mean(pow(model.forward(x) - y, 2.0));
    loss.backward();
    optim::clip_grad_norm_(model.parameters(), 1.0);
    adam.step();
    CHECK(loss.item<double>() == r.step_losses[size_t(s)]);
  }
  check_same_bits(model.weight, run.model.weight);
  check_same_bits(model.bias, run.model.bias);
}

TEST_CASE("train loop: a run stopped and resumed ends with the bits of one never stopped") {
  Run whole(10, folder("whole"));
  const train::LoopResult all = whole.go();
  REQUIRE(all.finished);

  const std::string out = folder("parts");
  Run first(10, out);
  first.settings.stop_after = 6;  // mid-epoch (epoch 2 of 4-step epochs)
  const train::LoopResult part1 = first.go();
  CHECK_FALSE(part1.finished);
  CHECK(part1.steps == 6);
  Run second(10, out);
  second.settings.resume = true;
  const train::LoopResult part2 = second.go();
  CHECK(part2.finished);
  REQUIRE(part1.step_losses.size() + part2.step_losses.size() == 10);
  for (size_t s = 0; s < 10; ++s)
    CHECK(all.step_losses[s] == (s < 6 ? part1.step_losses[s] : part2.step_losses[s - 6]));
  check_same_bits(whole.model.weight, second.model.weight);
  check_same_bits(whole.model.bias, second.model.bias);
  CHECK(whole.gen.offset() == second.gen.offset());
  // The resumed epoch's mean covers its steps before the stop too.
  CHECK(part2.epochs.front().train_loss == all.epochs[1].train_loss);
  // metrics.jsonl: a "step" line per step, an "epoch" line per epoch, once each.
  const std::string metrics = text_of(out + "/metrics.jsonl");
  size_t steps = 0, epochs = 0;
  for (size_t at = 0; (at = metrics.find("\"kind\":\"step\"", at)) != std::string::npos; ++at) ++steps;
  for (size_t at = 0; (at = metrics.find("\"kind\":\"epoch\"", at)) != std::string::npos; ++at) ++epochs;
  CHECK(steps == 10);
  CHECK(epochs == 3);
  // A finished run's resume trains nothing and changes nothing.
  Run again(10, out);
  again.settings.resume = true;
  const train::LoopResult none = again.go();
  CHECK(none.finished);
  CHECK(none.step_losses.empty());
  check_same_bits(again.model.weight, whole.model.weight);
}

TEST_CASE("train loop: SIGINT or SIGTERM stops it at a step boundary, checkpointed, and a resume continues") {
  const std::string out = folder("signal");
  Run stopped(10, out);
  stopped.on_data = [](const train::StepAt& at) {
    if (at.step == 3) std::raise(SIGTERM);  // during step 3: it finishes, then the run stops
  };
  const train::LoopResult r = stopped.go();
  CHECK(r.stopped_by_signal == SIGTERM);
  CHECK(r.steps == 4);
  CHECK_FALSE(r.finished);
  Run resumed(10, out);
  resumed.settings.resume = true;
  CHECK(resumed.go().finished);
  Run whole(10, folder("signal-whole"));
  whole.go();
  check_same_bits(whole.model.weight, resumed.model.weight);
}

TEST_CASE("train loop: evaluations run in eval mode without a graph, each when the run asks") {
  Run run(8);
  int every = 0, once = 0;
  run.settings.evaluations = {
      {"validation_loss", [&] {
         CHECK_FALSE(run.model.is_training());
         CHECK_FALSE(run.model.forward(ones({1, 3}, Dtype::Float64)).requires_grad());
         return double(++every);
       }},
      {"test_loss", [&] { return double(++once); }, /*every_epoch=*/false}};
  const train::LoopResult r = run.go();
  CHECK(every == 2);  // two epochs of 4
  CHECK(once == 1);   // the test set is read once, at the end
  CHECK(r.epochs[1].evaluations.at("validation_loss") == 2.0);
  CHECK(r.epochs[1].evaluations.count("test_loss") == 0);
  CHECK(r.final_evaluations.at("test_loss") == 1.0);
  CHECK(run.model.is_training());
}

TEST_CASE("train loop: a resume is refused for other settings, a damaged or missing checkpoint, another length") {
  const std::string out = folder("refused");
  Run first(8, out);
  first.settings.stop_after = 2;
  first.go();
  const std::string checkpoint = out + "/checkpoint.safetensors";
  {
    Run other(8, out);
    other.settings.resume = true;
    other.settings.settings["lr"] = "0.5";
    check_error([&] { other.go(); }, "was written with other settings: lr is missing there but 0.5 here");
  }
  {
    Run longer(9, out);
    longer.settings.resume = true;
    check_error([&] { longer.go(); }, "steps is 8 there but 9 here");
  }
  {
    Run longer(9, out);
    longer.settings.resume = true;
    longer.settings.settings = {};
    check_error([&] { longer.go(); }, "is of a run of 8 steps, these settings make 9");
  }
  // One bit of a weight flipped: the checksum finds it.
  std::string bytes = text_of(checkpoint);
  bytes[bytes.size() - 3] = char(bytes[bytes.size() - 3] ^ 1);
  const std::string damaged = folder("damaged");
  fs::create_directories(damaged);
  std::ofstream(damaged + "/checkpoint.safetensors", std::ios::binary) << bytes;
  {
    Run resumed(8, damaged);
    resumed.settings.resume = true;
    check_error([&] { resumed.go(); }, "differ from the checksum it was written with");
  }
  {
    Run resumed(8, folder("empty"));
    resumed.settings.resume = true;
    check_error([&] { resumed.go(); }, "there is no");
  }
  {  // A file of another kind.
    const std::string foreign = folder("foreign");
    fs::create_directories(foreign);
    Line line;
    nn::save_tensors(foreign + "/checkpoint.safetensors", line.state_dict(), {{"format", "something-else"}});
    Run resumed(8, foreign);
    resumed.settings.resume = true;
    check_error([&] { resumed.go(); }, "has format 'something-else', not ember-train-checkpoint-v1");
  }
}

TEST_CASE("train loop: one trainer per folder, a diverged loss named, bad settings and losses refused") {
  const std::string out = folder("locked");
  Run holder(4, out);
  train::Loop held(holder.model, holder.adam, holder.settings);
  Run second(4, out);
  check_error([&] { second.go(); }, "another trainer is using the output folder");

  Run diverging(6, folder("nan"));
  diverging.settings.stop_after = 0;
  Run* d = &diverging;
  train::Loop loop(d->model, d->adam, d->settings);
  check_error([&] {
    loop.run([&](const train::StepAt& at) { return d->data(at); },
             [&](const train::Batch& b) { return d->loss(b) * (b.empty() ? 1.0 : NAN); });
  }, "training diverged: the loss at step 1 (epoch 1) is nan");

  Run scalar(2);
  train::Loop not_scalar(scalar.model, scalar.adam, scalar.settings);
  check_error([&] {
    not_scalar.run([&](const train::StepAt& at) { return scalar.data(at); },
                   [&](const train::Batch& b) { return scalar.model.forward(b.at("x")); });
  }, "the loss must be a scalar that requires grad");

  // A new run into a folder holding a checkpoint (its own earlier run's, or another program's) writes nothing.
  const std::string taken = folder("taken");
  Run earlier(2, taken);
  earlier.go();
  const std::string before = text_of(taken + "/checkpoint.safetensors");
  Run over(2, taken);
  check_error([&] { over.go(); }, "holds a checkpoint already");
  CHECK(text_of(taken + "/checkpoint.safetensors") == before);

  Run bad(0);
  check_error([&] { bad.go(); }, "steps must be at least 1");
  Run no_folder(2);
  no_folder.settings.resume = true;
  check_error([&] { no_folder.go(); }, "a resume needs the run folder");
}

TEST_CASE("train loop: the progress ETA leaves out the first update's steps (a GPU's warm-up)") {
  train::Progress progress(train::Progress::Mode::Silent, 10);
  progress.start_epoch(1, 1, 100);
  CHECK(progress.eta_seconds(10, 60.0) < 0);  // nothing measured yet
  train::Progress lines(train::Progress::Mode::Lines, 10);
  lines.start_epoch(1, 1, 100);
  lines.update(10, 1.0, 0, 60.0);  // the first 10 steps took a minute: capture, allocation
  CHECK(lines.eta_seconds(10, 60.0) < 0);
  // The next 10 took one second: 80 steps left take 8 s (not 80 / (20 / 61) = 244 s).
  CHECK(lines.eta_seconds(20, 61.0) == doctest::Approx(8.0));
}
