// An encoder-decoder Transformer (nn/seq2seq.h) learns a task whose answer is known: reverse a string of
// digits ("3 1 4 1 5" -> "5 1 4 1 3"), sort it ("3 1 4 1 5" -> "1 1 3 4 5"), or add two numbers ("4 7 + 8 5"
// -> "1 3 2"). The encoder reads the source, the decoder writes the answer one digit at a time, looking back at
// what it wrote (causal self-attention) and at the source (cross-attention). It is scored on held-out strings
// it never trained on, by greedy decoding with the decoder's keys and values cached: a string counts only if
// every digit and the end are right. Read char_transformer.cpp first (one stream, causal).
// Usage: seq2seq_digits [--task reverse|sort|add] [--steps N] [--max-digits N] [--seed N] [--target PCT]
//                       [--out DIR [--resume]]   (--out: checkpoints and metrics.jsonl there; --resume continues)
// (defaults: reverse, 1400 steps, 1 to 10 digits, seed 0, 99). Exits 1 unless the held-out exact-match
// accuracy reaches --target percent.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <set>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "nn/seq2seq.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "optim/train/loop.h"

using namespace ember;

namespace {

// Tokens: 0 padding, 1 begin, 2 end, 3 + d the digit d, 13 '+'.
constexpr int64_t kPad = 0, kBos = 1, kEos = 2, kPlus = 13, kVocab = 14;
int64_t digit(int d) { return 3 + d; }

struct Example {
  std::vector<int64_t> source, answer;  // the answer ends with kEos
};

// One random example of `task` with 1 to max_digits digits (each number of `add`).
Example make_example(const std::string& task, int max_digits, Generator& gen) {
  const std::vector<float> u = rand({2 * max_digits + 2}, gen).to_vector<float>();
  size_t next = 0;
  const auto uniform_int = [&](int n) { return std::min(n - 1, int(u[next++] * float(n))); };
  const auto random_digits = [&](int n) {
    std::vector<int> d(static_cast<size_t>(n));
    for (int& x : d) x = uniform_int(10);
    return d;
  };
  Example e;
  if (task == "add") {
    std::vector<int> a = random_digits(1 + uniform_int(max_digits)), b = random_digits(1 + uniform_int(max_digits));
    for (int x : a) e.source.push_back(digit(x));
    e.source.push_back(kPlus);
    for (int x : b) e.source.push_back(digit(x));
    // The sum, most significant digit first, written as a person writes it (no leading zeros).
    std::vector<int> sum;
    int carry = 0;
    for (size_t i = 0; i < std::max(a.size(), b.size()) || carry; ++i) {
      int s = carry + (i < a.size() ? a[a.size() - 1 - i] : 0) + (i < b.size() ? b[b.size() - 1 - i] : 0);
      sum.push_back(s % 10);
      carry = s / 10;
    }
    while (sum.size() > 1 && sum.back() == 0) sum.pop_back();
    for (auto it = sum.rbegin(); it != sum.rend(); ++it) e.answer.push_back(digit(*it));
  } else {
    std::vector<int> d = random_digits(1 + uniform_int(max_digits));
    for (int x : d) e.source.push_back(digit(x));
    std::vector<int> a = d;
    if (task == "reverse") std::reverse(a.begin(), a.end());
    else std::sort(a.begin(), a.end());
    for (int x : a) e.answer.push_back(digit(x));
  }
  e.answer.push_back(kEos);
  return e;
}

// A batch as padded id tensors: "source" [B, S], "decoder_input" (bos + answer) and "target" (answer + pad) [B, T].
train::Batch make_batch(const std::vector<Example>& examples) {
  size_t S = 0, T = 0;
  for (const Example& e : examples) S = std::max(S, e.source.size()), T = std::max(T, e.answer.size());
  const int64_t B = int64_t(examples.size());
  std::vector<int64_t> source(size_t(B) * S, kPad), input(size_t(B) * T, kPad), target(size_t(B) * T, kPad);
  for (size_t b = 0; b < examples.size(); ++b) {
    const Example& e = examples[b];
    std::copy(e.source.begin(), e.source.end(), source.begin() + long(b * S));
    input[b * T] = kBos;
    for (size_t t = 0; t < e.answer.size(); ++t) {
      target[b * T + t] = e.answer[t];
      if (t + 1 < T) input[b * T + t + 1] = e.answer[t];
    }
  }
  return {{"source", from_vector(source, {B, int64_t(S)})}, {"decoder_input", from_vector(input, {B, int64_t(T)})},
          {"target", from_vector(target, {B, int64_t(T)})}};
}

// The share of `examples` whose greedy decoding is exactly the answer (every token up to and with the end).
double exact_match(const nn::EncoderDecoder& model, const std::vector<Example>& examples, int64_t max_answer) {
  int64_t right = 0;
  for (size_t first = 0; first < examples.size(); first += 250) {
    std::vector<Example> part(examples.begin() + long(first),
                              examples.begin() + long(std::min(examples.size(), first + 250)));
    Tensor out = model.greedy_decode(make_batch(part).at("source"), kBos, kEos, max_answer);
    const int64_t n = out.size(1);
    const std::vector<int64_t> got = out.to_vector<int64_t>();
    for (size_t b = 0; b < part.size(); ++b) {
      const std::vector<int64_t>& want = part[b].answer;
      bool same = int64_t(want.size()) <= n;
      for (size_t t = 0; same && t < want.size(); ++t) same = got[b * size_t(n) + t] == want[t];
      right += same;
    }
  }
  return 100.0 * double(right) / double(examples.size());
}

// Whether a source belongs to the held-out strings: one in eight of every length's strings by a hash (FNV-1a),
// so that training still sees the other seven of each length, the shortest included.
bool held_out_source(const std::vector<int64_t>& source) {
  uint64_t hash = 1469598103934665603ull;
  for (int64_t id : source) hash = (hash ^ uint64_t(id)) * 1099511628211ull;
  return hash % 8 == 0;
}

std::string key_of(const Example& e) { return std::string(e.source.begin(), e.source.end()); }

}  // namespace

int run(int argc, char** argv) {
  std::string task = "reverse";
  int64_t steps = 1400, max_digits = 10, seed = 0;
  double target_pct = 99.0;
  std::string out;
  bool resume = false;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (std::strcmp(argv[i], "--task") == 0 && has_value) task = argv[++i];
    else if (std::strcmp(argv[i], "--steps") == 0 && has_value) steps = std::atoll(argv[++i]);
    else if (std::strcmp(argv[i], "--max-digits") == 0 && has_value) max_digits = std::atoll(argv[++i]);
    else if (std::strcmp(argv[i], "--seed") == 0 && has_value) seed = std::atoll(argv[++i]);
    else if (std::strcmp(argv[i], "--target") == 0 && has_value) target_pct = std::atof(argv[++i]);
    else if (std::strcmp(argv[i], "--out") == 0 && has_value) out = argv[++i];
    else if (std::strcmp(argv[i], "--resume") == 0) resume = true;
    else {
      std::fprintf(stderr, "seq2seq_digits: unknown or incomplete flag '%s'\nusage: seq2seq_digits [--task "
                   "reverse|sort|add] [--steps N] [--max-digits N] [--seed N] [--target PCT] [--out DIR [--resume]]\n", argv[i]);
      return 2;
    }
  }
  if ((task != "reverse" && task != "sort" && task != "add") || steps < 1 || max_digits < 1 || max_digits > 20) {
    std::fprintf(stderr, "seq2seq_digits: --task must be reverse, sort or add; --steps >= 1; --max-digits 1 to 20\n");
    return 2;
  }
  Generator gen(static_cast<uint64_t>(seed));
  // 1,000 distinct held-out strings (drawn as training draws, kept when held_out_source says so); training
  // never sees one.
  std::vector<Example> held_out;
  std::set<std::string> held_keys;
  while (held_out.size() < 1000) {
    Example e = make_example(task, int(max_digits), gen);
    if (held_out_source(e.source) && held_keys.insert(key_of(e)).second) held_out.push_back(e);
  }
  const int64_t max_source = task == "add" ? 2 * max_digits + 1 : max_digits, max_answer = max_digits + 2;

  nn::EncoderDecoderConfig config;
  config.source_vocab = config.target_vocab = kVocab;
  config.max_len = std::max(max_source, max_answer + 1);
  config.dim = 64, config.heads = 4, config.encoder_layers = 2, config.decoder_layers = 2, config.ffn_dim = 256;
  config.dropout = 0.0;
  nn::EncoderDecoder model(config, gen);
  optim::AdamW adam({{model.parameters(), 0.01}}, 1e-3, 0.9, 0.98);
  const optim::Schedule schedule{optim::ScheduleKind::WarmupCosine, 2e-3, steps / 20, steps};
  std::printf("task %s, 1 to %lld digits, %lld parameters, %lld steps of 64 strings\n", task.c_str(),
              (long long)max_digits, (long long)model.num_parameters(), (long long)steps);

  // The training: its data (64 fresh strings a step, never a held-out one) and its loss (the next answer token at
  // every position, padding left out); the loop does the rest (optim/train/loop.h).
  const auto start = std::chrono::steady_clock::now();
  train::Loop loop(model, adam, {.steps = steps, .schedule = schedule, .clip = 1.0, .generator = &gen, .out = out,
                                 .settings = {{"task", task}, {"steps", std::to_string(steps)},
                                              {"max_digits", std::to_string(max_digits)}, {"seed", std::to_string(seed)}},
                                 .resume = resume, .log_every = 100});
  const auto fresh_strings = [&](const train::StepAt&) {
    std::vector<Example> examples;
    while (examples.size() < 64) {
      Example e = make_example(task, int(max_digits), gen);
      if (!held_out_source(e.source)) examples.push_back(e);
    }
    return make_batch(examples);
  };
  const auto next_token_loss = [&](const train::Batch& batch) {
    Tensor logits = model.forward(batch.at("source"), batch.at("decoder_input"));  // [B, T, V]
    return cross_entropy(logits.reshape({-1, kVocab}), batch.at("target").reshape({-1}), /*ignore_index=*/kPad);
  };
  loop.run(fresh_strings, next_token_loss);
  model.eval();
  const double accuracy = exact_match(model, held_out, max_answer);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("held-out exact match: %.1f%% of %zu strings (greedy decoding, cached), %.0f s in all\n", accuracy,
              held_out.size(), seconds);
  // Three held-out examples, as read back.
  for (size_t i = 0; i < 3; ++i) {
    std::vector<Example> one{held_out[i]};
    const std::vector<int64_t> got = model.greedy_decode(make_batch(one).at("source"), kBos, kEos, max_answer).to_vector<int64_t>();
    const auto show = [](const std::vector<int64_t>& ids) {
      std::string s;
      for (int64_t id : ids) {
        if (id == kEos || id == kPad) break;
        s += id == kPlus ? '+' : char('0' + (id - 3));
      }
      return s;
    };
    std::printf("  %s -> %s\n", show(held_out[i].source).c_str(), show(got).c_str());
  }
  return accuracy >= target_pct ? 0 : 1;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // a missing file, a refused resume: named, not a crash
    std::fprintf(stderr, "seq2seq_digits: %s\n", e.what());
    return 1;
  }
}
