// A tiny character-level GPT: a causal Transformer learns to continue Shakespeare's sonnets
// (examples/data/sonnets.txt), then writes a few lines of its own. Read mlp_xor.cpp first.
// Usage: char_transformer [--steps N] [--text PATH]   (defaults: 400 steps, examples/data/sonnets.txt)
// Exits 1 unless the loss went down.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/file_io.h"
#include "nn/transformer.h"
#include "optim/optimizer.h"

using namespace ember;

// The model: characters in, for every position a distribution over the next character.
struct CharModel : nn::Module {
  static constexpr int64_t kContext = 64, kDim = 64;
  CharModel(int64_t vocab, Generator& gen) {
    chars = register_module("chars", std::make_shared<nn::Embedding>(vocab, kDim, gen));
    positions = register_module("positions", std::make_shared<nn::Embedding>(kContext, kDim, gen));
    for (int i = 0; i < 2; ++i)  // 2 blocks, 4 heads, no dropout
      blocks.push_back(register_module("block" + std::to_string(i),
                                       std::make_shared<nn::TransformerEncoderLayer>(kDim, 4, 4 * kDim, 0.0, gen)));
    norm = register_module("norm", std::make_shared<nn::LayerNorm>(kDim));
    out = register_module("out", std::make_shared<nn::Linear>(kDim, vocab, gen));
  }
  Tensor forward(const Tensor& ids) const {  // ids [B, T] -> logits [B, T, vocab]
    Tensor x = chars->forward(ids) + positions->forward(arange(ids.size(1)).view({1, ids.size(1)}));
    // causal = true: position t attends to positions <= t only, so it cannot peek at the answer.
    for (const auto& block : blocks) x = block->forward(x, Tensor(), /*causal=*/true);
    return out->forward(norm->forward(x));
  }
  std::shared_ptr<nn::Embedding> chars, positions;
  std::vector<std::shared_ptr<nn::TransformerEncoderLayer>> blocks;
  std::shared_ptr<nn::LayerNorm> norm;
  std::shared_ptr<nn::Linear> out;
};

int main(int argc, char** argv) {
  int64_t steps = 400;
  std::string path = "examples/data/sonnets.txt";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoll(argv[i + 1]);
    if (std::strcmp(argv[i], "--text") == 0) path = argv[i + 1];
  }
  std::string text = read_whole_file(path, "training text");
  std::string alphabet = text;  // the distinct characters, sorted: character <-> id
  std::sort(alphabet.begin(), alphabet.end());
  alphabet.erase(std::unique(alphabet.begin(), alphabet.end()), alphabet.end());
  auto id_of = [&](char c) { return int64_t(alphabet.find(c)); };
  const int64_t V = int64_t(alphabet.size()), T = CharModel::kContext, B = 16;

  Generator gen(0);
  CharModel model(V, gen);
  optim::AdamW adam({{model.parameters(), 0.0}}, 3e-3);
  std::printf("%zu characters, %lld distinct, %lld parameters\n", text.size(), (long long)V, (long long)model.num_parameters());

  double first = 0, recent = 0;
  for (int64_t step = 0; step < steps; ++step) {
    // B random windows of the text; the target of each character is the one after it.
    std::vector<int64_t> input, target;
    std::vector<float> starts = rand({B}, gen).to_vector<float>();
    for (float u : starts) {
      size_t start = size_t(u * float(text.size() - T - 1));
      for (int64_t t = 0; t < T; ++t) input.push_back(id_of(text[start + t])), target.push_back(id_of(text[start + t + 1]));
    }
    Tensor logits = model.forward(from_vector(input, {B, T}));
    Tensor loss = cross_entropy(logits.reshape({B * T, V}), from_vector(target));
    adam.zero_grad();
    loss.backward();
    adam.step();
    double value = loss.item<float>();
    if (step == 0) first = value;
    recent = step == 0 ? value : 0.9 * recent + 0.1 * value;  // smoothed: one batch is noisy
    if (step % 50 == 0 || step == steps - 1) std::printf("step %4lld  loss %.3f (smoothed %.3f)\n", (long long)step, value, recent);
  }

  // Generation: feed the last T characters, sample the next from the softmax, repeat.
  NoGradGuard no_grad;
  std::string sample = "Shall I ";
  for (int i = 0; i < 160; ++i) {
    std::string context = sample.substr(sample.size() > size_t(T) ? sample.size() - T : 0);
    std::vector<int64_t> ids;
    for (char c : context) ids.push_back(id_of(c));
    Tensor last = model.forward(from_vector(ids, {1, int64_t(ids.size())})).select(1, int64_t(ids.size()) - 1);
    std::vector<float> p = softmax(last * 1.25, -1).to_vector<float>();  // temperature 0.8
    float u = rand({1}, gen).item<float>(), cumulative = 0;
    int64_t next = V - 1;
    for (int64_t c = 0; c < V; ++c)
      if ((cumulative += p[size_t(c)]) > u) { next = c; break; }
    sample += alphabet[size_t(next)];
  }
  std::printf("--- sample ---\n%s\n--- loss %.3f -> %.3f (smoothed) ---\n", sample.c_str(), first, recent);
  return recent < first ? 0 : 1;
}
