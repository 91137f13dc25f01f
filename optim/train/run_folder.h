// A run folder's machinery that every trainer shares (train::Loop uses it; a program may too):
//   check_output_folder(out);                       // made if needed, and checked writable
//   RunLock lock(out);                               // one trainer at a time in out/ (out/.lock)
//   MetricsLog metrics(out + "/metrics.jsonl", resume, checkpoint_step);
//   StopSignals signals;                             // SIGINT / SIGTERM: stop at the next step boundary
//   ... metrics.write({{"kind", "step"}, {"step", s}, {"loss", l}}); if (StopSignals::received()) ...
#pragma once
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/distributed/process_group.h"

namespace ember::train {

// Creates the folder if needed and checks that it is writable (an ember::Error naming it otherwise).
void check_output_folder(const std::string& out);

// True while a trainer holds folder/.lock (a run in progress there, whose files may change while they are read).
bool run_in_progress(const std::string& folder);

// An exclusive lock on folder/.lock (flock), held while the object lives. A second trainer on
// the same folder gets an ember::Error at once, naming the folder; the lock goes with the process,
// so a killed trainer never leaves a stale one.
class RunLock {
 public:
  explicit RunLock(const std::string& folder);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  int fd_ = -1;
};

// metrics.jsonl: one JSON object per line, {"kind": "step" | "epoch" | ..., ...}.
class MetricsLog {
 public:
  // A new run truncates the file. A resumed one keeps only the complete lines whose "step" the
  // checkpoint at `checkpoint_step` covers (a killed run may have logged steps it never
  // checkpointed, or part of a line), then appends.
  MetricsLog(const std::string& path, bool resume, int64_t checkpoint_step);
  void write(const nlohmann::ordered_json& record);
  // Pushes the lines to the file; an ember::Error if any write failed (e.g. a full disk).
  void flush();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

// The last complete "epoch" line of a metrics file (a discarded value if none).
nlohmann::json last_epoch_record(const std::string& metrics_path);

// While an object lives, SIGINT and SIGTERM only set a flag (the loop checkpoints at the next
// step boundary and stops); the previous handlers come back when it goes.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  // The signal received (SIGINT or SIGTERM), or 0.
  static int received();
};

// A run folder as train::Loop uses it: made and locked by rank 0 at once, SIGINT / SIGTERM caught on every rank, the
// metrics log opened when the run starts (after the program's own checks and resume). The loop makes one for
// its `out`; a program that checks things under the lock before it builds its model makes it first and gives it
// to the loop (LoopSettings::folder).
class RunFolder {
 public:
  explicit RunFolder(const std::string& out, distributed::ProcessGroup* world = nullptr);
  const std::string& path() const { return path_; }
  bool lead() const { return lead_; }  // rank 0 (or one process): the one that writes
  // Rank 0: opens out/metrics.jsonl (MetricsLog: a resume keeps the lines its checkpoint covers).
  void open_metrics(bool resume, int64_t checkpoint_step);
  MetricsLog* metrics() { return metrics_ ? &*metrics_ : nullptr; }  // rank 0, once opened

 private:
  std::string path_;
  bool lead_;
  std::optional<RunLock> lock_;
  StopSignals signals_;
  std::optional<MetricsLog> metrics_;
};

}  // namespace ember::train
