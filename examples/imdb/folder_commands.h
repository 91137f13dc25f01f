// `imdb check` and `imdb report` for a folder of any kind the program writes (run_folder.h's RunKind): a
// classifier's run, a pretraining, an NBSVM, and the folders of several runs (an ensemble's, a comparison's),
// each read by what its kind holds, so that no kind meets another's format error; and the check that a folder
// given to eval or predict holds a model that classifies.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "examples/imdb/run_folder.h"
#include "examples/imdb/settings.h"

namespace ember::imdb {

// The one kind of run in `folder` (a checkpoint of unknown format counts as the kind of the files beside it, or
// else as a classifier's, whose reader names what is wrong with it). An ember::Error naming `command`: no run
// there, or runs of two kinds (a folder mixed before such writes were refused).
RunKind kind_of_run(const std::string& folder, const std::string& command);

// imdb check: each file of the run loaded and checked as the command that continues or reads it would (a
// classifier's checkpoint as train --resume; a pretraining's checkpoint as pretrain --resume, and its encoder as
// train --init, the checkpoint's model; an NBSVM as eval); a folder of several runs, each of them. Returns the
// lines to print; an ember::Error naming the file and the problem.
std::vector<std::string> check_folder(const std::string& folder);

// imdb report --run: the report.html of each run in the folder written again (a classifier's from its model and
// metrics, a pretraining's from its checkpoint and metrics; an NBSVM has none; a comparison's compare.html from
// its runs heads<h>-seed<seed> of `heads`). `data_config` gives --data and --data-dir. Returns the pages' paths.
std::vector<std::string> rebuild_folder_reports(const std::string& folder, const TrainConfig& data_config,
                                                const std::vector<int64_t>& heads, int64_t seed);

// For eval and predict: an ember::Error naming `folder` and what to give instead if it holds no model that
// classifies (nothing, a pretraining, an ensemble's or a comparison's folder).
void check_classifies(const std::string& folder);

}  // namespace ember::imdb
