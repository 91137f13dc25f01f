// imdb check and imdb report for every kind of folder (folder_commands.h).
#include "examples/imdb/folder_commands.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "core/error.h"
#include "examples/imdb/encoder_file.h"
#include "examples/imdb/nbsvm.h"
#include "examples/imdb/pretrain.h"
#include "examples/imdb/report.h"
#include "examples/imdb/trainer.h"

namespace ember::imdb {

namespace fs = std::filesystem;

namespace {

bool present(const std::string& path) {
  std::error_code error;
  return fs::exists(fs::symlink_status(path, error));
}

// The subfolders of a folder of several runs (an ensemble's, a comparison's) that hold a run, by name.
std::vector<std::string> runs_inside(const std::string& folder) {
  std::vector<std::string> names;
  std::error_code error;
  for (fs::directory_iterator it(folder, error), end; !error && it != end; it.increment(error)) {
    std::error_code kind_error;
    if (it->is_directory(kind_error) && !run_kinds_in(it->path().string()).empty())
      names.push_back(it->path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EMBER_CHECK(!names.empty(), "{} has no run in its subfolders", folder);
  return names;
}

std::string kinds_text(const std::vector<RunKindFound>& kinds) {
  std::string text;
  for (const RunKindFound& found : kinds)
    text += (text.empty() ? "" : "; ") + run_kind_text(found.kind) + ": its " + found.evidence;
  return text;
}

}  // namespace

RunKind kind_of_run(const std::string& folder, const std::string& command) {
  std::vector<RunKindFound> kinds = run_kinds_in(folder);
  if (kinds.size() > 1)  // a checkpoint of unknown format beside another kind's files is that kind's
    kinds.erase(std::remove_if(kinds.begin(), kinds.end(), [](const RunKindFound& f) { return f.kind == RunKind::unknown; }),
                kinds.end());
  EMBER_CHECK(!kinds.empty(), "{}: {} holds no run (no checkpoint.safetensors, model.safetensors, encoder.safetensors "
              "or nbsvm.safetensors, nor the ensemble.txt or compare.md of a folder of runs)", command, folder);
  EMBER_CHECK(kinds.size() == 1, "{}: {} holds more than one kind of run ({}), mixed up before imdb refused to write "
              "one kind of run over another: each kind's files may have replaced the other's; move them apart",
              command, folder, kinds_text(kinds));
  return kinds.front().kind == RunKind::unknown ? RunKind::classifier : kinds.front().kind;
}

std::vector<std::string> check_folder(const std::string& folder) {
  std::vector<std::string> lines;
  switch (kind_of_run(folder, "check")) {
    case RunKind::classifier:
    case RunKind::unknown: {
      const std::string checkpoint = folder + "/checkpoint.safetensors";
      if (present(checkpoint) || !present(folder + "/model.safetensors")) {
        const CheckpointInfo info = check_checkpoint(checkpoint);
        lines.push_back(fmt::format("checkpoint OK: step {} of {} ({})", info.step, info.total_steps, checkpoint));
      } else {
        const SavedRun run = load_run(folder);
        lines.push_back(fmt::format("model OK: {} parameters, vocabulary of {} tokens ({}/model.safetensors; no "
                                    "checkpoint beside it)", run.model->num_parameters(), run.vocabulary.size(), folder));
      }
      break;
    }
    case RunKind::pretraining: {
      const std::string checkpoint = folder + "/checkpoint.safetensors";
      if (present(checkpoint)) {
        const PretrainCheckpoint read = check_pretrain_checkpoint(checkpoint);
        lines.push_back(fmt::format("pretraining checkpoint OK: step {} of {} ({}){}", read.step, read.total_steps,
                                    checkpoint, read.step < read.total_steps ? "; `imdb pretrain --resume` continues it"
                                                                             : ""));
      }
      const PretrainedEncoder encoder = load_encoder(folder, "check");  // against the checkpoint's model too
      lines.push_back(fmt::format("encoder OK: {} ({}/{})",
                                  encoder.step < 0 ? std::string("no checkpoint beside it to give its step")
                                                   : fmt::format("the model of step {} of {}", encoder.step,
                                                                 encoder.total_steps),
                                  folder, kEncoderFile));
      break;
    }
    case RunKind::nbsvm: {
      const NbsvmModel model = load_nbsvm(folder);
      lines.push_back(fmt::format("NBSVM OK: 1-{}-grams in {} buckets, vocabulary of {} tokens ({}/nbsvm.safetensors)",
                                  model.config.order, model.config.buckets, model.vocabulary.size(), folder));
      break;
    }
    case RunKind::ensemble:
    case RunKind::comparison:
      for (const std::string& name : runs_inside(folder))
        for (const std::string& line : check_folder(folder + "/" + name)) lines.push_back(name + ": " + line);
      break;
  }
  return lines;
}

std::vector<std::string> rebuild_folder_reports(const std::string& folder, const TrainConfig& data_config,
                                                const std::vector<int64_t>& heads, int64_t seed) {
  switch (kind_of_run(folder, "report")) {
    case RunKind::classifier:
    case RunKind::unknown:
      return {rebuild_run_report(folder, data_config)};
    case RunKind::pretraining:
      return {rebuild_pretrain_report(folder)};
    case RunKind::nbsvm:
      fail("report: {} is an NBSVM (nbsvm.safetensors): imdb nbsvm writes no report; `imdb eval --run {}` gives its "
           "accuracy", folder, folder);
    case RunKind::comparison:
      return {write_compare_report(folder, heads, seed, data_config)};
    case RunKind::ensemble:
      break;
  }
  std::vector<std::string> pages;  // an ensemble's members that have a report (an NBSVM has none)
  for (const std::string& name : runs_inside(folder))
    if (kind_of_run(folder + "/" + name, "report") != RunKind::nbsvm)
      for (const std::string& page : rebuild_folder_reports(folder + "/" + name, data_config, heads, seed))
        pages.push_back(page);
  return pages;
}

void check_classifies(const std::string& folder) {
  const std::vector<RunKindFound> kinds = run_kinds_in(folder);
  std::error_code error;
  EMBER_CHECK(!kinds.empty(), "{} holds no trained model: no model.safetensors (imdb train) or nbsvm.safetensors (imdb nbsvm){}", folder,
              fs::exists(folder, error) ? "" : " (there is no such folder)");
  for (const RunKindFound& found : kinds)
    if (found.kind == RunKind::classifier || found.kind == RunKind::nbsvm || found.kind == RunKind::unknown) return;
  for (const RunKindFound& found : kinds) {
    EMBER_CHECK(found.kind != RunKind::pretraining, "{} is a pretraining ({}): it predicts masked words, not "
                "sentiment; fine-tune a classifier from it with `imdb train --init {}`", folder, found.evidence, folder);
    EMBER_CHECK(found.kind != RunKind::ensemble, "{} is an ensemble's folder (scripts/imdb_ensemble.sh): give its "
                "members, e.g. --run {}/transformer --run {}/nbsvm", folder, folder, folder);
    EMBER_CHECK(found.kind != RunKind::comparison, "{} is a comparison's folder (imdb compare): give its runs, e.g. "
                "--run {}/heads4-seed0", folder, folder);
  }
}

}  // namespace ember::imdb
