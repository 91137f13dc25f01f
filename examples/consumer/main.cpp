// A program outside Ember's tree, built against an installed Ember (examples/consumer/CMakeLists.txt):
// a Linear layer learns y = 3x - 2 by gradient descent. Exits 1 unless it found the line.
#include <ember/autograd/ops.h>
#include <ember/nn/layers.h>
#include <ember/optim/optimizer.h>

#include <cmath>
#include <cstdio>

using namespace ember;

int main() {
  Tensor x = tensor({-1, -0.5, 0, 0.5, 1, 1.5}, {6, 1});
  Tensor y = x * 3.0 - 2.0;
  Generator gen(0);
  nn::Linear line(1, 1, gen);
  optim::SGD sgd({{line.parameters(), 0.0}}, /*lr=*/0.2);
  for (int step = 0; step < 200; ++step) {
    Tensor error = line.forward(x) - y;
    Tensor loss = mean(error * error);
    sgd.zero_grad();
    loss.backward();
    sgd.step();
  }
  const float w = line.weight.item<float>(), b = line.bias.item<float>();
  std::printf("learned y = %.4f x %+.4f (want 3x - 2)\n", w, b);
  return std::abs(w - 3) < 1e-3 && std::abs(b + 2) < 1e-3 ? 0 : 1;
}
