// Training progress: a live bar on a terminal, plain log lines otherwise.
#include "examples/imdb/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>

namespace ember::imdb {
namespace {

std::string duration(double seconds) {
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
}

void Progress::update(int64_t step, double loss, double tokens_per_second, double elapsed) {
  if (mode_ == Mode::Silent) return;
  if (first_step_ < 0) first_step_ = step - 1;
  double rate = double(step - first_step_) / std::max(elapsed, 1e-9);  // steps per second this session
  double eta = double(steps_ - step) / std::max(rate, 1e-9);
  if (mode_ == Mode::Bar) {
    constexpr int kWidth = 28;
    int filled = int(kWidth * step / std::max<int64_t>(steps_, 1));
    std::string bar = std::string(size_t(filled), '=') + (filled < kWidth ? ">" : "") +
                      std::string(size_t(std::max(0, kWidth - filled - 1)), ' ');
    fmt::print(stderr, "\r\033[Kepoch {}/{} [{}] {}/{} | loss {:.4f} | {:.0f} tok/s | ETA {}", epoch_, epochs_, bar,
               step, steps_, loss, tokens_per_second, duration(eta));
    std::fflush(stderr);
  } else if (step % log_every_ == 0 || step == steps_) {
    fmt::print(stderr, "epoch {}/{} step {}/{} | loss {:.4f} | {:.0f} tok/s | elapsed {} | ETA {}\n", epoch_, epochs_,
               step, steps_, loss, tokens_per_second, duration(elapsed), duration(eta));
  }
}

void Progress::finish_epoch() {
  if (mode_ == Mode::Bar) fmt::print(stderr, "\n");
}

}  // namespace ember::imdb
