// Anomaly mode: the first op that makes a NaN or an infinity is named, with its input shapes and
// the module path, in forward and in backward; off, nothing is checked.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/anomaly.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "nn/layers.h"
#include "nn/transformer.h"
#include "tests/helpers.h"

using namespace ember;

namespace {

// outer -> "inner" -> "fc": inner's forward takes log(fc(x) - shift), a NaN where fc(x) < shift.
struct Inner : nn::Module {
  std::shared_ptr<nn::Linear> fc;
  double shift;
  Inner(Generator& gen, double shift) : shift(shift) { fc = register_module("fc", std::make_shared<nn::Linear>(3, 4, gen)); }
  Tensor forward(const Tensor& x) const {
    auto scope = forward_scope();
    return log(fc->forward(x) - shift);
  }
};
struct Outer : nn::Module {
  std::shared_ptr<Inner> inner;
  Outer(Generator& gen, double shift) { inner = register_module("inner", std::make_shared<Inner>(gen, shift)); }
  Tensor forward(const Tensor& x) const {
    auto scope = forward_scope();
    return sum(inner->forward(x));
  }
};

std::string anomaly_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const AnomalyError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("anomaly: off by default, and a NaN then flows through silently") {
  REQUIRE_FALSE(detect_anomaly());  // ctest does not set EMBER_DETECT_ANOMALY
  Generator gen(0);
  Outer model(gen, 10.0);  // fc(x) is near 0, so log(fc(x) - 10) is NaN
  Tensor loss = model.forward(ones({2, 3}));
  CHECK(std::isnan(loss.item<float>()));
  loss.backward();
}

TEST_CASE("anomaly: forward names the op, the input shapes and the module path") {
  DetectAnomalyGuard anomaly;
  Generator gen(0);
  Outer model(gen, 10.0);
  std::string message = anomaly_message([&] { model.forward(ones({2, 3})); });
  INFO(message);
  CHECK(message == "anomaly: op 'log' produced NaN in forward at inner (inputs: [2, 4])");
  // The same model with finite values runs normally, and so does backward.
  Outer fine(gen, -10.0);
  Tensor loss = fine.forward(ones({2, 3}));
  CHECK(std::isfinite(loss.item<float>()));
  loss.backward();
  CHECK(fine.inner->fc->weight.grad().defined());
}

TEST_CASE("anomaly: forward under no-grad is checked too, and an infinity is named as such") {
  DetectAnomalyGuard anomaly;
  NoGradGuard no_grad;
  Tensor x = tensor({1.0, 0.0, 2.0});
  std::string message = anomaly_message([&] { div(ones({3}), x); });
  CHECK(message == "anomaly: op 'div' produced Inf in forward at (outside any module) (inputs: [3], [3])");
  // An input that already held a NaN (made without an op) is pointed out.
  Tensor bad = from_vector(std::vector<float>{1.0f, NAN});
  message = anomaly_message([&] { exp(bad); });
  CHECK(message.find("op 'exp' produced NaN") != std::string::npos);
  CHECK(message.find("input 0 already held NaN") != std::string::npos);
}

TEST_CASE("anomaly: backward names the op whose gradient is not finite and where it ran") {
  DetectAnomalyGuard anomaly;
  // sqrt(0) = 0 is fine forward; its gradient 0.5 / sqrt(0) is infinite.
  struct Root : nn::Module {
    std::shared_ptr<nn::Linear> proj;
    explicit Root(Generator& gen) { proj = register_module("proj", std::make_shared<nn::Linear>(2, 2, gen)); }
    Tensor forward(const Tensor& x) const {
      auto scope = forward_scope();
      return sum(sqrt(proj->forward(x) * 0.0));
    }
  };
  Generator gen(1);
  Root model(gen);
  Tensor loss = model.forward(ones({5, 2}));
  CHECK(loss.item<float>() == 0.0f);
  std::string message = anomaly_message([&] { loss.backward(); });
  INFO(message);
  CHECK(message ==
        "anomaly: op 'sqrt' produced Inf in backward (the gradient of its input 0, shape [5, 2]); the op ran in "
        "forward at (model top level) (inputs: [5, 2])");
}

TEST_CASE("anomaly: a NaN inside the Transformer is traced to its block and layer") {
  DetectAnomalyGuard anomaly;
  nn::ClassifierConfig config;
  config.vocab_size = 10;
  config.max_len = 8;
  config.dim = 8;
  config.heads = 2;
  config.layers = 2;
  config.ffn_dim = 16;
  Generator gen(0);
  nn::TransformerClassifier model(config, gen);
  Tensor tokens = from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor padding = zeros({2, 3}, Dtype::Bool);
  CHECK(std::isfinite(sum(model.forward(tokens, padding)).item<float>()));
  // Poison block 1's first feed-forward weight (outside any op): the first op that shows the
  // NaN is blocks.1.fc1's linear op, and the report says the NaN was already in its input 1 (the
  // weight).
  model.blocks[1]->fc1->weight.detach().data<float>()[0] = NAN;
  std::string message = anomaly_message([&] { model.forward(tokens, padding); });
  INFO(message);
  CHECK(message.find("op 'linear' produced NaN in forward at blocks.1.fc1 (inputs: [2, 3, 8], [16, 8], [16]); "
                     "input 1 already held NaN") != std::string::npos);
  // Overflow inside an op: block 0's first LayerNorm scaled by 1e30 is still finite, and so are
  // q and k (~1e28), but the attention scores q.k overflow: the attention op is named.
  model.blocks[1]->fc1->weight.detach().data<float>()[0] = 0.0f;
  model.blocks[0]->ln1->weight.detach().fill_(1e30);
  message = anomaly_message([&] { model.forward(tokens, padding); });
  INFO(message);
  CHECK(message.find("anomaly: op 'attention' produced ") == 0);
  CHECK(message.find(" in forward at blocks.0.attention (inputs: [2, 3, 24])") != std::string::npos);
}

TEST_CASE("anomaly: the switch and EMBER_DETECT_ANOMALY") {
  CHECK_FALSE(detect_anomaly());
  {
    DetectAnomalyGuard on;
    CHECK(detect_anomaly());
    {
      DetectAnomalyGuard off(false);
      CHECK_FALSE(detect_anomaly());
    }
    CHECK(detect_anomaly());
  }
  CHECK_FALSE(detect_anomaly());
  ::setenv("EMBER_TEST_ANOMALY_VAR", "1", 1);
  CHECK(detect_anomaly_from_environment("EMBER_TEST_ANOMALY_VAR"));
  ::setenv("EMBER_TEST_ANOMALY_VAR", "0", 1);
  CHECK_FALSE(detect_anomaly_from_environment("EMBER_TEST_ANOMALY_VAR"));
  ::unsetenv("EMBER_TEST_ANOMALY_VAR");
  CHECK_FALSE(detect_anomaly_from_environment("EMBER_TEST_ANOMALY_VAR"));
}
