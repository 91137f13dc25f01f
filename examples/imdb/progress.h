// Training progress: a live bar on a terminal (step/total, loss, tokens/s, ETA), plain log lines otherwise.
#pragma once
#include <cstdint>

namespace ember::imdb {

class Progress {
 public:
  enum class Mode { Bar, Lines, Silent };
  static Mode detect();  // Bar when stderr is a terminal, else Lines

  Progress(Mode mode, int64_t log_every) : mode_(mode), log_every_(log_every) {}
  void start_epoch(int64_t epoch, int64_t epochs, int64_t steps);
  // step is 1-based within the epoch; loss is the epoch's running mean.
  void update(int64_t step, double loss, double tokens_per_second, double elapsed_seconds);
  void finish_epoch();

 private:
  Mode mode_;
  int64_t log_every_;
  int64_t epoch_ = 0, epochs_ = 0, steps_ = 0;
  int64_t first_step_ = -1;  // first step seen this epoch (a resumed epoch starts mid-way)
};

}  // namespace ember::imdb
