// Run folders of every kind (examples/imdb/run_folder.h, folder_commands.h): each kind told by its files, a run of
// one kind refused in a folder of another (nothing written), --overwrite replacing it (and nothing but the run's
// files), and imdb check / report / eval reading each kind as what it is.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "core/distributed/world.h"
#include "core/file_io.h"
#include "examples/imdb/folder_commands.h"
#include "examples/imdb/nbsvm.h"
#include "examples/imdb/pretrain.h"
#include "examples/imdb/run_folder.h"
#include "examples/imdb/trainer.h"
#include "tests/helpers.h"
#include "tests/imdb_helpers.h"

using namespace ember;
using namespace ember::imdb;
using ember::testing::check_error;
using ember::testing::file_contents;
using ember::testing::folder_files;
namespace fs = std::filesystem;

namespace {

TrainConfig classifier_config(const std::string& name) {
  TrainConfig c = ember::testing::tiny_train_config("ember_run_folder", name);
  c.model.max_len = 32;
  c.vocab_words = 300;
  c.epochs = 1;
  return c;
}

PretrainConfig pretrain_config(const std::string& name) {
  PretrainConfig c;
  c.train = classifier_config(name);
  c.steps = 4;
  return c;
}

NbsvmConfig nbsvm_config(const std::string& name) {
  NbsvmConfig c;
  c.run.data = classifier_config(name).data;
  c.run.out = classifier_config(name).out;
  c.run.quiet = true;
  c.buckets = 1 << 12;
  return c;
}

void pretrain(const PretrainConfig& c) { imdb::pretrain(c, *distributed::make_single_process_group()); }

std::vector<RunKind> kinds(const std::string& folder) {
  std::vector<RunKind> out;
  for (const RunKindFound& found : run_kinds_in(folder)) out.push_back(found.kind);
  return out;
}

// A fresh folder holding a copy of `from`.
std::string copy_of(const std::string& from, const std::string& name) {
  const std::string to = fs::path(from).parent_path().string() + "/" + name;
  fs::remove_all(to);
  fs::copy(from, to, fs::copy_options::recursive);
  return to;
}

// One run of each kind, made once for the cases below (copied before a case changes one).
struct Runs {
  TrainConfig classifier = classifier_config("classifier");
  PretrainConfig pretraining = pretrain_config("pretraining");
  NbsvmConfig nbsvm = nbsvm_config("nbsvm");
  Runs() {
    for (const std::string& out : {classifier.out, pretraining.train.out, nbsvm.run.out}) fs::remove_all(out);
    REQUIRE(train_classifier(classifier).finished);
    pretrain(pretraining);
    train_nbsvm(nbsvm);
  }
};
const Runs& runs() {
  static const Runs made;
  return made;
}

}  // namespace

TEST_CASE("run folders: each kind is told by its files, a checkpoint by its format alone") {
  const Runs& r = runs();
  CHECK(kinds(r.classifier.out) == std::vector<RunKind>{RunKind::classifier});
  CHECK(kinds(r.pretraining.train.out) == std::vector<RunKind>{RunKind::pretraining});
  CHECK(kinds(r.nbsvm.run.out) == std::vector<RunKind>{RunKind::nbsvm});
  const std::string root = fs::path(r.classifier.out).parent_path().string();
  CHECK(kinds(root + "/no-such-folder").empty());
  // A run killed before its first checkpoint leaves vocab.txt and metrics.jsonl: no run to protect.
  const std::string started = root + "/started";
  fs::create_directories(started);
  fs::copy_file(r.classifier.out + "/vocab.txt", started + "/vocab.txt", fs::copy_options::overwrite_existing);
  fs::copy_file(r.classifier.out + "/metrics.jsonl", started + "/metrics.jsonl", fs::copy_options::overwrite_existing);
  CHECK(kinds(started).empty());
  // A checkpoint alone (a run stopped before its model or encoder was written) is told by its format.
  const std::string classifier_checkpoint = copy_of(r.classifier.out, "classifier-checkpoint");
  fs::remove(classifier_checkpoint + "/model.safetensors");
  CHECK(kinds(classifier_checkpoint) == std::vector<RunKind>{RunKind::classifier});
  CHECK(run_kinds_in(classifier_checkpoint).front().evidence == "checkpoint.safetensors");
  const std::string pretraining_checkpoint = copy_of(r.pretraining.train.out, "pretraining-checkpoint");
  fs::remove(pretraining_checkpoint + "/encoder.safetensors");
  CHECK(kinds(pretraining_checkpoint) == std::vector<RunKind>{RunKind::pretraining});
  // A checkpoint of no known format: unknown, with the reason.
  const std::string garbage = copy_of(classifier_checkpoint, "garbage");
  write_file_atomically(garbage + "/checkpoint.safetensors", "not a safetensors file at all");
  REQUIRE(run_kinds_in(garbage).size() == 1);
  CHECK(run_kinds_in(garbage).front().kind == RunKind::unknown);
  CHECK(run_kinds_in(garbage).front().problem == "its header length is past the file's end");
  fs::remove(garbage + "/checkpoint.safetensors");
  fs::create_directory(garbage + "/checkpoint.safetensors");
  CHECK(run_kinds_in(garbage).front().problem == "not a regular file");
  // The folders of several runs.
  const std::string ensemble = root + "/ensemble", comparison = root + "/comparison";
  fs::create_directories(ensemble);
  fs::create_directories(comparison);
  write_file_atomically(ensemble + "/ensemble.txt", "validation accuracy 50.00% on 20 reviews\n");
  write_file_atomically(comparison + "/compare.md", "| heads |\n");
  CHECK(kinds(ensemble) == std::vector<RunKind>{RunKind::ensemble});
  CHECK(kinds(comparison) == std::vector<RunKind>{RunKind::comparison});
  // Two kinds in one folder (mixed up by an earlier build): both found, and the commands that read one refuse.
  const std::string mixed = copy_of(r.classifier.out, "mixed");
  fs::copy_file(r.pretraining.train.out + "/encoder.safetensors", mixed + "/encoder.safetensors");
  CHECK(kinds(mixed) == std::vector<RunKind>{RunKind::pretraining, RunKind::classifier});
  check_error([&] { check_folder(mixed); }, "holds more than one kind of run (a pretraining: its encoder.safetensors; "
                                            "a classifier's run: its model.safetensors)");
  check_error([&] { kind_of_run(started, "report"); }, "report: " + started + " holds no run");
}

TEST_CASE("run folders: a run of one kind into a folder of another is refused before anything is written") {
  const Runs& r = runs();
  const std::string pre = copy_of(r.pretraining.train.out, "refuse-pre"), cls = copy_of(r.classifier.out, "refuse-cls"),
                    nb = copy_of(r.nbsvm.run.out, "refuse-nb");
  const std::string ensemble = fs::path(pre).parent_path().string() + "/refuse-ensemble";
  fs::create_directories(ensemble);
  write_file_atomically(ensemble + "/ensemble.txt", "test accuracy 50.00% on 200 reviews\n");
  auto refused = [&](const std::string& folder, auto&& run, const std::string& fragment) {
    const auto before = folder_files(folder);
    check_error(run, fragment);
    CHECK(folder_files(folder) == before);
  };
  TrainConfig train_into = classifier_config("x");
  PretrainConfig pretrain_into = pretrain_config("x");
  NbsvmConfig nbsvm_into = nbsvm_config("x");
  // The likeliest slip: fine-tuning into the folder of the pretraining it starts from, with or without --overwrite.
  train_into.out = pre;
  train_into.init = pre;
  refused(pre, [&] { train_classifier(train_into); }, "train: --out " + pre + " is the --init folder");
  train_into.overwrite = true;
  refused(pre, [&] { train_classifier(train_into); }, "is the --init folder");
  train_into.overwrite = false;
  train_into.init.clear();
  refused(pre, [&] { train_classifier(train_into); }, "train: " + pre + " holds a pretraining (its encoder.safetensors): give this "
                                           "classifier's run a folder of its own (another --out), or add --overwrite");
  train_into.resume = true;
  refused(pre, [&] { train_classifier(train_into); }, "train --resume: " + pre + " holds a pretraining (its encoder.safetensors), "
                                           "not a classifier's run to continue");
  train_into.resume = false;
  train_into.out = nb;
  refused(nb, [&] { train_classifier(train_into); }, "train: " + nb + " holds an NBSVM (its nbsvm.safetensors)");
  train_into.out = ensemble;
  refused(ensemble, [&] { train_classifier(train_into); }, "holds an ensemble's runs (scripts/imdb_ensemble.sh) (its ensemble.txt)");
  pretrain_into.train.out = cls;
  refused(cls, [&] { pretrain(pretrain_into); }, "pretrain: " + cls + " holds a classifier's run (its model.safetensors): "
                                                 "give this pretraining a folder of its own");
  pretrain_into.train.out = nb;
  refused(nb, [&] { pretrain(pretrain_into); }, "holds an NBSVM");
  nbsvm_into.run.out = cls;
  refused(cls, [&] { train_nbsvm(nbsvm_into); }, "nbsvm: " + cls + " holds a classifier's run (its model.safetensors)");
  nbsvm_into.run.out = pre;
  refused(pre, [&] { train_nbsvm(nbsvm_into); }, "holds a pretraining (its encoder.safetensors)");
  nbsvm_into.run.out = nb;
  refused(nb, [&] { train_nbsvm(nbsvm_into); }, "nbsvm.safetensors exists: a trained NBSVM is never overwritten");
  // A checkpoint this program cannot read is not written over either (a --resume names what is wrong with it).
  const std::string unknown = copy_of(r.classifier.out, "refuse-unknown");
  fs::remove(unknown + "/model.safetensors");
  write_file_atomically(unknown + "/checkpoint.safetensors", std::string(16, '\0'));
  train_into.out = unknown;
  refused(unknown, [&] { train_classifier(train_into); }, "has a checkpoint.safetensors that is no run this program knows");
  train_into.resume = true;
  refused(unknown, [&] { train_classifier(train_into); }, "checkpoint.safetensors");
  // --resume and --overwrite say opposite things.
  train_into.overwrite = true;
  check_error([&] { train_into.validate(); }, "--resume continues the run in the output folder and --overwrite "
                                              "replaces it");
  // A run of the folder's own kind starts over there, as before (train and pretrain).
  TrainConfig again = r.classifier;
  again.out = cls;
  CHECK(train_classifier(again).finished);
  CHECK(file_contents(cls + "/model.safetensors") == file_contents(r.classifier.out + "/model.safetensors"));
}

TEST_CASE("run folders: --overwrite replaces a run of another kind, leaving only the new run's files") {
  const Runs& r = runs();
  // A classifier over a pretraining: the encoder goes (a later --init must not find a stale one there).
  const std::string pre = copy_of(r.pretraining.train.out, "over-pre");
  TrainConfig train_over = r.classifier;
  train_over.out = pre;
  train_over.overwrite = true;
  REQUIRE(train_classifier(train_over).finished);
  CHECK(kinds(pre) == std::vector<RunKind>{RunKind::classifier});
  CHECK_FALSE(fs::exists(pre + "/encoder.safetensors"));
  for (const char* file : {"checkpoint.safetensors", "model.safetensors", "vocab.txt"})  // the run it would be anywhere
    CHECK_MESSAGE(file_contents(pre + "/" + file) == file_contents(r.classifier.out + "/" + file), file);
  // A pretraining over a classifier's run, an NBSVM over a pretraining, an NBSVM over an NBSVM.
  const std::string cls = copy_of(r.classifier.out, "over-cls");
  PretrainConfig pretrain_over = r.pretraining;
  pretrain_over.train.out = cls;
  pretrain_over.train.overwrite = true;
  pretrain(pretrain_over);
  CHECK(kinds(cls) == std::vector<RunKind>{RunKind::pretraining});
  CHECK_FALSE(fs::exists(cls + "/model.safetensors"));
  CHECK(file_contents(cls + "/encoder.safetensors") == file_contents(r.pretraining.train.out + "/encoder.safetensors"));
  NbsvmConfig nbsvm_over = r.nbsvm;
  nbsvm_over.run.overwrite = true;
  nbsvm_over.run.out = cls;
  train_nbsvm(nbsvm_over);
  CHECK(kinds(cls) == std::vector<RunKind>{RunKind::nbsvm});
  CHECK(folder_files(cls) == folder_files(r.nbsvm.run.out));  // nbsvm.safetensors and vocab.txt, nothing else
  train_nbsvm(nbsvm_over);
  CHECK(folder_files(cls) == folder_files(r.nbsvm.run.out));
}

TEST_CASE("run folders: --overwrite removes a run's files only: a link, not what it points to; no other file or folder") {
  const std::string folder = classifier_config("remove").out, elsewhere = classifier_config("elsewhere").out;
  fs::remove_all(folder);
  fs::remove_all(elsewhere);
  fs::create_directories(folder + "/transformer");
  fs::create_directories(elsewhere);
  write_file_atomically(elsewhere + "/model.safetensors", "another run's model");
  fs::create_symlink(elsewhere + "/model.safetensors", folder + "/model.safetensors");
  fs::create_directory(folder + "/metrics.jsonl");  // a folder by a run file's name: left for the run's write to name
  for (const std::string& name : run_file_names())
    if (name != "model.safetensors" && name != "metrics.jsonl") write_file_atomically(folder + "/" + name, name);
  write_file_atomically(folder + "/notes.txt", "mine");
  write_file_atomically(folder + "/transformer/vocab.txt", "a member's");
  remove_run_files(folder);
  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(folder)) left.push_back(entry.path().filename().string());
  std::sort(left.begin(), left.end());
  CHECK(left == std::vector<std::string>{"metrics.jsonl", "notes.txt", "transformer"});
  CHECK(file_contents(elsewhere + "/model.safetensors") == "another run's model");
  CHECK(file_contents(folder + "/transformer/vocab.txt") == "a member's");
}

TEST_CASE("run folders: imdb check, report and eval read each kind as what it is") {
  const Runs& r = runs();
  const std::vector<std::string> classifier = check_folder(r.classifier.out);
  REQUIRE(classifier.size() == 1);
  CHECK(classifier[0] == "checkpoint OK: step 13 of 13 (" + r.classifier.out + "/checkpoint.safetensors)");
  const std::vector<std::string> pretraining = check_folder(r.pretraining.train.out);
  CHECK(pretraining == std::vector<std::string>{
                           "pretraining checkpoint OK: step 4 of 4 (" + r.pretraining.train.out + "/checkpoint.safetensors)",
                           "encoder OK: the model of step 4 of 4 (" + r.pretraining.train.out + "/encoder.safetensors)"});
  const std::vector<std::string> nbsvm = check_folder(r.nbsvm.run.out);
  REQUIRE(nbsvm.size() == 1);
  CHECK(nbsvm[0].rfind("NBSVM OK: 1-3-grams in 4096 buckets, vocabulary of ", 0) == 0);
  // A folder of runs: each of its runs.
  const std::string ensemble = fs::path(r.classifier.out).parent_path().string() + "/check-ensemble";
  fs::remove_all(ensemble);
  fs::create_directories(ensemble);
  fs::copy(r.pretraining.train.out, ensemble + "/pretrain");
  fs::copy(r.classifier.out, ensemble + "/transformer");
  fs::copy(r.nbsvm.run.out, ensemble + "/nbsvm");
  write_file_atomically(ensemble + "/ensemble.txt", "test accuracy 50.00% on 200 reviews\n");
  const std::vector<std::string> members = check_folder(ensemble);
  REQUIRE(members.size() == 4);
  CHECK(members[0].rfind("nbsvm: NBSVM OK", 0) == 0);
  CHECK(members[1].rfind("pretrain: pretraining checkpoint OK: step 4 of 4", 0) == 0);
  CHECK(members[2].rfind("pretrain: encoder OK", 0) == 0);
  CHECK(members[3].rfind("transformer: checkpoint OK: step 13 of 13", 0) == 0);
  // A pretraining's report.html rebuilt is the page the run wrote; an ensemble's are its members' (no NBSVM page).
  const std::string& pre = r.pretraining.train.out;
  const std::string page = file_contents(pre + "/report.html");  // (the page names its folder)
  fs::remove(pre + "/report.html");
  CHECK(rebuild_folder_reports(pre, r.classifier, {4}, 0) == std::vector<std::string>{pre + "/report.html"});
  CHECK(file_contents(pre + "/report.html") == page);
  CHECK(rebuild_folder_reports(ensemble, r.classifier, {4}, 0) ==
        std::vector<std::string>{ensemble + "/pretrain/report.html", ensemble + "/transformer/report.html"});
  check_error([&] { rebuild_folder_reports(r.nbsvm.run.out, r.classifier, {4}, 0); }, "imdb nbsvm writes no report");
  // eval and predict: a folder that classifies nothing says what to give instead.
  CHECK_NOTHROW(check_classifies(r.classifier.out));
  CHECK_NOTHROW(check_classifies(r.nbsvm.run.out));
  check_error([&] { check_classifies(r.pretraining.train.out); }, "is a pretraining (encoder.safetensors): it predicts "
                                                                  "masked words, not sentiment");
  check_error([&] { check_classifies(ensemble); }, "give its members, e.g. --run " + ensemble + "/transformer");
}
