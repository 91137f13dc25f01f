// The IMDb trainer under faults: hostile metadata, resumes that must be refused without touching
// the folder, a second trainer on the same folder, divergence, and resumes that must end exactly
// as an uninterrupted run.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/file_io.h"
#include "examples/imdb/run_folder.h"
#include "examples/imdb/trainer.h"
#include "tests/helpers.h"
#include "tests/imdb_helpers.h"
#include "nn/checkpoint.h"

using namespace ember;
using namespace ember::imdb;
using ember::testing::check_error;
using ember::testing::file_contents;
using ember::testing::folder_files;
namespace fs = std::filesystem;

namespace {

TrainConfig tiny(const std::string& name) { return ember::testing::tiny_train_config("ember_faults", name); }

// The metadata of a saved file with one value changed (the tensors as they are).
void rewrite_metadata(const std::string& path, const std::string& key, const std::string& value) {
  nn::Metadata meta;
  nn::TensorMap tensors = nn::load_tensors(path, &meta);
  meta[key] = value;
  nn::save_tensors(path, tensors, meta);
}

}  // namespace

TEST_CASE("train faults: metadata numbers are parsed in full and range-checked") {
  const auto good = TrainConfig().to_metadata();
  CHECK(TrainConfig::from_metadata(good).to_metadata() == good);
  struct Case {
    const char* key;
    const char* value;
    const char* message;
  };
  for (Case c : {Case{"heads", "1e3", "'heads' = '1e3' is not an integer"}, Case{"heads", "+4", "not an integer"},
                 Case{"heads", " 4", "not an integer"}, Case{"batch_size", "7junk", "'batch_size' = '7junk'"},
                 Case{"epochs", "3.5", "'epochs' = '3.5'"}, Case{"epochs", "0", "in [1, 1000000]"},
                 Case{"heads", "99999999999999999999", "'heads'"}, Case{"classes", "1", "'classes' = '1'"},
                 Case{"vocab_size", "-5", "'vocab_size'"}, Case{"lr", "nan", "'lr' = 'nan' is not a number"},
                 Case{"lr", "1e400", "'lr'"}, Case{"dropout", "0.5x", "'dropout'"}, Case{"seed", "-1", "'seed'"},
                 Case{"heads", "3", "dim = 128 is not divisible by heads = 3"},
                 Case{"schedule", "sometimes", "schedule = 'sometimes'"},
                 Case{"cuda_graph", "maybe", "setting cuda_graph = 'maybe': expected on or off"}}) {
    auto meta = good;
    meta[c.key] = c.value;
    INFO(c.key << " = " << c.value);
    check_error([&] { TrainConfig::from_metadata(meta); }, c.message);
  }
}

TEST_CASE("train faults: a file claiming a huge model fails before anything is allocated") {
  TrainConfig config = tiny("huge");
  config.epochs = 1;
  config.stop_after = 3;
  train_classifier(config);
  const std::string checkpoint = config.out + "/checkpoint.safetensors";
  rewrite_metadata(checkpoint, "vocab_size", "100000000");  // an 83 KB file made check allocate 6.2 GB
  reset_peak_memory();
  const int64_t before = memory_stats().allocated;
  check_error([&] { check_checkpoint(checkpoint); },
              "tensor 'token_embedding.weight' has shape [");
  check_error([&] { check_checkpoint(checkpoint); }, "but the settings (vocab_size, dim) make it [100000000, 16]");
  CHECK(memory_stats().peak_allocated - before < (int64_t(64) << 20));
  // Layers claimed but absent, and a block the settings do not have.
  train_classifier(config);  // a fresh checkpoint (a new run over the same folder)
  rewrite_metadata(checkpoint, "layers", "1000");
  check_error([&] { check_checkpoint(checkpoint); }, "the settings say 1000 layers but the file has 1 blocks");
  train_classifier(config);
  rewrite_metadata(checkpoint, "layers", "0");
  check_error([&] { check_checkpoint(checkpoint); }, "is not a block of a 0-layer model");
}

TEST_CASE("train faults: checkpoint steps out of range, and settings the tensors cannot show, are refused") {
  TrainConfig config = tiny("steps");
  config.epochs = 2;
  config.stop_after = 5;
  train_classifier(config);
  const std::string checkpoint = config.out + "/checkpoint.safetensors";
  const std::string saved = file_contents(checkpoint);
  auto with = [&](const std::string& key, const std::string& value, const std::string& message) {
    write_file_atomically(checkpoint, saved);
    rewrite_metadata(checkpoint, key, value);
    INFO(key << " = " << value);
    check_error([&] { check_checkpoint(checkpoint); }, message);
  };
  with("step", "12abc", "'step' = '12abc' is not an integer");
  with("step", "-1", "'step' = '-1'");
  with("step", "27", "step 27 is past the end of the run (26 steps)");
  with("step", "6", "the optimiser has taken 5 steps but the checkpoint says 6");
  with("generator_offset", "x", "'generator_offset'");
  with("epoch_loss_sum", "nan", "'epoch_loss_sum'");
  with("data_fingerprint", "abc", "'data_fingerprint' is not a SHA-256");
  with("format", "ember-imdb-checkpoint-v1", "written by an older trainer (ember-imdb-checkpoint-v1");
  // A newer or unknown format is refused, naming the one found and the ones this build reads.
  with("format", "ember-imdb-checkpoint-v3", "has format ember-imdb-checkpoint-v3, newer than this build reads "
       "(ember-imdb-checkpoint-v2)");
  with("format", "v2", "has format 'v2', which this build does not know (it reads ember-imdb-checkpoint-v2)");
  with("format", "ember-imdb-checkpoint-v02", "format 'ember-imdb-checkpoint-v02', which this build does not know");
  with("format", "ember-imdb-model-v2", "which this build does not know");
  // heads 4 (dim 16) and a dropout are invisible in the tensors: the checksum refuses them.
  with("heads", "4", "its contents differ from the checksum it was written with");
  with("dropout", "0.5", "its contents differ from the checksum");
  write_file_atomically(checkpoint, saved);
  CHECK(check_checkpoint(checkpoint).step == 5);
}

TEST_CASE("train faults: an older checkpoint this build still reads (v2 before its later keys) resumes") {
  // The metadata keys added to format v2 with a default (truncate .. cuda_graph): a file written
  // before them is still a v2 checkpoint, read with the defaults, and resumes.
  TrainConfig config = tiny("older");
  config.epochs = 1;
  config.stop_after = 3;
  train_classifier(config);
  const std::string checkpoint = config.out + "/checkpoint.safetensors";
  nn::Metadata meta;
  nn::TensorMap tensors = nn::load_tensors(checkpoint, &meta);
  REQUIRE(meta.at("format") == "ember-imdb-checkpoint-v2");
  for (const char* key : {"truncate", "attention", "checkpoint", "precision", "length_buckets", "validation",
                          "cuda_graph"})
    REQUIRE(meta.erase(key) == 1);
  meta[kContentKey] = content_fingerprint(tensors, meta);
  nn::save_tensors(checkpoint, tensors, meta);
  CHECK(check_checkpoint(checkpoint).step == 3);
  TrainConfig resume = config;
  resume.stop_after = 0;
  resume.resume = true;
  RunResult r = train_classifier(resume);
  CHECK(r.finished);
  CHECK(r.steps == 13);
}

TEST_CASE("train faults: a refused --resume changes nothing in the folder") {
  TrainConfig config = tiny("refused");
  config.epochs = 2;
  config.stop_after = 5;
  train_classifier(config);
  const auto before = folder_files(config.out);
  REQUIRE(before.count("vocab.txt") == 1);

  TrainConfig other = config;  // one mistyped setting
  other.stop_after = 0;
  other.resume = true;
  other.epochs = 3;
  check_error([&] { train_classifier(other); }, "written with other settings: epochs is 2 there but 3 here");
  other = config;
  other.stop_after = 0;
  other.resume = true;
  other.vocab_words = 100;  // another vocabulary: refused by the settings
  check_error([&] { train_classifier(other); }, "written with other settings: vocab_size is");
  CHECK(folder_files(config.out) == before);  // vocab.txt was overwritten before the check
}

TEST_CASE("train faults: --resume with other data of the same vocabulary size is refused") {
  TrainConfig config = tiny("otherdata");
  config.epochs = 2;
  config.stop_after = 5;
  config.vocab_words = 50;  // both data sets have far more distinct words: both vocabularies have 52 tokens
  Data data = prepare_data(config);
  train_classifier(config, data);
  // The same reviews with one frequent word replaced: another vocabulary, of the same size.
  Data other = data;
  {
    std::string edited = file_contents(config.data);
    for (size_t at = edited.find(" the "); at != std::string::npos; at = edited.find(" the ", at))
      edited.replace(at, 5, " zzz ");
    const std::string path = config.out + "-other.json";
    write_file_atomically(path, edited);
    TrainConfig other_config = config;
    other_config.data = path;
    other = prepare_data(other_config);
  }
  REQUIRE(other.vocabulary.size() == data.vocabulary.size());
  REQUIRE(other.vocabulary.tokens() != data.vocabulary.tokens());
  const auto before = folder_files(config.out);
  TrainConfig resume = config;
  resume.stop_after = 0;
  resume.resume = true;
  check_error([&] { train_classifier(resume, other); }, "was trained on other data");
  CHECK(folder_files(config.out) == before);
  CHECK(train_classifier(resume, data).finished);  // the right data resumes
}

TEST_CASE("train faults: a second trainer on the same folder is refused while the first holds it") {
  TrainConfig config = tiny("locked");
  config.epochs = 1;
  fs::create_directories(config.out);
  {
    train::RunLock first(config.out);  // as another trainer would hold it
    check_error([&] { train_classifier(config); }, "another trainer is using the output folder");
    CHECK_FALSE(fs::exists(config.out + "/vocab.txt"));
  }
  CHECK(train_classifier(config).finished);  // released with its holder
}

TEST_CASE("train faults: a diverging run stops with an error naming the step, never a trained-looking result") {
  TrainConfig config = tiny("diverge");
  config.epochs = 3;
  config.lr = 10;
  config.weight_decay = 10;
  config.clip = 0;
  check_error([&] { train_classifier(config); }, "training diverged: the loss at step");
  // Nothing that is not JSON was written.
  std::ifstream metrics(config.out + "/metrics.jsonl");
  std::string line;
  while (std::getline(metrics, line)) {
    INFO(line);
    CHECK(nlohmann::json::accept(line));
  }
}

TEST_CASE("train faults: epoch counts whose steps overflow are errors, not endless runs") {
  TrainConfig config = tiny("overflow");
  config.epochs = limits::max_epochs;  // 13 steps an epoch: fine
  config.batch_size = 1;
  config.stop_after = 1;
  CHECK(train_classifier(config).steps == 1);
  config.epochs = int64_t(1) << 62;
  check_error([&] { train_classifier(config); }, "setting epochs = 4611686018427387904 is out of range");
}

TEST_CASE("train faults: resuming a finished run whose model file was lost restores it and the result") {
  TrainConfig config = tiny("finished");
  config.epochs = 2;
  RunResult whole = train_classifier(config);
  REQUIRE(whole.finished);
  const std::string model = file_contents(config.out + "/model.safetensors");
  fs::remove(config.out + "/model.safetensors");
  fs::remove(config.out + "/report.html");
  TrainConfig resume = config;
  resume.resume = true;
  RunResult again = train_classifier(resume);
  CHECK(again.finished);
  CHECK(again.steps == whole.steps);
  CHECK(again.final_test_accuracy == whole.final_test_accuracy);  // was 0 ("final test accuracy 0.00%")
  CHECK(file_contents(config.out + "/model.safetensors") == model);
  CHECK(fs::exists(config.out + "/report.html"));
}

TEST_CASE("train faults: a run resumed mid-epoch leaves the same files as one that was not") {
  TrainConfig config = tiny("same_whole");
  config.epochs = 2;
  config.save_every = 1;
  Data data = prepare_data(config);
  train_classifier(config, data);
  TrainConfig part = config;
  part.out = tiny("same_parts").out;
  for (int64_t stop : {4, 13, 20}) {  // mid-epoch, at an epoch's end, mid-epoch again
    part.stop_after = stop;
    train_classifier(part, data);
    part.resume = true;
  }
  part.stop_after = 0;
  train_classifier(part, data);
  for (const char* file : {"checkpoint.safetensors", "model.safetensors", "vocab.txt"}) {
    INFO(file);
    CHECK(file_contents(part.out + "/" + file) == file_contents(config.out + "/" + file));
  }
  // metrics.jsonl: the same lines, but for the timing and memory figures.
  auto lines = [](const std::string& path) {
    std::vector<nlohmann::json> out;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      nlohmann::json record = nlohmann::json::parse(line);
      for (const char* volatile_key : {"train_seconds", "eval_seconds", "real_tokens_per_s", "padded_tokens_per_s",
                                       "peak_tensor_bytes", "peak_rss_bytes"})
        record.erase(volatile_key);
      out.push_back(record);
    }
    return out;
  };
  CHECK(lines(part.out + "/metrics.jsonl") == lines(config.out + "/metrics.jsonl"));
}

TEST_CASE("train faults: a resumed metrics log keeps the lines its checkpoint covers, a step-less line with its own") {
  const std::string folder = tiny("metricslog").out;
  fs::create_directories(folder);
  const std::string path = folder + "/metrics.jsonl";
  write_file_atomically(path,
                        "{\"kind\":\"step\",\"step\":1}\n"
                        "{\"kind\":\"step\",\"step\":2}\n"
                        "{\"kind\":\"epoch\",\"epoch\":1,\"step\":2}\n"
                        "{\"kind\":\"gpu_memory\",\"epoch\":1,\"peak_bytes\":5}\n"
                        "{\"kind\":\"step\",\"step\":3}\n"
                        "{\"kind\":\"epoch\",\"epoch\":2,\"step\":3}\n"
                        "{\"kind\":\"gpu_memory\",\"epoch\":2,\"peak_bytes\":6}\n"
                        "{\"kind\":\"step\",\"st");  // cut off by a kill
  {
    train::MetricsLog log(path, /*resume=*/true, /*checkpoint_step=*/2);
    log.write({{"kind", "step"}, {"step", 3}});
    log.flush();
  }
  // The gpu_memory line of epoch 1 stays (it was dropped: a GPU run resumed had none for its epochs
  // before), epoch 2's goes with its epoch line, the cut line goes.
  CHECK(file_contents(path) == "{\"kind\":\"step\",\"step\":1}\n"
                          "{\"kind\":\"step\",\"step\":2}\n"
                          "{\"kind\":\"epoch\",\"epoch\":1,\"step\":2}\n"
                          "{\"kind\":\"gpu_memory\",\"epoch\":1,\"peak_bytes\":5}\n"
                          "{\"kind\":\"step\",\"step\":3}\n");
}
