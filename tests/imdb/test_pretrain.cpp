// Masked-token pretraining (examples/imdb/pretrain.h) and a classifier started from it (--init): the masks'
// distribution, the loss against a hand computation, the tied projection's gradient, exact resume, the
// emulated GPU, the encoder's weights loaded exactly, and every bad --init refused with nothing overwritten.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/distributed/world.h"
#include "core/file_io.h"
#include "examples/imdb/encoder_file.h"
#include "examples/imdb/masked_token_model.h"
#include "examples/imdb/masking.h"
#include "examples/imdb/pretrain.h"
#include "examples/imdb/trainer.h"
#include "nn/checkpoint.h"
#include "tests/helpers.h"
#include "tests/imdb_helpers.h"

using namespace ember;
using namespace ember::imdb;
using ember::testing::check_error;
using ember::testing::file_contents;
using ember::testing::folder_files;
namespace fs = std::filesystem;

namespace {

// A batch of `rows` reviews of ids in [2, 1000), row r holding 256 - r real tokens (the rest padding).
Batch word_batch(int64_t rows, int64_t len = 256) {
  Batch b;
  b.batch = rows;
  b.seq_len = len;
  SplitMix64 g(42);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < len; ++t) {
      const bool real = t < len - r;
      b.tokens.push_back(real ? 2 + int64_t(g.below(998)) : 0);
      b.key_mask.push_back(real ? 1 : 0);
      b.real_tokens += real ? 1 : 0;
      if (t == 0) b.labels.push_back(0);
    }
  return b;
}

PretrainConfig tiny_pretrain(const std::string& name) {
  PretrainConfig c;
  c.train = ember::testing::tiny_train_config("ember_pretrain", name);
  c.train.model.max_len = 32;
  c.train.batch_size = 16;
  c.train.vocab_words = 300;
  c.train.epochs = 1;
  c.steps = 12;
  return c;
}

TrainConfig tiny_classifier(const std::string& name, const PretrainConfig& from) {
  TrainConfig c = ember::testing::tiny_train_config("ember_pretrain", name);
  c.model = from.train.model;
  c.vocab_words = from.train.vocab_words;
  c.epochs = 1;
  c.init = from.train.out;
  return c;
}

// The "step" lines of a metrics file.
std::vector<std::string> step_lines(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (line.find("\"kind\":\"step\"") != std::string::npos) lines.push_back(line);
  return lines;
}

// Resumes `parts` (stopped after `first`) to its end; the two parts' step losses, joined.
std::vector<double> resume_to_end(PretrainConfig& parts, const PretrainResult& first) {
  parts.train.stop_after = 0;
  parts.train.resume = true;
  const PretrainResult second = pretrain(parts, *distributed::make_single_process_group());
  CHECK(second.finished);
  std::vector<double> joined = first.step_losses;
  joined.insert(joined.end(), second.step_losses.begin(), second.step_losses.end());
  return joined;
}

}  // namespace

TEST_CASE("pretrain masking: 15% of the real tokens chosen, of those 80% [MASK], 10% a random word, 10% kept") {
  const Batch batch = word_batch(64);
  const int64_t mask_id = 1000, vocab = 1001;
  const MaskedBatch m = mask_tokens(batch, mask_id, 2, vocab, /*seed=*/7, /*step=*/3);
  REQUIRE(m.positions.size() == m.targets.size());
  int64_t masked = 0, random = 0, kept = 0;
  for (size_t i = 0; i < m.positions.size(); ++i) {
    const size_t p = size_t(m.positions[i]);
    REQUIRE(batch.key_mask[p] == 1);  // padding is never chosen
    CHECK(m.targets[i] == batch.tokens[p]);
    if (i > 0) CHECK(m.positions[i] > m.positions[i - 1]);
    const int64_t input = m.inputs[p];
    if (input == mask_id) ++masked;
    else if (input == batch.tokens[p]) ++kept;
    else {
      ++random;
      CHECK(input >= 2);
      CHECK(input < mask_id);
    }
  }
  // Positions not chosen keep their token.
  int64_t changed = 0;
  for (size_t p = 0; p < m.inputs.size(); ++p) changed += m.inputs[p] != batch.tokens[p];
  CHECK(changed == masked + random);
  // Binomial spreads: 16,352 real tokens, sigma of the share 0.0028; about 2,450 chosen, sigma of 80% 0.008, of 10% 0.006.
  const double chosen = double(m.positions.size()), real = double(batch.real_tokens);
  CHECK(std::abs(chosen / real - 0.15) < 0.01);
  CHECK(std::abs(double(masked) / chosen - 0.8) < 0.03);
  CHECK(std::abs(double(random) / chosen - 0.1) < 0.025);
  CHECK(std::abs(double(kept) / chosen - 0.1) < 0.025);
  // The same seed and step: the same masks; another step: others.
  CHECK(mask_tokens(batch, mask_id, 2, vocab, 7, 3).inputs == m.inputs);
  CHECK(mask_tokens(batch, mask_id, 2, vocab, 7, 4).positions != m.positions);
  CHECK(mask_tokens(batch, mask_id, 2, vocab, 8, 3).positions != m.positions);
}

TEST_CASE("pretrain masking: a row's masks do not depend on the rows beside it (ranks' slices); a batch always gets one") {
  const Batch batch = word_batch(6);
  const MaskedBatch whole = mask_tokens(batch, 1000, 2, 1001, 1, 0);
  // Rows 2..3 alone, as a rank would hold them, with first_row = 2.
  Batch part;
  part.batch = 2;
  part.seq_len = batch.seq_len;
  part.tokens.assign(batch.tokens.begin() + 2 * 256, batch.tokens.begin() + 4 * 256);
  part.key_mask.assign(batch.key_mask.begin() + 2 * 256, batch.key_mask.begin() + 4 * 256);
  part.real_tokens = 254 + 253;
  const MaskedBatch slice = mask_tokens(part, 1000, 2, 1001, 1, 0, /*first_row=*/2);
  CHECK(std::equal(slice.inputs.begin(), slice.inputs.end(), whole.inputs.begin() + 2 * 256));
  // A one-token review: chosen only 15% of the time by the draws, but a batch always has a masked token.
  Batch one;
  one.batch = 1;
  one.seq_len = 1;
  one.tokens = {9};
  one.key_mask = {1};
  one.real_tokens = 1;
  for (int64_t step = 0; step < 20; ++step) CHECK(mask_tokens(one, 1000, 2, 1001, 1, step).positions.size() == 1);
  check_error([&] { mask_tokens(one, 2, 2, 3, 1, 0); }, "no word to draw from");
}

TEST_CASE("pretrain windows: whole reviews, every window full but a short review's, the last ending at the review's end") {
  std::vector<int32_t> long_review(10);
  for (int32_t i = 0; i < 10; ++i) long_review[size_t(i)] = i + 2;
  const auto windows = review_windows({{2, 3}, long_review, std::vector<int32_t>(8, 5)}, 4);
  REQUIRE(windows.size() == 1 + 3 + 2);
  CHECK(windows[0] == std::vector<int32_t>{2, 3});
  CHECK(windows[1] == std::vector<int32_t>{2, 3, 4, 5});
  CHECK(windows[2] == std::vector<int32_t>{6, 7, 8, 9});
  CHECK(windows[3] == std::vector<int32_t>{8, 9, 10, 11});  // overlaps the one before; the review's last 4 tokens
  CHECK(windows[4] == std::vector<int32_t>(4, 5));
  CHECK(windows[5] == std::vector<int32_t>(4, 5));
}

TEST_CASE("masked-token model: the loss at the masked positions only equals a hand computation") {
  nn::ClassifierConfig config;
  config.vocab_size = 6;
  config.max_len = 4;
  config.dim = 4;
  config.heads = 1;
  config.layers = 0;  // the encoder is then the embeddings and the final LayerNorm: computable by hand
  config.ffn_dim = 4;
  config.dropout = 0;
  Generator gen(3);
  MaskedTokenModel model(config, gen);
  // Non-trivial LayerNorm gains and output biases.
  auto state = model.state_dict();
  NoGradGuard no_grad_while_set;
  state["final_norm.weight"].copy_(tensor({1.5, 0.5, -1.0, 2.0}));
  state["mlm_norm.bias"].copy_(tensor({0.1, -0.2, 0.3, 0.0}));
  state["mlm_bias"].copy_(tensor({0.0, 0.5, -0.5, 1.0, 0.25, -1.0}));
  state["mlm_dense.bias"].copy_(tensor({0.05, 0.0, -0.05, 0.1}));
  const std::vector<int64_t> tokens = {2, 5, 3, 0, 4, 2, 5, 1};  // [2, 4]; [0][3] is padding
  Tensor ids = from_vector(tokens, {2, 4});
  Tensor padding = from_vector(std::vector<int64_t>{0, 0, 0, 1, 0, 0, 0, 0}, {2, 4}).to(Dtype::Bool);
  const std::vector<int64_t> positions = {1, 4, 6}, targets = {3, 2, 4};
  MaskedTokenModel::Output out = model.forward(ids, padding, from_vector(positions), from_vector(targets));

  auto w = [&](const std::string& name) { return state[name].to_vector<double>(); };
  const auto E = w("token_embedding.weight"), P = w("position_embedding.weight");
  const auto g1 = w("final_norm.weight"), b1 = w("final_norm.bias"), Wd = w("mlm_dense.weight"), bd = w("mlm_dense.bias");
  const auto g2 = w("mlm_norm.weight"), b2 = w("mlm_norm.bias"), bo = w("mlm_bias");
  auto layer_norm = [](std::vector<double> x, const std::vector<double>& g, const std::vector<double>& b) {
    double mean = 0, var = 0;
    for (double v : x) mean += v / 4;
    for (double v : x) var += (v - mean) * (v - mean) / 4;
    for (size_t i = 0; i < 4; ++i) x[i] = (x[i] - mean) / std::sqrt(var + 1e-5) * g[i] + b[i];
    return x;
  };
  double loss = 0;
  int64_t correct = 0;
  for (size_t k = 0; k < positions.size(); ++k) {
    const int64_t p = positions[k], token = tokens[size_t(p)], t = p % 4;
    std::vector<double> x(4), h(4);
    for (size_t d = 0; d < 4; ++d) x[d] = E[size_t(token * 4) + d] + P[size_t(t * 4) + d];
    x = layer_norm(x, g1, b1);
    for (size_t o = 0; o < 4; ++o) {
      double z = bd[o];
      for (size_t i = 0; i < 4; ++i) z += Wd[o * 4 + i] * x[i];
      h[o] = 0.5 * z * (1 + std::erf(z / std::sqrt(2.0)));
    }
    h = layer_norm(h, g2, b2);
    std::vector<double> logits(6);
    double top = -1e300, sum = 0;
    int64_t best = 0;
    for (size_t v = 0; v < 6; ++v) {
      logits[v] = bo[v];
      for (size_t d = 0; d < 4; ++d) logits[v] += h[d] * E[v * 4 + d];  // tied: the token embedding's row v
      if (logits[v] > top) top = logits[v], best = int64_t(v);
    }
    for (double l : logits) sum += std::exp(l - top);
    loss += -(logits[size_t(targets[k])] - top - std::log(sum)) / double(positions.size());
    correct += best == targets[k];
  }
  CHECK(out.logits.shape() == Shape({3, 6}));
  CHECK(std::abs(out.loss.item<float>() - loss) < 1e-5);
  CHECK(out.correct.item<double>() == double(correct));
  check_error([&] { model.forward(ids, padding, from_vector(std::vector<int64_t>{}), from_vector(std::vector<int64_t>{})); },
              "M >= 1");
}

TEST_CASE("masked-token model: the tied projection's gradient is the finite differences' (both of the embedding's uses)") {
  nn::ClassifierConfig config;
  config.vocab_size = 7;
  config.max_len = 5;
  config.dim = 8;
  config.heads = 2;
  config.layers = 1;
  config.ffn_dim = 8;
  config.dropout = 0;
  Generator gen(11);
  MaskedTokenModel model(config, gen);
  model.to(Dtype::Float64);
  Tensor ids = from_vector(std::vector<int64_t>{2, 6, 3, 4, 1, 5, 2, 6, 0, 0}, {2, 5});
  Tensor padding = from_vector(std::vector<int64_t>{0, 0, 0, 0, 0, 0, 0, 0, 1, 1}, {2, 5}).to(Dtype::Bool);
  Tensor positions = from_vector(std::vector<int64_t>{1, 3, 6}), targets = from_vector(std::vector<int64_t>{3, 5, 2});
  auto loss_of = [&] { return model.forward(ids, padding, positions, targets).loss.item<double>(); };
  model.zero_grad();
  model.forward(ids, padding, positions, targets).loss.backward();
  Tensor E = model.encoder->token_embedding->weight;
  const std::vector<double> grad = E.grad().to_vector<double>();
  // Rows used as inputs only (6), as outputs only (0: never an input or target), as both (2, 3, 5).
  int64_t checked = 0;
  for (int64_t row : {0, 2, 3, 5, 6})
    for (int64_t d : {0, 5}) {
      const int64_t i = row * config.dim + d;
      double* value = E.data<double>() + i;
      const double saved = *value, eps = 1e-6;
      *value = saved + eps;
      const double up = loss_of();
      *value = saved - eps;
      const double down = loss_of();
      *value = saved;
      INFO("row " << row << " dim " << d);
      CHECK(std::abs((up - down) / (2 * eps) - grad[size_t(i)]) < 1e-7 * (1 + std::abs(grad[size_t(i)])));
      CHECK(grad[size_t(i)] != 0);  // every row gets the output projection's gradient at least
      ++checked;
    }
  CHECK(checked == 10);
}

TEST_CASE("pretrain: a run stopped and resumed logs exactly the uninterrupted run's steps and writes the same encoder") {
  PretrainConfig whole = tiny_pretrain("whole");
  whole.train.save_every = 5;
  const PretrainResult a = pretrain(whole, *distributed::make_single_process_group());
  REQUIRE(a.finished);
  REQUIRE(a.step_losses.size() == 12);
  CHECK(a.step_losses.back() < a.step_losses.front());
  CHECK(fs::exists(whole.train.out + "/report.html"));
  CHECK(file_contents(whole.train.out + "/report.html").find("pretrain-accuracy") != std::string::npos);

  PretrainConfig parts = tiny_pretrain("parts");
  parts.train.save_every = 5;
  parts.train.stop_after = 7;
  const PretrainResult first = pretrain(parts, *distributed::make_single_process_group());
  CHECK(!first.finished);
  CHECK(first.steps == 7);
  CHECK(resume_to_end(parts, first) == a.step_losses);
  CHECK(step_lines(parts.train.out + "/metrics.jsonl") == step_lines(whole.train.out + "/metrics.jsonl"));
  CHECK(file_contents(parts.train.out + "/encoder.safetensors") == file_contents(whole.train.out + "/encoder.safetensors"));

  // A refused resume (other settings; a truncated checkpoint) changes nothing in the folder.
  const auto before = folder_files(parts.train.out);
  PretrainConfig other = parts;
  other.steps = 13;
  check_error([&] { pretrain(other, *distributed::make_single_process_group()); }, "other settings: pretrain_steps");
  const std::string checkpoint = parts.train.out + "/checkpoint.safetensors";
  const std::string saved = file_contents(checkpoint);
  write_file_atomically(checkpoint, saved.substr(0, saved.size() / 2));
  check_error([&] { pretrain(parts, *distributed::make_single_process_group()); }, "checkpoint.safetensors");
  write_file_atomically(checkpoint, saved);
  CHECK(folder_files(parts.train.out) == before);
}

TEST_CASE("pretrain --resume: a checkpoint from before a setting was recorded resumes as that setting's old value") {
  PretrainConfig whole = tiny_pretrain("old-whole");
  const PretrainResult a = pretrain(whole, *distributed::make_single_process_group());
  REQUIRE(a.finished);

  PretrainConfig parts = tiny_pretrain("old-parts");
  parts.train.save_every = 5;
  parts.train.stop_after = 7;
  const PretrainResult first = pretrain(parts, *distributed::make_single_process_group());
  REQUIRE(first.steps == 7);
  // The checkpoint as a build before --bigrams and --encoder-lr-scale wrote it: neither key, sealed without them.
  const std::string checkpoint = parts.train.out + "/checkpoint.safetensors";
  auto rewrite_without = [&](const std::vector<std::string>& keys) {
    nn::Metadata meta;
    nn::TensorMap tensors = nn::load_tensors(checkpoint, &meta);
    for (const std::string& key : keys) REQUIRE(meta.erase(key) == 1);
    meta[kContentKey] = content_fingerprint(tensors, meta);
    nn::save_tensors(checkpoint, tensors, meta);
  };
  const std::string current = file_contents(checkpoint);
  rewrite_without({"bigram_buckets", "encoder_lr_scale"});
  REQUIRE(file_contents(checkpoint) != current);
  CHECK(resume_to_end(parts, first) == a.step_losses);
  CHECK(file_contents(parts.train.out + "/encoder.safetensors") == file_contents(whole.train.out + "/encoder.safetensors"));

  // A setting every pretraining checkpoint records, missing: refused by name, the folder unchanged.
  rewrite_without({"lr"});
  const auto before = folder_files(parts.train.out);
  check_error([&] { pretrain(parts, *distributed::make_single_process_group()); }, "checkpoint metadata has no 'lr'");
  CHECK(folder_files(parts.train.out) == before);
}

TEST_CASE("pretrain --init: the classifier starts from the encoder's weights exactly, its head as initialised") {
  PretrainConfig p = tiny_pretrain("for-init");
  pretrain(p, *distributed::make_single_process_group());
  const PretrainedEncoder encoder = load_encoder(p.train.out);
  TrainConfig c = tiny_classifier("init-exact", p);
  c.model.vocab_size = encoder.vocabulary.size();
  c.model.max_len = 16;  // fewer positions than the pretraining's 32: the first 16 rows
  Generator gen(0);
  nn::TransformerClassifier model(c.model, gen);
  const Tensor head_before = model.head->weight.detach().clone();
  const Data data{encoder.vocabulary, {}, {}, {}, {}, {}, {}, {}, {}};  // the classifier's vocabulary, no reviews
  CHECK(init_from_encoder(encoder, c, data, model).empty());  // no warning
  int64_t compared = 0;
  for (const auto& [name, t] : model.state_dict()) {
    if (name.rfind("head.", 0) == 0) continue;
    Tensor expected = encoder.tensors.at(name);
    if (name == "token_embedding.weight" || name == "position_embedding.weight") expected = expected.narrow(0, 0, t.size(0));
    CHECK_MESSAGE(t.to_vector<float>() == expected.contiguous().to_vector<float>(), name);
    ++compared;
  }
  CHECK(compared == int64_t(model.state_dict().size()) - 2);
  CHECK(model.head->weight.to_vector<float>() == head_before.to_vector<float>());
  CHECK(encoder.tensors.at("token_embedding.weight").size(0) == encoder.vocabulary.size() + 1);  // [MASK]'s row
  // And through train(): a pretrained start fine-tunes (its first loss is not the random start's).
  const RunResult pretrained = train_classifier(tiny_classifier("init-run", p));
  TrainConfig random_start = tiny_classifier("random-run", p);
  random_start.init.clear();
  random_start.vocab_words = p.train.vocab_words;
  const RunResult random = train_classifier(random_start);
  REQUIRE(pretrained.finished);
  CHECK(pretrained.step_losses.front() != random.step_losses.front());
}

TEST_CASE("pretrain --init --encoder-lr-scale: 0 keeps the pretrained encoder exactly while the head learns") {
  PretrainConfig p = tiny_pretrain("for-scale");
  pretrain(p, *distributed::make_single_process_group());
  const PretrainedEncoder encoder = load_encoder(p.train.out);
  TrainConfig frozen = tiny_classifier("scale-0", p);
  frozen.encoder_lr_scale = 0.0;
  REQUIRE(train_classifier(frozen).finished);
  TrainConfig gentle = tiny_classifier("scale-half", p);
  gentle.encoder_lr_scale = 0.5;
  REQUIRE(train_classifier(gentle).finished);
  const SavedRun run0 = load_run(frozen.out), run_half = load_run(gentle.out);
  CHECK(run0.config.encoder_lr_scale == 0.0);  // in the model's settings (and the checkpoint's)
  Generator gen(frozen.seed);
  nn::TransformerClassifier initial(run0.config.model, gen);  // the head as initialised (--init keeps it)
  const auto initial_state = initial.state_dict(), half_state = run_half.model->state_dict();
  int64_t encoder_tensors = 0;
  for (const auto& [name, t] : run0.model->state_dict()) {
    const std::vector<float> half = half_state.at(name).to_vector<float>();
    if (name.rfind("head.", 0) == 0) {  // the head learnt at the full rate
      CHECK_MESSAGE(t.to_vector<float>() != initial_state.at(name).to_vector<float>(), name);
      continue;
    }
    ++encoder_tensors;
    Tensor expected = encoder.tensors.at(name);
    if (name == "token_embedding.weight" || name == "position_embedding.weight") expected = expected.narrow(0, 0, t.size(0));
    CHECK_MESSAGE(t.to_vector<float>() == expected.contiguous().to_vector<float>(), name);  // not moved at scale 0
    CHECK_MESSAGE(half != expected.contiguous().to_vector<float>(), name);                  // moved at 0.5
  }
  CHECK(encoder_tensors == int64_t(initial_state.size()) - 2);
}

TEST_CASE("pretrain --init --bigrams: the pairs start at zero, so the first step is the one without them; then they learn") {
  PretrainConfig p = tiny_pretrain("for-bigrams");
  pretrain(p, *distributed::make_single_process_group());
  TrainConfig with = tiny_classifier("bigrams", p), without = tiny_classifier("no-bigrams", p);
  with.model.bigram_buckets = 211;
  with.encoder_lr_scale = 0.5;  // the pairs are new: they learn at the head's rate, not the encoder's
  without.encoder_lr_scale = 0.5;
  const RunResult a = train_classifier(with), b = train_classifier(without);
  REQUIRE(a.step_losses.size() == b.step_losses.size());
  REQUIRE(a.step_losses.size() > 2);
  CHECK(a.step_losses[0] == b.step_losses[0]);
  CHECK(a.step_losses.back() != b.step_losses.back());
  const SavedRun run = load_run(with.out);
  CHECK(run.config.model.bigram_buckets == 211);
  const std::vector<optim::ParamGroup> groups = parameter_groups(*run.model, 0.01, 0.5);
  std::vector<double> scales_of_pairs;
  for (const optim::ParamGroup& g : groups)
    for (const Tensor& t : g.params)
      if (t.raw_data() == run.model->bigram_embedding->weight.raw_data()) scales_of_pairs.push_back(g.lr_scale);
  CHECK(scales_of_pairs == std::vector<double>{1.0});
}

TEST_CASE("pretrain --init faults: another vocabulary or size, a damaged encoder, a classifier's run: refused, nothing overwritten") {
  PretrainConfig p = tiny_pretrain("faults-source");
  pretrain(p, *distributed::make_single_process_group());
  // An earlier classifier run in the folder the bad --init runs write to: it must stay as it is.
  TrainConfig c = tiny_classifier("faults-out", p);
  c.init.clear();
  train_classifier(c);
  const auto before = folder_files(c.out);
  auto refused = [&](TrainConfig bad, const std::string& fragment) {
    check_error([&] { train_classifier(bad); }, fragment);
    CHECK(folder_files(c.out) == before);
  };
  TrainConfig with_init = tiny_classifier("faults-out", p);
  TrainConfig bad = with_init;
  bad.vocab_words = 200;
  refused(bad, "pretrained with --vocab 300, this run has --vocab 200");
  bad = with_init;
  bad.model.dim = 32;
  refused(bad, "pretrained with --dim 16, this run has --dim 32");
  bad = with_init;
  bad.model.heads = 4;
  refused(bad, "pretrained with --heads 2, this run has --heads 4");
  bad = with_init;
  bad.model.max_len = 64;
  refused(bad, "pretrained on windows of 32 tokens");
  bad = with_init;
  bad.validation = 40;
  refused(bad, "held out 0");
  bad = with_init;
  bad.init = c.out;  // a classifier's run
  refused(bad, "that is a classifier's run (model.safetensors), not a pretrained encoder");
  bad.init = c.out + "/nowhere";
  refused(bad, "there is no encoder.safetensors");

  // Damaged copies of the pretraining folder.
  const std::string copy = p.train.out + "-copy";
  fs::remove_all(copy);
  fs::copy(p.train.out, copy);
  bad = with_init;
  bad.init = copy;
  const std::string file = copy + "/encoder.safetensors", good = file_contents(file);
  std::string flipped = good;
  flipped[flipped.size() - 3] = char(flipped[flipped.size() - 3] ^ 0x40);
  write_file_atomically(file, flipped);
  refused(bad, "differ from the checksum");
  write_file_atomically(file, good.substr(0, good.size() * 2 / 3));  // half-written
  refused(bad, "encoder.safetensors");
  write_file_atomically(file, good);
  // Its vocab.txt replaced by another vocabulary of the same size.
  const std::string vocabulary = file_contents(copy + "/vocab.txt");
  std::string other = vocabulary;
  const size_t at = other.rfind('\n', other.size() - 2);
  other.insert(at + 1, "zz");
  write_file_atomically(copy + "/vocab.txt", other);
  refused(bad, "vocab.txt is not the vocabulary the encoder was pretrained with");
  write_file_atomically(copy + "/vocab.txt", vocabulary);
  // A classifier's model file renamed to encoder.safetensors.
  write_file_atomically(file, file_contents(c.out + "/model.safetensors"));
  refused(bad, "a classifier's model file, not a pretrained encoder");
  // The pretraining's checkpoint is not an encoder either.
  write_file_atomically(file, file_contents(copy + "/checkpoint.safetensors"));
  refused(bad, "has format 'ember-imdb-pretrain-checkpoint-v1'");
}

TEST_CASE("pretrain --init: a NaN, an infinity (the checksum redone) or a tensor of another dtype is refused by file, before --out is touched") {
  PretrainConfig p = tiny_pretrain("nonfinite-source");
  pretrain(p, *distributed::make_single_process_group());
  TrainConfig earlier = tiny_classifier("nonfinite-out", p);  // an earlier run in the --out of the refused ones
  earlier.init.clear();
  train_classifier(earlier);
  const auto before = folder_files(earlier.out);
  const std::string copy = p.train.out + "-nonfinite";
  fs::remove_all(copy);
  fs::copy(p.train.out, copy);
  TrainConfig bad = tiny_classifier("nonfinite-out", p);
  bad.init = copy;
  const std::string file = copy + "/encoder.safetensors";
  // The encoder with one tensor changed and its checksum redone: only the checks of the tensors themselves can tell.
  auto sealed_with = [&](const std::string& name, const Tensor& replacement) {
    nn::Metadata meta;
    nn::TensorMap tensors = nn::load_tensors(p.train.out + "/encoder.safetensors", &meta);
    tensors.at(name) = replacement;
    meta[kContentKey] = content_fingerprint(tensors, meta);
    nn::save_tensors(file, tensors, meta);
  };
  const Tensor weight = nn::load_tensors(p.train.out + "/encoder.safetensors").at("blocks.0.fc1.weight");
  for (const float value : {NAN, INFINITY, -INFINITY}) {
    Tensor changed = weight.clone();
    changed.data<float>()[3] = value;
    sealed_with("blocks.0.fc1.weight", changed);
    const std::string shown = std::isnan(value) ? "NaN" : value > 0 ? "+Inf" : "-Inf";
    check_error([&] { train_classifier(bad); }, file + ": tensor 'blocks.0.fc1.weight' (shape [32, 16]) holds " + shown + " at element 3");
    CHECK(folder_files(earlier.out) == before);  // vocab.txt and metrics.jsonl were written before the run failed
  }
  sealed_with("blocks.0.fc1.weight", weight.to(Dtype::Float64));
  check_error([&] { train_classifier(bad); }, "'" + file + "': load_state_dict: parameter 'blocks.0.fc1.weight' is float64 in the "
                                   "state, float32 in the model");
  check_error([&] { load_encoder(copy); }, "--init: '" + file + "': load_state_dict");
  sealed_with("mlm_bias", zeros({3}));
  check_error([&] { load_encoder(copy); }, "'" + file + "': load_state_dict: parameter 'mlm_bias' has shape [3]");
  CHECK(folder_files(earlier.out) == before);
}

namespace {

// imdb_small.json with each label's training reviews (its quarters 1 and 3) in another order: the same reviews.
std::string shuffled_small_data(const std::string& path) {
  nlohmann::json reviews = nlohmann::json::parse(file_contents(std::string(EMBER_TEST_DATA) + "/imdb_small.json"));
  REQUIRE(reviews.size() == 400);
  SplitMix64 g(7);
  for (size_t quarter : {1, 3})
    for (size_t i = 99; i > 0; --i) std::swap(reviews[quarter * 100 + i], reviews[quarter * 100 + g.below(i + 1)]);
  fs::create_directories(fs::path(path).parent_path());
  write_file_atomically(path, reviews.dump());
  return path;
}

}  // namespace

TEST_CASE("pretrain --init: the held-out reviews are compared by which they are, not by how many") {
  PretrainConfig same = tiny_pretrain("held-out-same"), shuffled = tiny_pretrain("held-out-shuffled");
  same.train.validation = shuffled.train.validation = 40;
  shuffled.train.data = shuffled_small_data(fs::path(shuffled.train.out).parent_path().string() + "/shuffled.json");
  pretrain(same, *distributed::make_single_process_group());
  pretrain(shuffled, *distributed::make_single_process_group());
  // The fingerprint is of the reviews themselves: not of their order, their encoding or their truncation.
  TrainConfig plain = tiny_classifier("held-out-plain", same);
  plain.validation = 40;
  const Data here = prepare_data(plain);
  TrainConfig other_encoding = plain;
  other_encoding.model.max_len = 8;
  other_encoding.truncate = "tail";
  other_encoding.vocab_words = 50;
  CHECK(prepare_data(other_encoding).validation_fingerprint == here.validation_fingerprint);
  CHECK(here.validation_fingerprint.size() == 64);
  TrainConfig none = plain;
  none.validation = 0;
  CHECK(prepare_data(none).validation_fingerprint.empty());
  CHECK(prepare_pretraining_data(shuffled.train).validation_fingerprint != here.validation_fingerprint);
  // As many reviews held out, but other ones: the pretraining read some of this run's validation reviews.
  TrainConfig from_shuffled = tiny_classifier("held-out-fine", shuffled);
  from_shuffled.validation = 40;
  from_shuffled.data = plain.data;
  check_error([&] { train_classifier(from_shuffled); }, "the pretraining held out 40 reviews, but not this run's 40 validation "
                                             "reviews (other --data, or the same reviews in another order)");
  TrainConfig from_same = tiny_classifier("held-out-fine", same);
  from_same.validation = 40;
  CHECK(train_classifier(from_same).finished);
  // An encoder from before the fingerprint was recorded: compared by count and --limit only, and a warning says so.
  const std::string old = same.train.out + "-old";
  fs::remove_all(old);
  fs::copy(same.train.out, old);
  nn::Metadata meta;
  nn::TensorMap tensors = nn::load_tensors(old + "/encoder.safetensors", &meta);
  REQUIRE(meta.erase(kHeldOutKey) == 1);
  meta[kContentKey] = content_fingerprint(tensors, meta);
  nn::save_tensors(old + "/encoder.safetensors", tensors, meta);
  const PretrainedEncoder encoder = load_encoder(old);
  CHECK(encoder.held_out_fingerprint.empty());
  const Data with_its_vocabulary = prepare_data(from_same, &encoder.vocabulary);
  CHECK(check_encoder_fits(encoder, from_same, with_its_vocabulary).find(
            "was written before pretrain recorded which reviews it held out: it held out as many (40, of --limit 0), "
            "but whether they are this run's validation reviews cannot be checked") != std::string::npos);
  from_same.init = old;
  CHECK(train_classifier(from_same).finished);
  CHECK(check_encoder_fits(load_encoder(same.train.out), from_same, with_its_vocabulary).empty());
  // Without --validation the classifier holds none out: nothing to compare.
  from_same.validation = 0;
  CHECK(check_encoder_fits(encoder, from_same, prepare_data(from_same, &encoder.vocabulary)).empty());
}

TEST_CASE("pretrain: --init never takes an earlier step's encoder beside a later checkpoint; a finished run's --resume writes it again") {
  PretrainConfig whole = tiny_pretrain("stale-whole");
  pretrain(whole, *distributed::make_single_process_group());
  PretrainConfig p = tiny_pretrain("stale");
  p.train.save_every = 5;
  p.train.stop_after = 5;
  pretrain(p, *distributed::make_single_process_group());
  const std::string encoder_file = p.train.out + "/encoder.safetensors";
  const std::string at_step_5 = file_contents(encoder_file);
  CHECK(load_encoder(p.train.out).step == 5);  // a run stopped part-way: its encoder, of its checkpoint's step
  CHECK(load_encoder(p.train.out).total_steps == 12);
  p.train.stop_after = 0;
  p.train.resume = true;
  pretrain(p, *distributed::make_single_process_group());
  REQUIRE(file_contents(encoder_file) == file_contents(whole.train.out + "/encoder.safetensors"));
  // The state a kill between the two files left when the checkpoint was written first: the final checkpoint beside
  // step 5's encoder, whose checksum holds. --init refuses it, naming the step, before --out is touched.
  write_file_atomically(encoder_file, at_step_5);
  check_error([&] { load_encoder(p.train.out); }, "--init " + p.train.out + ": encoder.safetensors is not the model "
                                                  "of the checkpoint beside it (step 12 of 12)");
  TrainConfig fine = tiny_classifier("stale-fine", p);
  write_file_atomically(encoder_file, file_contents(whole.train.out + "/encoder.safetensors"));
  train_classifier(fine);  // an earlier run in the --out of the refused one
  const auto before = folder_files(fine.out);
  write_file_atomically(encoder_file, at_step_5);
  check_error([&] { train_classifier(fine); }, "`imdb pretrain --resume` with its flags writes the right one");
  CHECK(folder_files(fine.out) == before);
  // The --resume of the finished run trains nothing and writes the encoder again: the uninterrupted run's bytes.
  const PretrainResult again = pretrain(p, *distributed::make_single_process_group());
  CHECK(again.finished);
  CHECK(again.already_finished);
  CHECK(again.step_losses.empty());
  CHECK(file_contents(encoder_file) == file_contents(whole.train.out + "/encoder.safetensors"));
  CHECK(load_encoder(p.train.out).step == 12);
  // No encoder beside the checkpoint: said so, and the --resume writes it.
  fs::remove(encoder_file);
  check_error([&] { load_encoder(p.train.out); }, "the pretraining there has a checkpoint but no encoder.safetensors");
  pretrain(p, *distributed::make_single_process_group());
  CHECK(file_contents(encoder_file) == file_contents(whole.train.out + "/encoder.safetensors"));
  // A checkpoint that cannot be read cannot vouch for the encoder; an encoder copied alone is taken as it is.
  const std::string copy = p.train.out + "-copy";
  fs::remove_all(copy);
  fs::copy(p.train.out, copy);
  const std::string checkpoint = file_contents(copy + "/checkpoint.safetensors");
  write_file_atomically(copy + "/checkpoint.safetensors", checkpoint.substr(0, checkpoint.size() / 2));
  check_error([&] { load_encoder(copy); }, "the checkpoint beside encoder.safetensors cannot say which step the "
                                           "encoder is of");
  fs::remove(copy + "/checkpoint.safetensors");
  CHECK(load_encoder(copy).step == -1);
  // --resume with nothing to continue from.
  PretrainConfig empty = tiny_pretrain("stale-empty");
  fs::remove_all(empty.train.out);
  empty.train.resume = true;
  check_error([&] { pretrain(empty, *distributed::make_single_process_group()); },
              "pretrain --resume: there is no " + empty.train.out + "/checkpoint.safetensors to continue from");
}

CUDA_TEST_CASE("pretrain: on the GPU (the emulator here) it trains the CPU's losses and resumes exactly") {
  auto config_for = [](const std::string& name, const std::string& device) {
    PretrainConfig c = tiny_pretrain(name);
    c.train.device = device;
    c.train.model.max_len = 16;  // the emulator is slow
    c.steps = 6;
    return c;
  };
  const PretrainResult cpu = pretrain(config_for("cpu", "cpu"), *distributed::make_single_process_group());
  const PretrainResult gpu = pretrain(config_for("gpu", "cuda"), *distributed::make_single_process_group());
  REQUIRE(gpu.step_losses.size() == cpu.step_losses.size());
  for (size_t i = 0; i < cpu.step_losses.size(); ++i) CHECK(std::abs(gpu.step_losses[i] - cpu.step_losses[i]) < 1e-3);
  PretrainConfig part = config_for("gpu-parts", "cuda");
  part.train.stop_after = 4;
  const PretrainResult first = pretrain(part, *distributed::make_single_process_group());
  part.train.stop_after = 0;
  part.train.resume = true;
  const PretrainResult second = pretrain(part, *distributed::make_single_process_group());
  std::vector<double> joined = first.step_losses;
  joined.insert(joined.end(), second.step_losses.begin(), second.step_losses.end());
  CHECK(joined == gpu.step_losses);
}
