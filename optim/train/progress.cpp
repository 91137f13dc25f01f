// Training progress: a live bar on a terminal, plain log lines otherwise.
#include "optim/train/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>

namespace ember::train {
namespace {

std::string duration(double seconds) {
  if (seconds < 0) return "--";  // not measured yet
  int64_t s = int64_t(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s / 60) % 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

}  // namespace

Progress::Mode Progress::detect() { return isatty(fileno(stderr)) ? Mode::Bar : Mode::Lines; }

void Progress::start_epoch(int64_t epoch, int64_t epochs, int64_t steps) {
  epoch_ = epoch;
  epochs_ = epochs;
  steps_ = steps;
  first_step_ = -1;
  first_elapsed_ = 0;
}

double Progress::eta_seconds(int64_t step, double elapsed) const {
  if (first_step_ < 0 || step <= first_step_ || elapsed <= first_elapsed_) return -1;
  const double rate = double(step - first_step_) / (elapsed - first_elapsed_);  // steps per second, warm
  return double(steps_ - step) / rate;
}

void Progress::update(int64_t step, double loss, double tokens_per_second, double elapsed) {
  if (mode_ == Mode::Silent) return;
  if (first_step_ < 0) first_step_ = step, first_elapsed_ = elapsed;
  const double eta = step == steps_ ? 0.0 : eta_seconds(step, elapsed);
  const std::string rate = tokens_per_second > 0 ? fmt::format(" | {:.0f} tok/s", tokens_per_second) : std::string();
  if (mode_ == Mode::Bar) {
    constexpr int kWidth = 28;
    int filled = int(kWidth * step / std::max<int64_t>(steps_, 1));
    std::string bar = std::string(size_t(filled), '=') + (filled < kWidth ? ">" : "") +
                      std::string(size_t(std::max(0, kWidth - filled - 1)), ' ');
    fmt::print(stderr, "\r\033[Kepoch {}/{} [{}] {}/{} | loss {:.4f}{} | ETA {}", epoch_, epochs_, bar, step, steps_,
               loss, rate, duration(eta));
    std::fflush(stderr);
  } else if (step % log_every_ == 0 || step == steps_) {
    fmt::print(stderr, "epoch {}/{} step {}/{} | loss {:.4f}{} | elapsed {} | ETA {}\n", epoch_, epochs_, step, steps_,
               loss, rate, duration(elapsed), duration(eta));
  }
}

void Progress::finish_epoch() {
  if (mode_ == Mode::Bar) fmt::print(stderr, "\n");
}

}  // namespace ember::train
