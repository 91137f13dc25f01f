// The imdb commands that read what training wrote: eval (a run's or an ensemble's accuracy), predict (one
// review), report (report.html / compare.html again), check (a folder's files, as the commands that read them
// would), flops (a step's model FLOPs and MFU for these settings), and batches (a run's first batches, written for
// another program).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/attention_band.h"
#include "core/file_io.h"
#include "core/parallel.h"
#include "core/precision.h"
#include "examples/imdb/batcher.h"
#include "examples/imdb/classifier_arrays.h"
#include "examples/imdb/command_line.h"
#include "examples/imdb/compare.h"
#include "examples/imdb/ensemble.h"
#include "examples/imdb/folder_commands.h"
#include "examples/imdb/nbsvm.h"
#include "examples/imdb/report.h"
#include "examples/imdb/trainer.h"
#include "examples/imdb/training_flags.h"
#include "examples/imdb/truncation.h"
#include "nn/checkpoint.h"
#include "nn/model_flops.h"

namespace ember::imdb {
namespace {

class EvalCommand final : public Command {
 public:
  void add(CLI::App& program) override {
    app = program.add_subcommand("eval", "accuracy of a trained run (or an ensemble) on all test reviews");
    app->add_option("--run", runs_, "a train output folder; several (--run A --run B ...): their ensemble, the mean of "
                                    "their probabilities (docs/imdb.md)")
        ->capture_default_str();
    app->add_option("--split", split_, "test, or validation: the training reviews the runs held out (--validation)")
        ->check(CLI::IsMember({"test", "validation"}))
        ->capture_default_str();
    add_data_flags(*app, data_);
    integer_option(*app, "--threads", threads_, 0, limits::max_threads, "CPU threads, 0 = all cores");
    app->add_option("--by-length", bounds_, "also the accuracy by whole review length, e.g. 256,512: reviews of 0-256 "
                                            "tokens (before truncation), 257-512, 513 or more")
        ->delimiter(',')
        ->transform(integer_in(1, limits::max_len));
  }
  int run() override {
    if (threads_ > 0) set_num_threads(threads_);
    for (size_t i = 1; i < bounds_.size(); ++i)
      if (bounds_[i] <= bounds_[i - 1])
        throw UsageError(fmt::format("--by-length: the lengths must increase, got {}", fmt::join(bounds_, ",")));
    if (runs_.size() > 1 || split_ != "test" || is_nbsvm_run(runs_[0])) {  // an ensemble, the validation reviews, an NBSVM
      if (!bounds_.empty()) throw UsageError("--by-length takes one Transformer --run and the test split");
      return in_world(distributed::default_timeout_seconds(), [&](distributed::ProcessGroup& world) {
        return ensemble_accuracy(world);
      });
    }
    check_classifies(runs_[0]);
    // Under mpirun the ranks share the test batches (every rank reads the run and the data).
    return in_world(distributed::default_timeout_seconds(), [&](distributed::ProcessGroup& world) {
      return run_accuracy(world);
    });
  }

 private:
  int ensemble_accuracy(distributed::ProcessGroup& world) {
    // NOTE: not shared out: under mpirun every rank evaluates every review, and rank 0 prints.
    const EnsembleResult r = evaluate_ensemble(runs_, data_, split_ == "validation");
    if (world.rank() != 0) return 0;
    for (size_t i = 0; i < runs_.size(); ++i) fmt::print("  {}: {:.2f}%\n", runs_[i], 100 * r.run_accuracies[i]);
    fmt::print("{} accuracy {:.2f}% on {} reviews ({})\n", split_, 100 * r.accuracy, r.reviews,
               runs_.size() > 1 ? fmt::format("ensemble of {} runs: the mean probability", runs_.size()) : runs_[0]);
    return 0;
  }

  int run_accuracy(distributed::ProcessGroup& world) {
    const std::string& folder = runs_[0];
    SavedRun saved = load_run(folder);
    TrainConfig config = saved.config;
    config.data = data_.data;
    config.data_dir = data_.data_dir;
    config.limit = 0;  // always every test review
    Data data = prepare_data(config, &saved.vocabulary);  // encoded with the run's own vocabulary
    MixedPrecisionGuard precision(parse_precision(config.precision));  // as the trainer evaluated it
    // With --by-length the buckets cover every test review once, so the total is their sum: one pass, not two.
    const std::vector<LengthBucket> buckets =
        bounds_.empty() ? std::vector<LengthBucket>{} : accuracy_by_length(*saved.model, data, bounds_, &world);
    int64_t correct = 0;
    for (const LengthBucket& bucket : buckets) correct += bucket.correct;
    const double accuracy = buckets.empty() ? evaluate(*saved.model, data.test_tokens, data.test_labels, 64, &world)
                                            : double(correct) / double(data.test_tokens.size());
    if (world.rank() != 0) return 0;
    fmt::print("test accuracy {:.2f}% on {} reviews ({}{})\n", 100 * accuracy, data.test_tokens.size(), folder,
               world.size() > 1 ? fmt::format(", {} ranks", world.size()) : std::string());
    for (const LengthBucket& bucket : buckets)
      fmt::print("  reviews of {} tokens: {:.2f}% on {}\n",
                 bucket.longest < 0 ? fmt::format("{} or more", bucket.shortest)
                                    : fmt::format("{}-{}", bucket.shortest, bucket.longest),
                 100 * bucket.accuracy(), bucket.reviews);
    return 0;
  }

  std::vector<std::string> runs_{"runs/imdb"};
  std::string split_ = "test";
  TrainConfig data_;
  int threads_ = 0;
  std::vector<int64_t> bounds_;
};

class PredictCommand final : public Command {
 public:
  void add(CLI::App& program) override {
    app = program.add_subcommand("predict", "classify one review given as --text or --file");
    app->add_option("--run", runs_, "a train output folder; several: their ensemble (the mean probability)")
        ->capture_default_str();
    CLI::Option* text = app->add_option("--text", text_, "the review");
    app->add_option("--file", file_, "a file holding the review")->excludes(text);
  }
  int run() override {
    if (text_.empty() == file_.empty()) throw UsageError("predict needs exactly one of --text or --file");
    if (!file_.empty()) text_ = read_whole_file(file_, "review file");
    std::vector<EnsembleMember> members;
    for (const std::string& folder : runs_) members.push_back(load_member(folder));
    const double p = predict_ensemble(members, text_);
    fmt::print("{} (probability positive {:.4f})\n", p >= 0.5 ? "positive" : "negative", p);
    return 0;
  }

 private:
  std::vector<std::string> runs_{"runs/imdb"};
  std::string text_, file_;
};

class ReportCommand final : public Command {
 public:
  void add(CLI::App& program) override {
    app = program.add_subcommand("report", "rebuild a run's report.html (--run DIR: a classifier's run or a "
                                           "pretraining; an ensemble's folder: its members') or a comparison's "
                                           "compare.html (--compare DIR)");
    CLI::Option* run = app->add_option("--run", run_, "a train or pretrain output folder");
    app->add_option("--compare", compare_, "a compare output folder (its heads<h>-seed<seed> runs)")->excludes(run);
    add_data_flags(*app, data_);
    app->add_option("--heads-list", heads_, "comma-separated head counts (--compare)")
        ->delimiter(',')
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
        ->transform(integer_in(1, limits::max_heads))
        ->capture_default_str();
    integer_option(*app, "--seed", seed_, 0, 1 << 30, "the seed of the runs shown (--compare)");
    integer_option(*app, "--threads", threads_, 0, limits::max_threads, "CPU threads, 0 = all cores");
  }
  int run() override {
    if (app->count("--run") == 0 && compare_.empty()) throw UsageError("report needs exactly one of --run or --compare");
    if (threads_ > 0) set_num_threads(threads_);
    const std::vector<std::string> pages =
        compare_.empty() ? rebuild_folder_reports(run_, data_, heads_, seed_)
                         : std::vector<std::string>{write_compare_report(compare_, heads_, seed_, data_)};
    for (const std::string& path : pages) fmt::print("wrote {}\n", path);
    return 0;
  }

 private:
  std::string run_ = "runs/imdb", compare_;
  TrainConfig data_;
  std::vector<int64_t> heads_{1, 4, 8};
  int64_t seed_ = 0;
  int threads_ = 0;
};

class CheckCommand final : public Command {
 public:
  void add(CLI::App& program) override {
    app = program.add_subcommand("check", "load a run's files as the commands that read them would (a checkpoint as "
                                          "--resume, an encoder as --init, an NBSVM as eval; a folder of runs, each "
                                          "run), and print what they hold");
    app->add_option("--run", run_, "a train, pretrain or nbsvm output folder, or a folder of runs")->capture_default_str();
  }
  int run() override {
    for (const std::string& line : check_folder(run_)) fmt::print("{}\n", line);
    return 0;
  }

 private:
  std::string run_ = "runs/imdb";
};

class FlopsCommand final : public Command {
 public:
  void add(CLI::App& program) override {
    app = program.add_subcommand("flops", "the model FLOPs of a training step for these settings (nn/model_flops.h: "
                                          "matrix products, x3 for backward); with --tokens-per-s and --peak-tflops "
                                          "the model FLOP utilisation (MFU)");
    add_training_flags(*app, config_, "runs/imdb");
    integer_option(*app, "--len", len_, 0, limits::max_len, "tokens per sequence (0: --max-len)");
    real_option(*app, "--tokens-per-s", tokens_per_s_, 0.0, 1e15,
                "tokens trained per second, each in a sequence of --len tokens (the trainer's padded tok/s when its "
                "batches are --len long)");
    real_option(*app, "--peak-tflops", peak_tflops_, 0.0, 1e9,
                "the chip's measured matrix rate in TFLOP/s (bench/gemm_peak.cpp), for the MFU");
  }
  bool takes_presets() const override { return true; }
  int run() override {
    check_training_config(config_);
    const nn::ClassifierConfig& m = config_.model;
    const int64_t len = len_ > 0 ? len_ : m.max_len;
    const double step = nn::training_step_flops(m, config_.batch_size, len);
    const double per_token = nn::training_step_flops(m, 1, len) / double(len);
    fmt::print("model FLOPs (nn/model_flops.h): {} layers, dim {}, FFN {}, {} heads, attention {}, sequences of {} "
               "tokens\n", m.layers, m.dim, m.ffn_dim, m.heads, attention_band_text({m.attention_window, m.attention_global}),
               len);
    fmt::print("  forward {:.2f} MFLOP per token; training (forward + backward, x3) {:.2f} MFLOP per token, {:.4g} "
               "TFLOP per step of {} x {}\n",
               per_token / 3e6, per_token / 1e6, step / 1e12, config_.batch_size, len);
    if (tokens_per_s_ > 0) {
      const double achieved = tokens_per_s_ * per_token / 1e12;
      fmt::print("at {:.0f} tokens/s: {:.2f} TFLOP/s of model FLOPs\n", tokens_per_s_, achieved);
      if (peak_tflops_ > 0) fmt::print("MFU {:.1f}% of {:.4g} TFLOP/s\n", 100 * achieved / peak_tflops_, peak_tflops_);
    }
    return 0;
  }

 private:
  TrainConfig config_;
  int64_t len_ = 0;
  double tokens_per_s_ = 0, peak_tflops_ = 0;
};

// The first batches of a run's first epoch, as its training takes them, written as safetensors for another program
// to train on the same batches (bench/train_step.sh gives them to Ember and PyTorch alike): "<i>.tokens" (int64
// [B, T]), "<i>.mask" (bool [B, T], true at padding) and "<i>.labels" (int64 [B]), i from 0.
class BatchesCommand final : public Command {
 public:
  void add(CLI::App& program) override {
    app = program.add_subcommand("batches", "write the first batches of a training run's first epoch (these settings' "
                                            "data, order and padding) to a safetensors file, for another program");
    add_training_flags(*app, config_, "runs/imdb");
    app->add_option("--file", file_, "the safetensors file to write")->required();
    integer_option(*app, "--count", count_, 1, 1'000'000, "batches (fewer when an epoch has fewer)");
  }
  bool takes_presets() const override { return true; }
  int run() override {
    check_training_config(config_);
    // NOTE: the file is new: a path that names a saved model or checkpoint would otherwise be overwritten.
    if (std::filesystem::exists(file_))
      throw UsageError(fmt::format("--file {} exists: imdb batches writes a new file, it does not replace one", file_));
    config_.quiet = true;
    const Data data = prepare_data(config_);
    const Batcher batcher(data.train_tokens, data.train_labels, config_.batch_size);
    const std::vector<int64_t> order = batcher.shuffled_order(config_.seed, 0);
    nn::TensorMap tensors;
    const int64_t count = std::min(count_, batcher.num_batches());
    for (int64_t b = 0; b < count; ++b) {
      for (const auto& [name, array] : host_arrays(batcher.batch(order, b)))
        tensors[fmt::format("{}.{}", b, name)] = array;
    }
    nn::save_tensors(file_, tensors);
    fmt::print("{} batches of up to {} reviews written to {}\n", count, config_.batch_size, file_);
    return 0;
  }

 private:
  TrainConfig config_;
  std::string file_;
  int64_t count_ = 200;
};

}  // namespace

std::vector<std::unique_ptr<Command>> run_commands() {
  std::vector<std::unique_ptr<Command>> commands;
  commands.push_back(std::make_unique<EvalCommand>());
  commands.push_back(std::make_unique<PredictCommand>());
  commands.push_back(std::make_unique<ReportCommand>());
  commands.push_back(std::make_unique<CheckCommand>());
  commands.push_back(std::make_unique<FlopsCommand>());
  commands.push_back(std::make_unique<BatchesCommand>());
  return commands;
}

}  // namespace ember::imdb
