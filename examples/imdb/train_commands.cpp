// The imdb commands that train: train (the classifier), pretrain (its encoder), nbsvm, compare (heads against
// heads). Each is its flags (training_flags.h's table) and a call of its recipe: train_classifier (trainer.h),
// pretrain (pretrain.h), train_nbsvm (nbsvm.h), compare (compare.h), which run the training layer's loop.
#include <fmt/format.h>

#include <csignal>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/distributed/world.h"
#include "examples/imdb/command_line.h"
#include "examples/imdb/compare.h"
#include "examples/imdb/nbsvm.h"
#include "examples/imdb/pretrain.h"
#include "examples/imdb/trainer.h"
#include "examples/imdb/training_flags.h"

namespace ember::imdb {
namespace {

// How a run that trained (train, pretrain) ended, on rank 0; the exit status: 128 + the signal that stopped it.
int report_stop(int signal, int64_t steps, int64_t total_steps, const std::string& out) {
  if (signal != 0) {
    fmt::print("stopped by {} at step {} of {}, checkpointed; continue with --resume (outputs in {})\n",
               signal == SIGINT ? "SIGINT" : "SIGTERM", steps, total_steps, out);
    return 128 + signal;
  }
  fmt::print("stopped after {} of {} steps, checkpointed; continue with --resume (outputs in {})\n", steps,
             total_steps, out);
  return 0;
}

class TrainCommand final : public Command {
 public:
  void add(CLI::App& program) override {
    app = program.add_subcommand("train", "train a classifier (the reference recipe by default), report test accuracy "
                                          "per epoch, and write report.html");
    add_training_flags(*app, config_, "runs/imdb");
  }
  bool takes_presets() const override { return true; }
  int run() override {
    check_training_config(config_);
    return in_world(config_.dist_timeout, [&](distributed::ProcessGroup& world) {
      const RunResult r = train_classifier(config_, world);
      if (r.stopped_by_signal != 0 || !r.finished) {
        const int status = r.stopped_by_signal != 0 ? 128 + r.stopped_by_signal : 0;
        return world.rank() == 0 ? report_stop(r.stopped_by_signal, r.steps, r.total_steps, config_.out) : status;
      }
      if (world.rank() == 0)
        fmt::print("trained {} steps in {:.1f}s; final test accuracy {:.2f}%; outputs in {}\n", r.steps,
                   r.wall_seconds, 100 * r.final_test_accuracy, config_.out);
      return 0;
    });
  }

 private:
  TrainConfig config_;
};

class PretrainCommand final : public Command {
 public:
  void add(CLI::App& program) override {
    app = program.add_subcommand("pretrain", "masked-token pretraining of the classifier's encoder on the training "
                                             "reviews' text (whole reviews, in windows of --max-len tokens); fine-tune "
                                             "it with train --init OUT");
    add_training_flags(*app, config_.train, "runs/pretrain");
    integer_option(*app, "--steps", config_.steps, 0, limits::max_reviews,
                   "steps of the run (the schedule's length); 0: --epochs over the windows");
  }
  bool takes_presets() const override { return true; }
  int run() override {
    const TrainConfig& train = config_.train;
    check_training_config(train);
    if (!train.init.empty()) throw UsageError("pretrain: --init is for train (it starts a classifier)");
    if (train.model.bigram_buckets != 0)
      throw UsageError("pretrain: --bigrams is for train (the pairs' embeddings learn in fine-tuning; an --init "
                       "classifier starts them at zero)");
    if (train.encoder_lr_scale != 1.0)
      throw UsageError("pretrain: --encoder-lr-scale is for train (the classifier's encoder against its head)");
    return in_world(train.dist_timeout, [&](distributed::ProcessGroup& world) {
      const PretrainResult r = pretrain(config_, world);
      if (world.rank() != 0) return r.stopped_by_signal != 0 ? 128 + r.stopped_by_signal : 0;
      if (r.stopped_by_signal != 0 || !r.finished) return report_stop(r.stopped_by_signal, r.steps, r.total_steps, train.out);
      if (r.already_finished) {  // nothing trained: no loss of its own to show
        fmt::print("the pretraining had finished (step {} of {}): its encoder written again from its checkpoint, in "
                   "{}/encoder.safetensors\n", r.steps, r.total_steps, train.out);
        return 0;
      }
      fmt::print("pretrained {} steps in {:.1f}s; last step's masked-token loss {:.4f}, accuracy {:.2f}%; encoder in "
                 "{}/encoder.safetensors\n", r.steps, r.wall_seconds, r.step_losses.back(), 100 * r.step_accuracies.back(),
                 train.out);
      return 0;
    });
  }

 private:
  PretrainConfig config_;
};

class NbsvmCommand final : public Command {
 public:
  // NBSVM's flags: the setting rows of the data and the loop it reads (a Transformer's would be ignored, so it has
  // none of them), and its own.
  void add(CLI::App& program) override {
    app = program.add_subcommand("nbsvm", "train NBSVM (Wang and Manning, 2012): logistic regression over each review's "
                                          "word 1-3-grams scaled by their naive-Bayes log-count ratios; an ensemble "
                                          "member beside a Transformer (docs/imdb.md)");
    add_setting_flags(*app, config_.run, {"data", "data_dir", "out", "overwrite", "limit", "validation", "vocab_words",
                                          "max_len", "truncate", "seed", "threads", "epochs", "lr", "batch_size", "quiet"});
    // What those rows mean here, where the Transformer's help would mislead.
    app->get_option("--out")->description("output folder (nbsvm.safetensors, vocab.txt)");
    app->get_option("--validation")
        ->description("hold out N training reviews (the same ones as imdb train's), evaluated each epoch; the test "
                      "reviews are then not evaluated");
    app->get_option("--seed")->description("the batches' order");
    app->get_option("--lr")->description("Adam's peak learning rate (decays linearly to zero)");
    integer_option(*app, "--ngrams", config_.order, 1, 8, "word n-grams for n = 1 .. N");
    integer_option(*app, "--buckets", config_.buckets, 1, limits::max_bigram_buckets, "hashed n-gram ids");
    real_option(*app, "--alpha", config_.alpha, 1e-9, 1e9, "naive Bayes' smoothing count");
    real_option(*app, "--l2", config_.l2, 0.0, 1e3, "lambda of the penalty lambda / 2 * |w|^2");
  }
  int run() override {
    const distributed::LaunchInfo launch = distributed::launch_info();
    if (launch.launched && launch.size != 1)  // every rank would train the same model into the same folder
      throw UsageError(fmt::format("nbsvm runs as one process (it trains in under a minute), not as a job of {} "
                                   "processes under {}", launch.size, launch.launcher));
    try {
      config_.validate();
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
    const NbsvmResult r = train_nbsvm(config_);
    if (r.test_accuracy >= 0)
      fmt::print("trained in {:.1f}s; test accuracy {:.2f}%; outputs in {}\n", r.seconds, 100 * r.test_accuracy,
                 config_.run.out);
    else
      fmt::print("trained in {:.1f}s; last validation accuracy {:.2f}%; outputs in {}\n", r.seconds,
                 100 * r.validation_accuracies.back(), config_.run.out);
    return 0;
  }

 private:
  NbsvmConfig config_;
};

class CompareCommand final : public Command {
 public:
  void add(CLI::App& program) override {
    app = program.add_subcommand("compare", "train heads 1, 4, 8 over several seeds; write a Markdown table and "
                                            "compare.html");
    add_training_flags(*app, config_.base, "runs/compare");
    app->add_option("--heads-list", heads_, "comma-separated head counts")
        ->delimiter(',')
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
        ->transform(integer_in(1, limits::max_heads))
        ->capture_default_str();
    integer_option(*app, "--seeds", config_.seeds, 1, 1000, "seeds 0..N-1 per head count");
  }
  bool takes_presets() const override { return true; }
  int run() override {
    check_training_config(config_.base);
    config_.out = config_.base.out;
    config_.heads = heads_;
    for (int64_t h : config_.heads)
      if (config_.base.model.dim % h != 0)
        throw UsageError(fmt::format("--heads-list: dim {} is not divisible by {}", config_.base.model.dim, h));
    fmt::print("{}", compare(config_));
    return 0;
  }

 private:
  CompareConfig config_;
  std::vector<int64_t> heads_{1, 4, 8};
};

}  // namespace

std::vector<std::unique_ptr<Command>> training_commands() {
  std::vector<std::unique_ptr<Command>> commands;
  commands.push_back(std::make_unique<TrainCommand>());
  commands.push_back(std::make_unique<PretrainCommand>());
  commands.push_back(std::make_unique<CompareCommand>());
  commands.push_back(std::make_unique<NbsvmCommand>());
  return commands;
}

}  // namespace ember::imdb
