// imdb: train, evaluate, use and compare Transformer sentiment classifiers on IMDb.
//   imdb train [flags]       imdb eval --run DIR...    imdb predict --run DIR... (--text T | --file F)
//   imdb compare [flags]     imdb report (--run DIR | --compare DIR)     imdb check --run DIR
//   imdb flops [flags]       (the model FLOPs of a training step, and MFU for a throughput)
//   imdb pretrain [flags]    (masked-token pretraining of the encoder; then imdb train --init DIR)
//   imdb nbsvm [flags]       (NBSVM: a linear model over naive-Bayes-scaled word n-grams; examples/imdb/nbsvm.h)
//   (several --run: an ensemble, the mean of the runs' probabilities; examples/imdb/ensemble.h)
// The flags are one table per command (CLI11, Debian's libcli11-dev): it parses them, checks each
// number in full against its range (settings.h), and writes --help. The training flags are made
// from the settings' rows (training_flags.h, setting_table.h).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cstddef>
#include <csignal>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "core/distributed/agreement.h"
#include "core/distributed/world.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/parallel.h"
#include "core/precision.h"
#include "examples/imdb/compare.h"
#include "examples/imdb/ensemble.h"
#include "examples/imdb/folder_commands.h"
#include "examples/imdb/nbsvm.h"
#include "examples/imdb/presets.h"
#include "examples/imdb/pretrain.h"
#include "examples/imdb/report.h"
#include "examples/imdb/trainer.h"
#include "examples/imdb/training_flags.h"
#include "examples/imdb/truncation.h"
#include "nn/model_flops.h"

using namespace ember;
using namespace ember::imdb;

namespace {

struct UsageError : Error {
  using Error::Error;
};

// Runs fn(world) in the group of every process of the job (one process, or mpirun's ranks). An
// error on one rank ends every rank at once (MPI_Abort): the others would wait for it for ever.
// An error every rank raised together (different settings, a bad checkpoint) is reported by rank 0.
template <typename Fn>
int in_world(double timeout_seconds, Fn&& fn) {
  std::unique_ptr<distributed::ProcessGroup> world = distributed::init_world(timeout_seconds);
  try {
    return fn(*world);
  } catch (const distributed::AgreedError&) {
    if (world->rank() == 0) throw;
    // Status 0, so that mpirun does not end the job (rank 0 with it) before rank 0 has reported the error; the
    // job's status is rank 0's, 1 (a rank returning 1 here first made mpirun kill rank 0 unreported, now and then).
    return 0;
  } catch (const std::exception& e) {
    if (world->size() > 1)
      world->abort_job(fmt::format("error (rank {} of {}): {}\nending every rank of the job", world->rank(),
                                   world->size(), e.what()), 1);
    throw;
  }
}

// --data and --data-dir for the commands that read the test reviews of a saved run.
void add_data_flags(CLI::App& app, TrainConfig& c) {
  app.add_option("--data", c.data, "reviews.json or an aclImdb folder (default: the download cache)");
  app.add_option("--data-dir", c.data_dir, "download cache (default: $EMBER_DATA or ./data)");
}

void check_training_config(const TrainConfig& c) {
  if (c.resume && c.overwrite)
    throw UsageError("--resume continues the run in --out and --overwrite replaces it: give one of them");
  if (c.model.dim % c.model.heads != 0)
    throw UsageError(fmt::format("--dim {} is not divisible by --heads {}", c.model.dim, c.model.heads));
  if (c.model.attention_window > c.model.max_len || c.model.attention_global > c.model.max_len)
    throw UsageError(fmt::format("--attention {}: the window and the global tokens must fit in --max-len {}",
                                 attention_text({c.model.attention_window, c.model.attention_global}), c.model.max_len));
  try {
    Device::parse(c.device);
  } catch (const Error& e) {
    throw UsageError(fmt::format("--device: {}", e.what()));
  }
}

// An option's value may not look like a flag: `--out --resume` is a missing value, not a folder
// named "--resume". (CLI11 would take it.) Nor may a path be empty: `--init ""` (a variable that was not set)
// trained from scratch without a word, and `--run ""` read "/model.safetensors".
void check_no_flag_values(const CLI::App& app) {
  static const std::vector<std::string> paths = {"--out", "--init", "--data", "--data-dir", "--run", "--compare", "--file"};
  for (const CLI::App* command : app.get_subcommands()) {
    for (const CLI::Option* option : command->get_options()) {
      if (option->get_type_size() == 0) continue;  // a switch
      for (const std::string& value : option->results()) {
        if (value.rfind("--", 0) == 0)
          throw UsageError(fmt::format("{} needs a value, got the flag '{}'", option->get_name(), value));
        if (value.empty() && std::find(paths.begin(), paths.end(), option->get_name()) != paths.end())
          throw UsageError(fmt::format("{} needs a path, got an empty one", option->get_name()));
      }
    }
  }
}

// Checks the words of a command line that CLI11 would misread, before it parses them. `args` is
// the command and its words (args[0] "train", ...), `command` its flag table.
// - A long option with one dash: CLI11 reads "-heads" as the switches -h -e -a ..., and -h is
//   --help (`imdb train -heads 4` printed the help and trained nothing). A word that is the value
//   of the option before it ("--text -awful-") is left alone; so are numbers ("-1").
// - An empty item in a comma-separated list ("--heads-list 2," was read as 2).
void check_words(const CLI::App& command, const std::vector<std::string>& args) {
  auto option_of = [&](const std::string& word) -> const CLI::Option* {
    if (word.rfind("--", 0) != 0) return nullptr;
    return command.get_option_no_throw(word.substr(0, word.find('=')));
  };
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& word = args[i];
    if (word == "--") break;
    const CLI::Option* previous = i > 1 ? option_of(args[i - 1]) : nullptr;
    const bool is_value = previous != nullptr && previous->get_type_size() != 0 &&
                          args[i - 1].find('=') == std::string::npos;
    if (!is_value && word.size() > 2 && word[0] == '-' && std::isalpha(static_cast<unsigned char>(word[1]))) {
      const std::string name = word.substr(1, word.find('=') - 1);
      const bool known = command.get_option_no_throw("--" + name) != nullptr;
      throw UsageError(fmt::format("'{}' is not an option of imdb {}: long options take two dashes{}", word.substr(0, 40),
                                   args[0], known ? fmt::format(" (did you mean --{}?)", name) : std::string()));
    }
    // A list option's value: "--heads-list 2,4" or "--heads-list=2,4".
    const CLI::Option* list = option_of(word);
    if (list == nullptr || list->get_delimiter() == '\0') continue;
    std::string value;
    if (word.find('=') != std::string::npos) value = word.substr(word.find('=') + 1);
    else if (i + 1 < args.size()) value = args[i + 1];
    else continue;  // no value: CLI11 says so
    const std::string items = std::string(1, list->get_delimiter()) + value + std::string(1, list->get_delimiter());
    if (value.empty() || items.find(std::string(2, list->get_delimiter())) != std::string::npos)
      throw UsageError(fmt::format("{}: an empty item in '{}' (a comma-separated list has no empty items)",
                                   list->get_name(), value.substr(0, 40)));
  }
}

int run(int argc, char** argv) {
  CLI::App app{"imdb: train, evaluate, use and compare Transformer sentiment classifiers on IMDb"};
  app.require_subcommand(1);
  // A flag given twice keeps its last value (a script can append overrides to a command line).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.get_formatter()->column_width(34);

  TrainConfig train_config;
  CLI::App* train_command = app.add_subcommand(
      "train", "train a classifier (the reference recipe by default), report test accuracy per epoch, and write "
               "report.html");
  add_training_flags(*train_command, train_config, "runs/imdb");

  PretrainConfig pretrain_config;
  CLI::App* pretrain_command = app.add_subcommand(
      "pretrain", "masked-token pretraining of the classifier's encoder on the training reviews' text (whole "
                  "reviews, in windows of --max-len tokens); fine-tune it with train --init OUT");
  add_training_flags(*pretrain_command, pretrain_config.train, "runs/pretrain");
  integer_option(*pretrain_command, "--steps", pretrain_config.steps, 0, limits::max_reviews,
                 "steps of the run (the schedule's length); 0: --epochs over the windows");

  CompareConfig compare_config;
  std::vector<int64_t> heads_list{1, 4, 8};
  CLI::App* compare_command =
      app.add_subcommand("compare", "train heads 1, 4, 8 over several seeds; write a Markdown table and compare.html");
  add_training_flags(*compare_command, compare_config.base, "runs/compare");
  compare_command->add_option("--heads-list", heads_list, "comma-separated head counts")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->transform(integer_in(1, limits::max_heads))
      ->capture_default_str();
  integer_option(*compare_command, "--seeds", compare_config.seeds, 1, 1000, "seeds 0..N-1 per head count");

  // NBSVM's flags: the setting rows of the data and the loop it reads (a Transformer's would be ignored, so it has
  // none of them), and its own.
  NbsvmConfig nbsvm_config;
  TrainConfig& nb = nbsvm_config.run;
  CLI::App* nbsvm_command = app.add_subcommand(
      "nbsvm", "train NBSVM (Wang and Manning, 2012): logistic regression over each review's word 1-3-grams scaled by "
               "their naive-Bayes log-count ratios; an ensemble member beside a Transformer (docs/imdb.md)");
  add_setting_flags(*nbsvm_command, nb, {"data", "data_dir", "out", "overwrite", "limit", "validation", "vocab_words",
                                         "max_len", "truncate", "seed", "threads", "epochs", "lr", "batch_size", "quiet"});
  // What those rows mean here, where the Transformer's help would mislead.
  nbsvm_command->get_option("--out")->description("output folder (nbsvm.safetensors, vocab.txt)");
  nbsvm_command->get_option("--validation")
      ->description("hold out N training reviews (the same ones as imdb train's), evaluated each epoch; the test "
                    "reviews are then not evaluated");
  nbsvm_command->get_option("--seed")->description("the batches' order");
  nbsvm_command->get_option("--lr")->description("Adam's peak learning rate (decays linearly to zero)");
  integer_option(*nbsvm_command, "--ngrams", nbsvm_config.order, 1, 8, "word n-grams for n = 1 .. N");
  integer_option(*nbsvm_command, "--buckets", nbsvm_config.buckets, 1, limits::max_bigram_buckets, "hashed n-gram ids");
  real_option(*nbsvm_command, "--alpha", nbsvm_config.alpha, 1e-9, 1e9, "naive Bayes' smoothing count");
  real_option(*nbsvm_command, "--l2", nbsvm_config.l2, 0.0, 1e3, "lambda of the penalty lambda / 2 * |w|^2");

  std::string run_folder = "runs/imdb", compare_folder, text, file;
  int threads = 0;
  int64_t report_seed = 0;
  TrainConfig data_config;

  std::vector<std::string> runs = {"runs/imdb"};
  std::string split = "test";
  CLI::App* eval_command = app.add_subcommand("eval", "accuracy of a trained run (or an ensemble) on all test reviews");
  eval_command
      ->add_option("--run", runs,
                   "a train output folder; several (--run A --run B ...): their ensemble, the mean of their "
                   "probabilities (docs/imdb.md)")
      ->capture_default_str();
  eval_command->add_option("--split", split, "test, or validation: the training reviews the runs held out (--validation)")
      ->check(CLI::IsMember({"test", "validation"}))
      ->capture_default_str();
  add_data_flags(*eval_command, data_config);
  integer_option(*eval_command, "--threads", threads, 0, limits::max_threads, "CPU threads, 0 = all cores");
  std::vector<int64_t> length_bounds;
  eval_command
      ->add_option("--by-length", length_bounds,
                   "also the accuracy by whole review length, e.g. 256,512: reviews of 0-256 tokens (before truncation), "
                   "257-512, 513 or more")
      ->delimiter(',')
      ->transform(integer_in(1, limits::max_len));

  CLI::App* predict_command = app.add_subcommand("predict", "classify one review given as --text or --file");
  predict_command->add_option("--run", runs, "a train output folder; several: their ensemble (the mean probability)")
      ->capture_default_str();
  CLI::Option* text_option = predict_command->add_option("--text", text, "the review");
  predict_command->add_option("--file", file, "a file holding the review")->excludes(text_option);

  CLI::App* report_command = app.add_subcommand(
      "report", "rebuild a run's report.html (--run DIR: a classifier's run or a pretraining; an ensemble's folder: "
                "its members') or a comparison's compare.html (--compare DIR)");
  CLI::Option* report_run = report_command->add_option("--run", run_folder, "a train or pretrain output folder");
  report_command->add_option("--compare", compare_folder, "a compare output folder (its heads<h>-seed<seed> runs)")
      ->excludes(report_run);
  add_data_flags(*report_command, data_config);
  report_command->add_option("--heads-list", heads_list, "comma-separated head counts (--compare)")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->transform(integer_in(1, limits::max_heads))
      ->capture_default_str();
  integer_option(*report_command, "--seed", report_seed, 0, 1 << 30, "the seed of the runs shown (--compare)");
  integer_option(*report_command, "--threads", threads, 0, limits::max_threads, "CPU threads, 0 = all cores");

  CLI::App* check_command = app.add_subcommand(
      "check", "load a run's files as the commands that read them would (a checkpoint as --resume, an encoder as "
               "--init, an NBSVM as eval; a folder of runs, each run), and print what they hold");
  check_command->add_option("--run", run_folder, "a train, pretrain or nbsvm output folder, or a folder of runs")
      ->capture_default_str();

  TrainConfig flops_config;
  int64_t flops_len = 0;
  double tokens_per_s = 0, peak_tflops = 0;
  CLI::App* flops_command = app.add_subcommand(
      "flops", "the model FLOPs of a training step for these settings (nn/model_flops.h: matrix products, x3 for "
               "backward); with --tokens-per-s and --peak-tflops the model FLOP utilisation (MFU)");
  add_training_flags(*flops_command, flops_config, "runs/imdb");
  integer_option(*flops_command, "--len", flops_len, 0, limits::max_len, "tokens per sequence (0: --max-len)");
  real_option(*flops_command, "--tokens-per-s", tokens_per_s, 0.0, 1e15,
              "tokens trained per second, each in a sequence of --len tokens (the trainer's padded tok/s when its "
              "batches are --len long)");
  real_option(*flops_command, "--peak-tflops", peak_tflops, 0.0, 1e9,
              "the chip's measured matrix rate in TFLOP/s (bench/gemm_peak.cpp), for the MFU");

  auto is_command = [&](const std::string& name) {
    for (const CLI::App* command : app.get_subcommands({})) if (command->check_name(name)) return true;
    return false;
  };
  if (argc >= 2 && argv[1][0] == '-' && argv[1][1] != '-' && std::strlen(argv[1]) > 2)  // "imdb -help": not -h
    throw UsageError(fmt::format("'{}' is not an option: long options take two dashes", std::string(argv[1]).substr(0, 40)));
  if (argc >= 2 && argv[1][0] != '-' && !is_command(argv[1]))
    throw UsageError(
        fmt::format("unknown command '{}' (commands: train, pretrain, nbsvm, eval, predict, compare, report, check, flops)", argv[1]));
  // --preset NAME: its flags written right after the command, before the explicit ones (presets.h).
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && (args[0] == "train" || args[0] == "pretrain" || args[0] == "compare" || args[0] == "flops")) {
    try {
      args = expand_preset(args);
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
  }
  if (!args.empty() && is_command(args[0])) check_words(*app.get_subcommand(args[0]), args);
  args.insert(args.begin(), argc > 0 ? argv[0] : "imdb");
  std::vector<char*> arg_pointers;
  for (std::string& arg : args) arg_pointers.push_back(arg.data());
  try {
    app.parse(int(arg_pointers.size()), arg_pointers.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  check_no_flag_values(app);

  if (pretrain_command->parsed()) {
    check_training_config(pretrain_config.train);
    if (!pretrain_config.train.init.empty()) throw UsageError("pretrain: --init is for train (it starts a classifier)");
    if (pretrain_config.train.model.bigram_buckets != 0)
      throw UsageError("pretrain: --bigrams is for train (the pairs' embeddings learn in fine-tuning; an --init "
                       "classifier starts them at zero)");
    if (pretrain_config.train.encoder_lr_scale != 1.0)
      throw UsageError("pretrain: --encoder-lr-scale is for train (the classifier's encoder against its head)");
    return in_world(pretrain_config.train.dist_timeout, [&](distributed::ProcessGroup& world) {
      PretrainResult r = pretrain(pretrain_config, world);
      if (world.rank() != 0) return r.stopped_by_signal != 0 ? 128 + r.stopped_by_signal : 0;
      const std::string& out = pretrain_config.train.out;
      if (r.stopped_by_signal != 0) {
        fmt::print("stopped by {} at step {} of {}, checkpointed; continue with --resume (outputs in {})\n",
                   r.stopped_by_signal == SIGINT ? "SIGINT" : "SIGTERM", r.steps, r.total_steps, out);
        return 128 + r.stopped_by_signal;
      }
      if (!r.finished) {
        fmt::print("stopped after {} of {} steps, checkpointed; continue with --resume (outputs in {})\n", r.steps,
                   r.total_steps, out);
        return 0;
      }
      if (r.already_finished) {  // nothing trained: no loss of its own to show
        fmt::print("the pretraining had finished (step {} of {}): its encoder written again from its checkpoint, in "
                   "{}/encoder.safetensors\n", r.steps, r.total_steps, out);
        return 0;
      }
      fmt::print("pretrained {} steps in {:.1f}s; last step's masked-token loss {:.4f}, accuracy {:.2f}%; encoder in "
                 "{}/encoder.safetensors\n", r.steps, r.wall_seconds, r.step_losses.back(), 100 * r.step_accuracies.back(),
                 out);
      return 0;
    });
  } else if (nbsvm_command->parsed()) {
    const distributed::LaunchInfo launch = distributed::launch_info();
    if (launch.launched && launch.size != 1)  // every rank would train the same model into the same folder
      throw UsageError(fmt::format("nbsvm runs as one process (it trains in under a minute), not as a job of {} "
                                   "processes under {}", launch.size, launch.launcher));
    try {
      nbsvm_config.validate();
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
    const NbsvmResult r = train_nbsvm(nbsvm_config);
    if (r.test_accuracy >= 0)
      fmt::print("trained in {:.1f}s; test accuracy {:.2f}%; outputs in {}\n", r.seconds, 100 * r.test_accuracy, nb.out);
    else
      fmt::print("trained in {:.1f}s; last validation accuracy {:.2f}%; outputs in {}\n", r.seconds,
                 100 * r.validation_accuracies.back(), nb.out);
    return 0;
  } else if (train_command->parsed()) {
    check_training_config(train_config);
    return in_world(train_config.dist_timeout, [&](distributed::ProcessGroup& world) {
      RunResult r = imdb::train_classifier(train_config, world);
      const bool lead = world.rank() == 0;
      if (r.stopped_by_signal != 0) {
        if (lead)
          fmt::print("stopped by {} at step {} of {}, checkpointed; continue with --resume (outputs in {})\n",
                     r.stopped_by_signal == SIGINT ? "SIGINT" : "SIGTERM", r.steps, r.total_steps, train_config.out);
        return 128 + r.stopped_by_signal;
      }
      if (!r.finished) {
        if (lead)
          fmt::print("stopped after {} of {} steps, checkpointed; continue with --resume (outputs in {})\n", r.steps,
                     r.total_steps, train_config.out);
        return 0;
      }
      if (lead)
        fmt::print("trained {} steps in {:.1f}s; final test accuracy {:.2f}%; outputs in {}\n", r.steps,
                   r.wall_seconds, 100 * r.final_test_accuracy, train_config.out);
      return 0;
    });
  } else if (compare_command->parsed()) {
    check_training_config(compare_config.base);
    compare_config.out = compare_config.base.out;
    compare_config.heads = heads_list;
    for (int64_t h : compare_config.heads)
      if (compare_config.base.model.dim % h != 0)
        throw UsageError(fmt::format("--heads-list: dim {} is not divisible by {}", compare_config.base.model.dim, h));
    fmt::print("{}", compare(compare_config));
  } else if (report_command->parsed()) {
    if (report_command->count("--run") == 0 && compare_folder.empty())
      throw UsageError("report needs exactly one of --run or --compare");
    if (threads > 0) set_num_threads(threads);
    const std::vector<std::string> pages =
        compare_folder.empty() ? rebuild_folder_reports(run_folder, data_config, heads_list, report_seed)
                               : std::vector<std::string>{write_compare_report(compare_folder, heads_list, report_seed,
                                                                               data_config)};
    for (const std::string& path : pages) fmt::print("wrote {}\n", path);
  } else if (eval_command->parsed()) {
    if (threads > 0) set_num_threads(threads);
    for (size_t i = 1; i < length_bounds.size(); ++i)
      if (length_bounds[i] <= length_bounds[i - 1])
        throw UsageError(fmt::format("--by-length: the lengths must increase, got {}", fmt::join(length_bounds, ",")));
    if (runs.size() > 1 || split != "test" || is_nbsvm_run(runs[0])) {  // an ensemble, the validation reviews, an NBSVM
      if (!length_bounds.empty()) throw UsageError("--by-length takes one Transformer --run and the test split");
      return in_world(distributed::default_timeout_seconds(), [&](distributed::ProcessGroup& world) {
        // NOTE: not shared out: under mpirun every rank evaluates every review, and rank 0 prints.
        const EnsembleResult r = evaluate_ensemble(runs, data_config, split == "validation");
        if (world.rank() != 0) return 0;
        for (size_t i = 0; i < runs.size(); ++i)
          fmt::print("  {}: {:.2f}%\n", runs[i], 100 * r.run_accuracies[i]);
        fmt::print("{} accuracy {:.2f}% on {} reviews ({})\n", split, 100 * r.accuracy, r.reviews,
                   runs.size() > 1 ? fmt::format("ensemble of {} runs: the mean probability", runs.size()) : runs[0]);
        return 0;
      });
    }
    const std::string& run_folder = runs[0];
    check_classifies(run_folder);
    // Under mpirun the ranks share the test batches (every rank reads the run and the data).
    return in_world(distributed::default_timeout_seconds(), [&](distributed::ProcessGroup& world) {
      SavedRun saved = load_run(run_folder);
      TrainConfig config = saved.config;
      config.data = data_config.data;
      config.data_dir = data_config.data_dir;
      config.limit = 0;  // always every test review
      Data data = prepare_data(config, &saved.vocabulary);  // encoded with the run's own vocabulary
      MixedPrecisionGuard precision(parse_precision(config.precision));  // as the trainer evaluated it
      // With --by-length the buckets cover every test review once, so the total is their sum: one pass, not two.
      const std::vector<LengthBucket> buckets =
          length_bounds.empty() ? std::vector<LengthBucket>{} : accuracy_by_length(*saved.model, data, length_bounds, &world);
      int64_t correct = 0;
      for (const LengthBucket& bucket : buckets) correct += bucket.correct;
      const double accuracy = buckets.empty() ? evaluate(*saved.model, data.test_tokens, data.test_labels, 64, &world)
                                              : double(correct) / double(data.test_tokens.size());
      if (world.rank() != 0) return 0;
      fmt::print("test accuracy {:.2f}% on {} reviews ({}{})\n", 100 * accuracy, data.test_tokens.size(), run_folder,
                 world.size() > 1 ? fmt::format(", {} ranks", world.size()) : std::string());
      for (const LengthBucket& bucket : buckets)
        fmt::print("  reviews of {} tokens: {:.2f}% on {}\n",
                   bucket.longest < 0 ? fmt::format("{} or more", bucket.shortest)
                                      : fmt::format("{}-{}", bucket.shortest, bucket.longest),
                   100 * bucket.accuracy(), bucket.reviews);
      return 0;
    });
  } else if (flops_command->parsed()) {
    check_training_config(flops_config);
    const nn::ClassifierConfig& m = flops_config.model;
    const int64_t len = flops_len > 0 ? flops_len : m.max_len;
    const double step = nn::training_step_flops(m, flops_config.batch_size, len);
    const double per_token = nn::training_step_flops(m, 1, len) / double(len);
    fmt::print("model FLOPs (nn/model_flops.h): {} layers, dim {}, FFN {}, {} heads, attention {}, sequences of {} tokens\n",
               m.layers, m.dim, m.ffn_dim, m.heads, attention_text({m.attention_window, m.attention_global}), len);
    fmt::print("  forward {:.2f} MFLOP per token; training (forward + backward, x3) {:.2f} MFLOP per token, {:.4g} "
               "TFLOP per step of {} x {}\n",
               per_token / 3e6, per_token / 1e6, step / 1e12, flops_config.batch_size, len);
    if (tokens_per_s > 0) {
      const double achieved = tokens_per_s * per_token / 1e12;
      fmt::print("at {:.0f} tokens/s: {:.2f} TFLOP/s of model FLOPs\n", tokens_per_s, achieved);
      if (peak_tflops > 0) fmt::print("MFU {:.1f}% of {:.4g} TFLOP/s\n", 100 * achieved / peak_tflops, peak_tflops);
    }
  } else if (check_command->parsed()) {
    for (const std::string& line : check_folder(run_folder)) fmt::print("{}\n", line);
  } else if (predict_command->parsed()) {
    if (text.empty() == file.empty()) throw UsageError("predict needs exactly one of --text or --file");
    if (!file.empty()) text = read_whole_file(file, "review file");
    std::vector<EnsembleMember> members;
    for (const std::string& folder : runs) members.push_back(load_member(folder));
    const double p = predict_ensemble(members, text);
    fmt::print("{} (probability positive {:.4f})\n", p >= 0.5 ? "positive" : "negative", p);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const UsageError& e) {
    fmt::print(stderr, "error: {}\nRun 'imdb --help' or 'imdb <command> --help' for the flags.\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "error: out of CPU memory (a C++ allocation failed; lower --batch-size or --limit, or free "
                       "memory)\n");
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
