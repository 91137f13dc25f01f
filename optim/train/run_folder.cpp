// A run folder's machinery that every trainer shares: the folder checked writable, one trainer at a time (a lock),
// the metrics log (metrics.jsonl) kept in step with the checkpoint on a resume, and SIGINT / SIGTERM turned into a
// clean stop at a step boundary.
#include "optim/train/run_folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ios>
#include <ostream>
#include <sstream>
#include <string>
#include <system_error>

#include "core/error.h"
#include "core/file_io.h"

namespace ember::train {

void check_output_folder(const std::string& out) {
  namespace fs = std::filesystem;
  std::error_code error;
  fs::create_directories(out, error);
  EMBER_CHECK(!error, "cannot create output folder '{}': {}", out, error.message());
  std::string probe = out + "/.ember-write-test";
  {
    std::ofstream f(probe);
    EMBER_CHECK(f.good(), "output folder '{}' is not writable", out);
  }
  fs::remove(probe, error);
}

bool run_in_progress(const std::string& folder) {
  const std::string path = folder + "/.lock";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;  // no lock file: no trainer has run there
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);  // (releases the shared lock, if it was taken)
  return held;
}

RunLock::RunLock(const std::string& folder) {
  const std::string path = folder + "/.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  EMBER_CHECK(fd_ >= 0, "cannot open the lock file '{}': {}", path, std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    ::close(fd_);
    fd_ = -1;
    EMBER_CHECK(error != EWOULDBLOCK, "another trainer is using the output folder '{}' (it holds '{}'); wait for it "
                "to finish or give another --out", folder, path);
    fail("cannot lock '{}': {}", path, std::strerror(error));
  }
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the lock
}

namespace {

// The complete lines of a metrics file whose "step" is at most `step`; a line without a step (an
// epoch's "gpu_memory", written right after its "epoch" line) goes with the line before it (it was
// dropped: a GPU run resumed after epoch 1 had no memory line for it).
std::string lines_up_to(const std::string& path, int64_t step) {
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return "";
  std::string text = read_whole_file(path, "metrics file");
  std::string kept;
  bool kept_last = false;  // whether the line before was kept
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    if (end == std::string::npos) break;  // the last line has no newline: cut off by a crash
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_discarded() || !record.is_object()) {
      kept_last = false;
      continue;
    }
    if (!record.contains("step")) {
      if (kept_last) kept += line + "\n";
      continue;
    }
    kept_last = record["step"].is_number_integer() && record["step"].get<int64_t>() <= step;
    if (kept_last) kept += line + "\n";
  }
  return kept;
}

}  // namespace

MetricsLog::MetricsLog(const std::string& path, bool resume, int64_t checkpoint_step) : path_(path) {
  write_file_atomically(path, resume ? lines_up_to(path, checkpoint_step) : std::string());
  out_.open(path, std::ios::app);
  EMBER_CHECK(out_.good(), "cannot write '{}'", path);
}

void MetricsLog::write(const nlohmann::ordered_json& record) {
  const std::string line = record.dump() + '\n';
  if (fault_pause_armed("metrics.jsonl")) {  // the kill tests' kill mid-line (core/file_io.h)
    out_ << line.substr(0, line.size() / 2) << std::flush;
    fault_pause("metrics.jsonl");
    out_ << line.substr(line.size() / 2);
    return;
  }
  out_ << line;
}

void MetricsLog::flush() {
  out_.flush();
  EMBER_CHECK(out_.good(), "cannot write '{}' (disk full?)", path_);
}

nlohmann::json last_epoch_record(const std::string& metrics_path) {
  nlohmann::json last(nlohmann::json::value_t::discarded);
  std::error_code error;
  if (!std::filesystem::is_regular_file(metrics_path, error)) return last;
  std::istringstream lines(read_whole_file(metrics_path, "metrics file"));
  std::string line;
  while (std::getline(lines, line)) {
    nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_object() && record.value("kind", "") == "epoch") last = record;
  }
  return last;
}

namespace {

std::atomic<int> stop_signal{0};
extern "C" void on_stop_signal(int signal) { stop_signal.store(signal); }

struct sigaction previous_int, previous_term;

}  // namespace

StopSignals::StopSignals() {
  stop_signal.store(0);
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // reads and writes go on; the loop looks at the flag between steps
  sigaction(SIGINT, &action, &previous_int);
  sigaction(SIGTERM, &action, &previous_term);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &previous_int, nullptr);
  sigaction(SIGTERM, &previous_term, nullptr);
}

int StopSignals::received() { return stop_signal.load(); }
RunFolder::RunFolder(const std::string& out, distributed::ProcessGroup* world)
    : path_(out), lead_(world == nullptr || world->rank() == 0) {
  if (!lead_) return;
  check_output_folder(out);
  lock_.emplace(out);
}

void RunFolder::open_metrics(bool resume, int64_t checkpoint_step) {
  if (lead_) metrics_.emplace(path_ + "/metrics.jsonl", resume, checkpoint_step);
}

}  // namespace ember::train
