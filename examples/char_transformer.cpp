// A tiny character-level GPT: a causal Transformer learns to continue Shakespeare's sonnets
// (examples/data/sonnets.txt), then writes a few lines of its own. Read mlp_xor.cpp first.
// Usage: char_transformer [--steps N] [--text PATH] [--out DIR [--resume]]
//   (defaults: 400 steps, examples/data/sonnets.txt; --out: checkpoints and metrics.jsonl there, --resume continues)
// Exits 1 unless the loss went down.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/file_io.h"
#include "nn/transformer.h"
#include "optim/optimizer.h"
#include "optim/train/loop.h"

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

int run(int argc, char** argv) {
  int64_t steps = 400;
  std::string path = "examples/data/sonnets.txt", out;
  bool resume = false;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (std::strcmp(argv[i], "--steps") == 0 && has_value) steps = std::atoll(argv[++i]);
    else if (std::strcmp(argv[i], "--text") == 0 && has_value) path = argv[++i];
    else if (std::strcmp(argv[i], "--out") == 0 && has_value) out = argv[++i];
    else if (std::strcmp(argv[i], "--resume") == 0) resume = true;
    else {
      std::fprintf(stderr, "char_transformer: unknown or incomplete flag '%s'\nusage: char_transformer [--steps N] "
                   "[--text PATH] [--out DIR [--resume]]\n", argv[i]);
      return 2;
    }
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

  // The training: its data (B random windows of the text; the target of each character is the one after it)
  // and its loss. The loop does the rest (optim/train/loop.h): with --out, checkpoints that --resume continues.
  train::Loop loop(model, adam, {.steps = steps, .generator = &gen, .out = out,
                                 .settings = {{"text", path}, {"steps", std::to_string(steps)}}, .resume = resume});
  const auto windows = [&](const train::StepAt&) {
    std::vector<int64_t> input, target;
    for (float u : rand({B}, gen).to_vector<float>()) {
      size_t start = size_t(u * float(text.size() - T - 1));
      for (int64_t t = 0; t < T; ++t) input.push_back(id_of(text[start + t])), target.push_back(id_of(text[start + t + 1]));
    }
    return train::Batch{{"input", from_vector(input, {B, T})}, {"target", from_vector(target)}};
  };
  const auto next_character_loss = [&](const train::Batch& batch) {
    return cross_entropy(model.forward(batch.at("input")).reshape({B * T, V}), batch.at("target"));
  };
  const std::vector<double> losses = loop.run(windows, next_character_loss).step_losses;
  if (losses.empty()) {  // a --resume of a finished run: nothing trained here, nothing to compare
    std::printf("the run in %s had finished (%lld steps)\n", out.c_str(), (long long)steps);
    return 0;
  }
  double first = losses.empty() ? 0 : losses.front(), recent = first;
  for (double value : losses) recent = 0.9 * recent + 0.1 * value;  // smoothed: one batch is noisy

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

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // a missing file, a refused resume: named, not a crash
    std::fprintf(stderr, "char_transformer: %s\n", e.what());
    return 1;
  }
}
