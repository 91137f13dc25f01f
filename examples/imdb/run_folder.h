// What a training run does to its output folder besides checkpoints: one trainer at a time (a
// lock), the metrics log (metrics.jsonl, JSON lines through nlohmann-json), and stopping cleanly
// on SIGINT / SIGTERM.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace ember::imdb {

// Creates the folder if needed and checks that it is writable (an ember::Error naming it otherwise).
void check_output_folder(const std::string& out);

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

// metrics.jsonl: one JSON object per line, {"kind": "step" | "epoch" | "gpu_memory", ...}.
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

// The last complete "epoch" line of a metrics file (nullopt-like: a discarded value if none).
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

}  // namespace ember::imdb
