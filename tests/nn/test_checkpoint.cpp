// Checkpoints: tensors round-trip through safetensors; corrupt files and mismatched models are clear errors.
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "nn/checkpoint.h"
#include "nn/transformer.h"
#include "tests/helpers.h"

using namespace ember;
using namespace ember::testing;
namespace fs = std::filesystem;

namespace {
std::string temp_path(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("ember_ckpt_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}
}  // namespace

TEST_CASE("checkpoint: a model's weights round-trip exactly, with metadata") {
  Generator gen(1);
  nn::ClassifierConfig config{30, 8, 8, 2, 1, 16, 2, 0.0};
  nn::TransformerClassifier a(config, gen), b(config, gen);
  std::string path = temp_path("model.safetensors");
  nn::save_tensors(path, a.state_dict(), {{"note", "hello"}});
  nn::Metadata meta;
  b.load_state_dict(nn::load_tensors(path, &meta));
  CHECK(meta.at("note") == "hello");
  for (auto& [name, p] : a.state_dict()) CHECK(p.to_vector<float>() == b.state_dict().at(name).to_vector<float>());
  // Mixed dtypes survive too.
  nn::save_tensors(path, {{"i", arange(5)}, {"d", tensor({1.5}, {}, Dtype::Float64)}});
  auto loaded = nn::load_tensors(path);
  CHECK(loaded.at("i").dtype() == Dtype::Int64);
  check_values(loaded.at("i"), {0, 1, 2, 3, 4});
  CHECK(loaded.at("d").item<double>() == 1.5);
}

TEST_CASE("checkpoint: missing tensors, wrong shapes and corrupt files are clear errors") {
  Generator gen(1);
  nn::ClassifierConfig config{30, 8, 8, 2, 1, 16, 2, 0.0};
  nn::TransformerClassifier model(config, gen);
  auto state = model.state_dict();
  state.erase("head.bias");
  check_error([&] { model.load_state_dict(state); }, "parameter 'head.bias' is missing");
  state = model.state_dict();
  state["head.bias"] = zeros({3});
  check_error([&] { model.load_state_dict(state); }, "'head.bias' has shape [3] in the state, [2] in the model");
  state = model.state_dict();
  state["extra"] = zeros({1});
  check_error([&] { model.load_state_dict(state); }, "unexpected: 'extra'");

  std::string path = temp_path("corrupt.safetensors");
  nn::save_tensors(path, model.state_dict());
  auto size = fs::file_size(path);
  fs::resize_file(path, size - 10);  // truncated body
  check_error([&] { nn::load_tensors(path); }, path);
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    uint64_t n = 20;
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << "{not json at all....";
  }
  check_error([&] { nn::load_tensors(path); }, path);
  check_error([&] { nn::load_tensors(temp_path("missing.safetensors")); }, "missing.safetensors");
}

TEST_CASE("checkpoint: a failed save keeps the previous file") {
  std::string path = temp_path("keep.safetensors");
  nn::save_tensors(path, {{"w", tensor({1, 2, 3})}});
  // A tensor name the format forbids makes the save fail before the rename.
  check_error([&] { nn::save_tensors(path, {{"__metadata__", tensor({9})}}); }, "__metadata__");
  check_values(nn::load_tensors(path).at("w"), {1, 2, 3});
}

TEST_CASE("checkpoint: NaN and infinite weights are refused, naming the tensor and the element") {
  std::string path = temp_path("nonfinite.safetensors");
  for (double bad : {NAN, INFINITY, -INFINITY}) {
    nn::save_tensors(path, {{"ok", tensor({1, 2})}, {"w", tensor({1, 2, bad, 4})}});
    check_error([&] { nn::load_weights(path); }, "tensor 'w' (shape [4]) holds");
    check_error([&] { nn::load_weights(path); }, "at element 2");
    nn::save_tensors(path, {{"d", tensor({bad}, {}, Dtype::Float64)}});
    check_error([&] { nn::load_weights(path); }, "tensor 'd'");
  }
  nn::save_tensors(path, {{"w", tensor({-INFINITY})}});
  check_error([&] { nn::load_weights(path); }, "tensor 'w' (shape [1]) holds -Inf at element 0: not a usable weight");
  check_error([&] { nn::check_all_finite({{"w", tensor({0, NAN})}}, "after step 7"); }, "after step 7: tensor 'w'");
  nn::check_all_finite({{"w", tensor({0, 1})}, {"i", arange(3)}}, "fine");  // no throw
}

TEST_CASE("checkpoint: the general loader reads NaNs and infinities as they are (masks, a diverged run)") {
  std::string path = temp_path("masks.safetensors");
  // An additive attention mask holds -inf on purpose; a diverged run's tensors hold NaNs to look at.
  nn::save_tensors(path, {{"mask", tensor({0, -INFINITY, -INFINITY, 0}, {2, 2})},
                          {"diverged", tensor({NAN, INFINITY, 1.5}, {3}, Dtype::Float64)}},
                   {{"note", "kept"}});
  nn::Metadata meta;
  nn::TensorMap loaded = nn::load_tensors(path, &meta);
  CHECK(meta.at("note") == "kept");
  std::vector<float> mask = loaded.at("mask").to_vector<float>();
  CHECK(mask[0] == 0.0f);
  CHECK(mask[1] == -INFINITY);
  CHECK(mask[2] == -INFINITY);
  CHECK(mask[3] == 0.0f);
  std::vector<double> diverged = loaded.at("diverged").to_vector<double>();
  CHECK(std::isnan(diverged[0]));
  CHECK(diverged[1] == INFINITY);
  CHECK(diverged[2] == 1.5);
  check_error([&] { nn::load_weights(path); }, "tensor 'diverged' (shape [3]) holds NaN at element 0");
}
