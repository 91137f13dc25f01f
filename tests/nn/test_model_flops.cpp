// The model FLOPs of nn/model_flops.h against a hand count, product by product, of a tiny model.
#include <doctest/doctest.h>

#include <cstdint>

#include "nn/model_flops.h"

using namespace ember;

namespace {

// 2 FLOPs per multiply-add of an [m, k] @ [k, n] product.
double product(double m, double k, double n) { return 2 * m * k * n; }

}  // namespace

TEST_CASE("model flops: a tiny classifier's forward and training step, counted product by product") {
  nn::ClassifierConfig config;
  config.dim = 4;
  config.heads = 2;
  config.layers = 1;
  config.ffn_dim = 8;
  config.classes = 2;
  const int64_t L = 3;  // one sequence of 3 tokens; each head has 4 / 2 = 2 dims
  const double by_hand = product(L, 4, 12)          // QKV: [3, 4] @ [4, 12]
                         + product(L, 4, 4)         // output projection
                         + product(L, 4, 8)         // fc1
                         + product(L, 8, 4)         // fc2
                         + 2 * product(L, 2, L)     // Q K^T, each of the 2 heads: [3, 2] @ [2, 3]
                         + 2 * product(L, L, 2)     // P V, each head: [3, 3] @ [3, 2]
                         + product(1, 4, 2);        // the head on the pooled vector
  CHECK(by_hand == 928);
  CHECK(nn::forward_flops(config, L) == by_hand);
  CHECK(nn::training_step_flops(config, 5, L) == 3 * 5 * by_hand);  // forward + backward = 3 forwards
  config.layers = 2;  // the blocks repeat; the head does not
  CHECK(nn::forward_flops(config, L) == 2 * (by_hand - 16) + 16);
}

TEST_CASE("model flops: the large preset's step (dim 512, 6 layers, FFN 2048, 64 x 512 tokens)") {
  nn::ClassifierConfig config;
  config.dim = 512;
  config.heads = 8;
  config.layers = 6;
  config.ffn_dim = 2048;
  // Per token and layer 8 d^2 + 4 d f = 6,291,456, attention 4 L d = 1,048,576: 44.04 MFLOP per token
  // forward, 132.1 MFLOP per token trained, 4.33 TFLOP per step of 32,768 tokens.
  const double per_token = 6 * (8.0 * 512 * 512 + 4.0 * 512 * 2048 + 4.0 * 512 * 512);
  CHECK(nn::training_step_flops(config, 64, 512) == 3 * (64 * (512 * per_token + 2 * 512 * 2)));
  CHECK(nn::training_step_flops(config, 64, 512) == doctest::Approx(4.329e12).epsilon(1e-3));
}

TEST_CASE("model flops: sliding-window attention counts the pairs its pattern attends") {
  nn::ClassifierConfig config;
  CHECK(nn::attended_pairs(config, 5) == 25);  // full
  config.attention_window = 1;
  config.attention_global = 1;
  // Query 0 is global (5 keys); 1 sees 0-2; 2 sees 1-3 and 0; 3 sees 2-4 and 0; 4 sees 3-4 and 0.
  CHECK(nn::attended_pairs(config, 5) == 5 + 3 + 4 + 4 + 3);
  config.attention_global = 0;
  CHECK(nn::attended_pairs(config, 5) == 2 + 3 + 3 + 3 + 2);
  config.attention_window = 4;  // the band covers every key: full
  CHECK(nn::attended_pairs(config, 5) == 25);
  CHECK(nn::attended_pairs(config, 0) == 0);
}
