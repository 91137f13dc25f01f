// Agreement between ranks: strings gathered and broadcast, the settings check naming the setting
// and ranks that differ, one rank's error raised on every rank, named tensors broadcast.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/distributed/agreement.h"
#include "dist_helpers.h"
#include "helpers.h"

using namespace ember;
using namespace ember::testing;

TEST_CASE("agreement: strings of different lengths gathered in rank order, and broadcast") {
  const int r = world().rank();
  std::vector<std::string> all = distributed::all_gather_strings(world(), "rank " + std::string(size_t(r), 'x'));
  REQUIRE(all.size() == size_t(world().size()));
  for (int q = 0; q < world().size(); ++q) CHECK(all[size_t(q)] == "rank " + std::string(size_t(q), 'x'));
  CHECK(distributed::broadcast_string(world(), r == 0 ? "from rank 0" : "ignored") == "from rank 0");
  CHECK(distributed::broadcast_string(world(), "", 0).empty());
}

TEST_CASE("agreement: the settings check passes when all agree and names the first that differs") {
  std::map<std::string, std::string> settings{{"batch_size", "32"}, {"lr", "0.0005"}, {"seed", "0"}};
  distributed::check_same_settings(world(), settings);
  if (world().size() < 2) return;
  std::map<std::string, std::string> mine = settings;
  if (world().rank() == 1) mine["lr"] = "0.001";
  check_error([&] { distributed::check_same_settings(world(), mine); },
              "the ranks were started with different settings: lr is 0.0005 on rank 0 but 0.001 on rank 1");
  mine = settings;
  if (world().rank() == world().size() - 1) mine.erase("seed");
  check_error([&] { distributed::check_same_settings(world(), mine); },
              fmt::format("seed is set on rank 0 but not on rank {}", world().size() - 1));
}

TEST_CASE("agreement: an error on the root is raised on every rank; success on none") {
  int ran = 0;
  distributed::on_root(world(), [&] { ++ran; });
  CHECK(ran == (world().rank() == 0 ? 1 : 0));
  check_error([&] { distributed::on_root(world(), [] { fail("checkpoint 'x' is damaged"); }); },
              "checkpoint 'x' is damaged");
}

TEST_CASE("agreement: named tensors broadcast from the root, empty ones included") {
  std::map<std::string, Tensor> tensors;
  if (world().rank() == 0) {
    tensors["model.weight"] = arange(0, 6, 1, Dtype::Float32).view({2, 3});
    tensors["optim.step"] = from_vector(std::vector<int64_t>{42});
    tensors["empty"] = zeros({0, 4});
  } else {
    tensors["stale"] = ones({1});
  }
  distributed::broadcast_tensors(world(), tensors);
  REQUIRE(tensors.size() == 3);
  check_values(tensors.at("model.weight"), {0, 1, 2, 3, 4, 5}, 0);
  CHECK(tensors.at("model.weight").shape() == Shape{2, 3});
  CHECK(tensors.at("optim.step").dtype() == Dtype::Int64);
  CHECK(tensors.at("optim.step").item<int64_t>() == 42);
  CHECK(tensors.at("empty").shape() == Shape{0, 4});
}
