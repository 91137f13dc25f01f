// The run folder's lock (flock), its kind, metrics log (nlohmann-json lines) and signal flag.
#include "examples/imdb/run_folder.h"

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
#include <ostream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "core/error.h"
#include "core/file_io.h"

namespace ember::imdb {


namespace {

// The "format" entry of a safetensors file's metadata, read from its header alone (not its tensors: a kind is
// told without reading a checkpoint of gigabytes); empty, with `problem` saying why, when it cannot be read.
std::string recorded_format(const std::string& path, std::string& problem) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (!fs::is_regular_file(path, error)) {
    problem = "not a regular file";
    return "";
  }
  const uintmax_t size = fs::file_size(path, error);
  std::ifstream in(path, std::ios::binary);
  unsigned char length_bytes[8] = {};
  if (error || !in.read(reinterpret_cast<char*>(length_bytes), sizeof length_bytes)) {
    problem = "cannot be read, or is shorter than a safetensors header";
    return "";
  }
  uint64_t length = 0;  // little-endian
  for (int i = 7; i >= 0; --i) length = (length << 8) | length_bytes[i];
  constexpr uint64_t kMaxHeader = uint64_t(100) << 20;  // safetensors' own bound on a header
  if (length > size - sizeof length_bytes || length > kMaxHeader) {
    problem = "its header length is past the file's end";
    return "";
  }
  std::string header(size_t(length), '\0');
  if (!in.read(header.data(), std::streamsize(length))) {
    problem = "its header cannot be read";
    return "";
  }
  const nlohmann::json json = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("__metadata__") || !json["__metadata__"].is_object() ||
      !json["__metadata__"].contains("format") || !json["__metadata__"]["format"].is_string()) {
    problem = "its header has no format in its metadata";
    return "";
  }
  return json["__metadata__"]["format"].get<std::string>();
}

bool starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

}  // namespace

std::vector<RunKindFound> run_kinds_in(const std::string& folder) {
  namespace fs = std::filesystem;
  std::vector<RunKindFound> found;
  auto present = [&](const std::string& name) {  // anything by that name, a dangling link too
    std::error_code error;
    return fs::exists(fs::symlink_status(folder + "/" + name, error));
  };
  auto add = [&](RunKind kind, const std::string& evidence, const std::string& problem = "") {
    for (const RunKindFound& f : found)
      if (f.kind == kind) return;
    found.push_back({kind, evidence, problem});
  };
  if (present("nbsvm.safetensors")) add(RunKind::nbsvm, "nbsvm.safetensors");
  if (present("encoder.safetensors")) add(RunKind::pretraining, "encoder.safetensors");
  if (present("model.safetensors")) add(RunKind::classifier, "model.safetensors");
  if (present("checkpoint.safetensors")) {
    std::string problem;
    const std::string format = recorded_format(folder + "/checkpoint.safetensors", problem);
    if (starts_with(format, "ember-imdb-pretrain-checkpoint")) add(RunKind::pretraining, "checkpoint.safetensors");
    else if (starts_with(format, "ember-imdb-checkpoint")) add(RunKind::classifier, "checkpoint.safetensors");
    else add(RunKind::unknown, "checkpoint.safetensors",
             problem.empty() ? "its format is '" + format.substr(0, 60) + "'" : problem);
  }
  if (present("ensemble.txt")) add(RunKind::ensemble, "ensemble.txt");
  if (present("compare.md")) add(RunKind::comparison, "compare.md");
  return found;
}

std::string run_kind_text(RunKind kind) {
  switch (kind) {
    case RunKind::classifier: return "a classifier's run";
    case RunKind::pretraining: return "a pretraining";
    case RunKind::nbsvm: return "an NBSVM";
    case RunKind::ensemble: return "an ensemble's runs (scripts/imdb_ensemble.sh)";
    case RunKind::comparison: return "a comparison's runs (imdb compare)";
    case RunKind::unknown: break;
  }
  return "a file this program cannot read as a run";
}

void check_run_folder_kind(const std::string& folder, RunKind mine, const std::string& command, bool overwrite,
                           bool resume) {
  if (overwrite) return;
  const std::string this_run = mine == RunKind::classifier    ? "this classifier's run"
                               : mine == RunKind::pretraining ? "this pretraining"
                               : mine == RunKind::comparison  ? "this comparison"
                                                              : "this NBSVM";
  for (const RunKindFound& found : run_kinds_in(folder)) {
    if (found.kind == mine && mine != RunKind::nbsvm) continue;  // a run of its own kind: started over, or --resume
    if (found.kind == RunKind::unknown) {
      if (resume) continue;  // the resume reads the checkpoint and names what is wrong with it
      fail("{}: {} has a {} that is no run this program knows ({}): give {} a folder of its own (another --out), or "
           "add --overwrite to replace it", command, folder, found.evidence, found.problem, this_run);
    }
    EMBER_CHECK(found.kind != RunKind::nbsvm || mine != RunKind::nbsvm, "{}: {}/nbsvm.safetensors exists: a trained "
                "NBSVM is never overwritten unless asked (another --out, or --overwrite to replace it)", command, folder);
    EMBER_CHECK(!resume, "{} --resume: {} holds {} (its {}), not {} to continue", command, folder,
                run_kind_text(found.kind), found.evidence, run_kind_text(mine));
    fail("{}: {} holds {} (its {}): give {} a folder of its own (another --out), or add --overwrite to replace what "
         "is there", command, folder, run_kind_text(found.kind), found.evidence, this_run);
  }
}

const std::vector<std::string>& run_file_names() {
  static const std::vector<std::string> names = {
      "checkpoint.safetensors", "model.safetensors", "encoder.safetensors", "nbsvm.safetensors", "vocab.txt",
      "metrics.jsonl", "report.html", "result.json", "ensemble.txt", "compare.md", "compare.html"};
  return names;
}

void remove_run_files(const std::string& folder) {
  namespace fs = std::filesystem;
  for (const std::string& name : run_file_names()) {
    const std::string path = folder + "/" + name;
    std::error_code error;
    const fs::file_status status = fs::symlink_status(path, error);
    if (!fs::exists(status) || fs::is_directory(status)) continue;  // a folder by that name: the run's write names it
    fs::remove(path, error);  // a link itself, not what it points to
    EMBER_CHECK(!error, "--overwrite: cannot remove '{}': {}", path, error.message());
  }
}

void check_run_files_writable(const std::string& folder, const std::vector<std::string>& names) {
  namespace fs = std::filesystem;
  for (const std::string& name : names) {
    std::error_code error;
    EMBER_CHECK(!fs::is_directory(fs::symlink_status(folder + "/" + name, error)), "{}/{} is a folder: the run could "
                "not write its {} there; remove it, or give another --out", folder, name, name);
  }
}

void check_resume_has_checkpoint(const std::string& path, const std::string& command) {
  namespace fs = std::filesystem;
  std::error_code error;
  EMBER_CHECK(fs::exists(fs::symlink_status(path, error)), "{} --resume: there is no {} to continue from (the run "
              "stopped before its first checkpoint, or this is another folder): run it without --resume to start it",
              command, path);
}

}  // namespace ember::imdb
