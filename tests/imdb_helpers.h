// Test helpers for the IMDb trainer: a tiny model and run on the bundled 400-review file, so a
// whole training run takes a second (tests change what they study: epochs, layers, seed, device);
// an accuracy counted by the tests themselves; a run folder's files, to see that a refused command changed none.
#pragma once
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "examples/imdb/trainer.h"

namespace ember::testing {

// Output goes to <tmp>/<prefix>_<pid>/<name>.
inline imdb::TrainConfig tiny_train_config(const std::string& prefix, const std::string& name) {
  imdb::TrainConfig c;
  c.model.dim = 16;
  c.model.heads = 2;
  c.model.layers = 1;
  c.model.ffn_dim = 32;
  c.model.max_len = 64;
  c.batch_size = 16;
  c.epochs = 4;
  c.lr = 3e-3;
  c.data = std::string(EMBER_TEST_DATA) + "/imdb_small.json";
  c.out = (std::filesystem::temp_directory_path() / (prefix + "_" + std::to_string(::getpid())) / name).string();
  c.quiet = true;
  return c;
}

// The accuracy of probabilities against labels, a review positive when its probability is above one half:
// the tests' own count, to check the library's (imdb::accuracy_of) against.
inline double counted_accuracy(const std::vector<double>& p, const std::vector<int>& labels) {
  int64_t correct = 0;
  for (size_t i = 0; i < p.size(); ++i) correct += int((p[i] > 0.5) == (labels[i] == 1));
  return double(correct) / double(labels.size());
}

// A file's bytes (empty if it cannot be read).
inline std::string file_contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Every regular file of a folder with its bytes, but the lock (which a refused command may have created).
inline std::map<std::string, std::string> folder_files(const std::string& folder) {
  std::map<std::string, std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(folder))
    if (entry.is_regular_file() && entry.path().filename() != ".lock")
      files[entry.path().filename().string()] = file_contents(entry.path().string());
  return files;
}

}  // namespace ember::testing
