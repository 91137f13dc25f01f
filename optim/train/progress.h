// Training progress: a live bar on a terminal (step/total, loss, tokens/s, ETA), plain log lines otherwise.
//   Progress progress(Progress::detect(), log_every);
//   progress.start_epoch(epoch, epochs, steps);
//   ... progress.update(step_in_epoch, running_loss, tokens_per_second, seconds_since_epoch_start);
//   progress.finish_epoch();
#pragma once
#include <cstdint>

namespace ember::train {

class Progress {
 public:
  enum class Mode { Bar, Lines, Silent };
  static Mode detect();  // Bar when stderr is a terminal, else Lines

  Progress(Mode mode, int64_t log_every) : mode_(mode), log_every_(log_every) {}
  void start_epoch(int64_t epoch, int64_t epochs, int64_t steps);
  // step is 1-based within the epoch; loss is the epoch's running mean; tokens_per_second 0 hides the rate.
  void update(int64_t step, double loss, double tokens_per_second, double elapsed_seconds);
  void finish_epoch();
  // The seconds the rest of the epoch should take, from the steps measured since the epoch's first update:
  // the first update's own steps are left out, since they carry the start's costs (a GPU's first steps
  // capture graphs, warm caches and allocate: on an H200 the first line said "ETA 9m35s" for an epoch of
  // seconds). Negative until two updates have been seen.
  double eta_seconds(int64_t step, double elapsed_seconds) const;

 private:
  Mode mode_;
  int64_t log_every_;
  int64_t epoch_ = 0, epochs_ = 0, steps_ = 0;
  int64_t first_step_ = -1;       // the step of the epoch's first update (a resumed epoch starts mid-way)
  double first_elapsed_ = 0;      // and its elapsed seconds
};

}  // namespace ember::train
