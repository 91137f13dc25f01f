// The imdb program's run folders: one kind of run per folder (a classifier's, a pretraining, an NBSVM, ...), told
// apart by the files at their top. The lock, the metrics log and the stop signals every trainer shares are the
// training layer's (optim/train/run_folder.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "optim/train/run_folder.h"

namespace ember::imdb {

// The kinds of folder the imdb program writes, told apart by the files at their top.
enum class RunKind {
  classifier,   // imdb train: model.safetensors, or a checkpoint.safetensors of imdb train
  pretraining,  // imdb pretrain: encoder.safetensors, or a checkpoint.safetensors of imdb pretrain
  nbsvm,        // imdb nbsvm: nbsvm.safetensors
  ensemble,     // scripts/imdb_ensemble.sh: ensemble.txt, beside its members' folders
  comparison,   // imdb compare: compare.md, beside its heads<h>-seed<s> runs
  unknown,      // a checkpoint.safetensors whose format cannot be read (damaged, or not this program's)
};
struct RunKindFound {
  RunKind kind;
  std::string evidence;  // the file that tells, e.g. "encoder.safetensors"
  std::string problem;   // unknown: why its format could not be read
};
// Every kind of run in `folder`, by the files there (none: a new or empty folder, or one holding only a
// vocab.txt or metrics.jsonl, as a run killed before its first checkpoint leaves). Two kinds: a folder mixed up
// before these checks. Never throws: a file that cannot be read is `unknown`.
std::vector<RunKindFound> run_kinds_in(const std::string& folder);
// "a pretraining", "a classifier's run", ...
std::string run_kind_text(RunKind kind);
// For a command about to write a new run of kind `mine` into `folder` (train: classifier, pretrain:
// pretraining, nbsvm: nbsvm, compare: comparison): an ember::Error naming `command`, the folder, what it holds and the ways out,
// if it holds a run of another kind (or, for an NBSVM, any run: nbsvm has no --resume) and not `overwrite`.
// A folder of `unknown` kind is left to a `resume`, whose own checks name the problem.
void check_run_folder_kind(const std::string& folder, RunKind mine, const std::string& command, bool overwrite,
                           bool resume);
// --overwrite, once every check has passed: removes the files a run of any kind leaves at the folder's top
// (run_file_names), so that the new run does not share its folder with the old one's leftovers. Not the lock,
// not subfolders (an ensemble's or a comparison's runs stay). An ember::Error naming a file it cannot remove.
void remove_run_files(const std::string& folder);
// The names remove_run_files removes.
const std::vector<std::string>& run_file_names();
// Before a run writes anything: an ember::Error naming the file if one of `names` in `folder` is a folder, which the
// run's atomic writes cannot replace (the run failed at its first save, after its first epoch or pretraining steps).
void check_run_files_writable(const std::string& folder, const std::vector<std::string>& names);
// --resume: an ember::Error naming `command` and the folder if `path` (its checkpoint) does not exist.
void check_resume_has_checkpoint(const std::string& path, const std::string& command);

}  // namespace ember::imdb
