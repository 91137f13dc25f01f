// docs/training.md's worked example, compiled and run by CI: a model's training is its data and its loss;
// train::Loop does the rest. Trains a line in a run folder, stops it half-way, resumes it, and checks that the
// line was learnt (exit 1 otherwise).
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/random.h"
#include "nn/module.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "optim/train/loop.h"

using namespace ember;

struct Line : nn::Module {  // y = x w + b
  Line() : weight(register_parameter("weight", zeros({3, 1}))), bias(register_parameter("bias", zeros({1}))) {}
  Tensor forward(const Tensor& x) const { return matmul(x, weight) + bias; }
  Tensor weight, bias;
};

// Trains (or, with resume, continues) the line in `out`, stopping after `stop_after` steps when > 0.
train::LoopResult train_line(Line& model, const std::string& out, int64_t stop_after, bool resume) {
  Generator gen(7);
  optim::AdamW adam({{model.parameters(), 0.0}}, 0.1);
  train::LoopSettings settings;
  settings.steps = 400;
  settings.schedule = optim::Schedule{optim::ScheduleKind::WarmupCosine, 0.1, 20, 400};
  settings.clip = 1.0;
  settings.generator = &gen;   // the data draws from it: a checkpoint keeps its place
  settings.out = out;          // lock, metrics.jsonl, checkpoint.safetensors
  settings.stop_after = stop_after;
  settings.resume = resume;
  settings.quiet = true;
  train::Loop loop(model, adam, settings);

  // The data: named host arrays for step `at`.
  auto data = [&](const train::StepAt&) {
    Tensor x = rand({32, 3}, gen);
    return train::Batch{{"x", x}, {"y", matmul(x, tensor({1.0f, -2.0f, 3.0f}, {3, 1})) + 0.5}};
  };
  // The loss: a scalar on the batch (on the step's device).
  auto loss = [&](const train::Batch& b) { return mean(pow(model.forward(b.at("x")) - b.at("y"), 2.0)); };
  return loop.run(data, loss);
}

int main() {
  const std::string out = (std::filesystem::temp_directory_path() / ("ember_line_" + std::to_string(getpid()))).string();
  std::filesystem::remove_all(out);
  Line first, second;
  const train::LoopResult stopped = train_line(first, out, 250, false);    // stops after step 250, checkpointed
  const train::LoopResult resumed = train_line(second, out, 0, true);      // a new process would do the same
  const std::vector<float> w = second.weight.to_vector<float>();
  const float b = second.bias.item<float>();
  std::printf("stopped at step %lld, resumed to %lld: w = [%.3f, %.3f, %.3f], b = %.3f, last loss %.2g\n",
              (long long)stopped.steps, (long long)resumed.steps, w[0], w[1], w[2], b, resumed.step_losses.back());
  std::filesystem::remove_all(out);
  const bool learnt = std::abs(w[0] - 1) < 0.05 && std::abs(w[1] + 2) < 0.05 && std::abs(w[2] - 3) < 0.05 &&
                      std::abs(b - 0.5f) < 0.05 && resumed.finished;
  return learnt ? 0 : 1;
}
