// Determinism: the same seed and thread count give bit-identical losses on the CPU, however long
// the run, and reductions give the same bits however the threads are scheduled. (core/parallel.h
// promises results that depend only on the thread count, never on timing; that is what is
// asserted here.)
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "examples/imdb/trainer.h"
#include "tests/helpers.h"
#include "tests/imdb_helpers.h"

using namespace ember;
using namespace ember::imdb;
using ember::testing::tiny_train_config;
namespace fs = std::filesystem;

namespace {

TrainConfig determinism_config(const std::string& name, int threads) {
  TrainConfig c = tiny_train_config("ember_determinism", name);
  c.model.layers = 2;
  c.epochs = 2;
  c.seed = 7;
  c.threads = threads;
  return c;
}

// Restores the thread count a test changed.
struct ThreadCountGuard {
  int saved = num_threads();
  ~ThreadCountGuard() { set_num_threads(saved); }
};

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

}  // namespace

TEST_CASE("determinism: same seed and thread count give bit-identical losses, for any run length") {
  ThreadCountGuard restore;
  Data data = prepare_data(determinism_config("data", 1));
  for (int threads : {1, 2, 3}) {
    INFO("threads " << threads);
    RunResult first = train_classifier(determinism_config(fmt::format("a{}", threads), threads), data);
    RunResult second = train_classifier(determinism_config(fmt::format("b{}", threads), threads), data);
    REQUIRE(first.step_losses.size() == 26);
    CHECK(same_bits(first.step_losses, second.step_losses));
    CHECK(first.epochs.back().test_accuracy == second.epochs.back().test_accuracy);
    // A shorter run is the same run, cut short: its losses are the first ones, bit for bit.
    TrainConfig shorter = determinism_config(fmt::format("c{}", threads), threads);
    shorter.stop_after = 9;
    RunResult cut = train_classifier(shorter, data);
    REQUIRE(cut.step_losses.size() == 9);
    CHECK(same_bits(cut.step_losses, std::vector<double>(first.step_losses.begin(), first.step_losses.begin() + 9)));
  }
  fs::remove_all(fs::path(determinism_config("x", 1).out).parent_path());
}

TEST_CASE("determinism: reductions and their gradients give the same bits on every repetition") {
  ThreadCountGuard restore;
  set_num_threads(4);  // more threads than this machine may have cores: scheduling varies most
  Generator gen(11);
  Tensor x = randn({300, 1000}, gen);
  Tensor w = randn({1000, 64}, gen);
  Tensor targets = from_vector(std::vector<int64_t>(300, 3));
  auto run = [&] {
    Tensor xg = x.detach().requires_grad_(true);
    Tensor h = layer_norm(xg, ones({1000}), zeros({1000}));
    Tensor loss = cross_entropy(matmul(h, w), targets) + sum(xg) * 1e-6 + mean(max(xg, {1}));
    loss.backward();
    std::vector<float> out = xg.grad().to_vector<float>();
    out.push_back(loss.item<float>());
    out.push_back(sum(x).item<float>());
    out.push_back(var(x).item<float>());
    return out;
  };
  std::vector<float> reference = run();
  for (int i = 0; i < 20; ++i) {
    std::vector<float> again = run();
    REQUIRE(again.size() == reference.size());
    CHECK(std::memcmp(again.data(), reference.data(), reference.size() * sizeof(float)) == 0);
  }
}
