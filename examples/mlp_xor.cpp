// The smallest thing Ember can learn: XOR with a two-layer MLP. Read this file first.
// Usage: mlp_xor [--steps N]   (default 500). Exits 1 unless the loss went down.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "nn/layers.h"
#include "optim/optimizer.h"

using namespace ember;

int main(int argc, char** argv) {
  int64_t steps = argc == 3 && std::strcmp(argv[1], "--steps") == 0 ? std::atoll(argv[2]) : 500;
  // The four XOR inputs and their classes: 1 exactly when the two bits differ.
  Tensor x = tensor({0, 0, 0, 1, 1, 0, 1, 1}, {4, 2});
  Tensor y = from_vector<int64_t>({0, 1, 1, 0});

  Generator gen(0);
  nn::Linear hidden(2, 8, gen), out(8, 2, gen);  // weights N(0, 0.02), biases 0
  std::vector<Tensor> params = hidden.parameters();
  for (const Tensor& p : out.parameters()) params.push_back(p);
  optim::Adam adam({{params, 0.0}}, /*lr=*/0.05);

  double first = 0, last = 0;
  for (int64_t step = 0; step < steps; ++step) {
    Tensor logits = out.forward(tanh(hidden.forward(x)));  // [4, 2]: the graph is recorded as we go
    Tensor loss = cross_entropy(logits, y);                // mean of -log softmax(logits)[class]
    adam.zero_grad();
    loss.backward();                                       // gradients of every parameter
    adam.step();                                           // one Adam update
    last = loss.item<float>();
    if (step == 0) first = last;
    if (step % 100 == 0 || step == steps - 1) std::printf("step %4lld  loss %.4f\n", (long long)step, last);
  }
  Tensor predicted = argmax(out.forward(tanh(hidden.forward(x))), 1);
  std::vector<int64_t> p = predicted.to_vector<int64_t>();
  std::printf("XOR: 0,0->%lld 0,1->%lld 1,0->%lld 1,1->%lld (loss %.4f -> %.4f)\n", (long long)p[0], (long long)p[1],
              (long long)p[2], (long long)p[3], first, last);
  return last < first ? 0 : 1;
}
