// The pretrained encoder's file, its checks, and a classifier's start from it.
#include "examples/imdb/encoder_file.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "core/error.h"
#include "examples/imdb/pretrain.h"
#include "examples/imdb/run_folder.h"

namespace ember::imdb {

namespace {

constexpr const char* kEncoderFormat = "ember-imdb-encoder-v1";

// Why `folder` has no encoder.safetensors, for --init: what it holds instead (run_folder.h), and where to look.
[[noreturn]] void fail_no_encoder(const std::string& folder, const std::string& who) {
  for (const RunKindFound& found : run_kinds_in(folder)) {
    switch (found.kind) {
      case RunKind::classifier:
        fail("{} {}: that is a classifier's run ({}), not a pretrained encoder; --init takes the folder of an "
             "`imdb pretrain` run (its {})", who, folder, found.evidence, kEncoderFile);
      case RunKind::nbsvm:
        fail("{} {}: that is an NBSVM (nbsvm.safetensors), not a pretrained encoder; --init takes the folder of an "
             "`imdb pretrain` run (its {})", who, folder, kEncoderFile);
      case RunKind::ensemble:
        fail("{} {}: that is an ensemble's folder (scripts/imdb_ensemble.sh); its pretraining, if it had one, is "
             "{}/pretrain", who, folder, folder);
      case RunKind::comparison:
        fail("{} {}: that is a comparison's folder (imdb compare), not a pretrained encoder", who, folder);
      case RunKind::pretraining:
        fail("{} {}: the pretraining there has a checkpoint but no {} (it was stopped while it saved): `imdb "
             "pretrain --resume` with its flags writes it", who, folder, kEncoderFile);
      case RunKind::unknown: break;
    }
  }
  fail("{} {}: there is no {} there (the folder of an `imdb pretrain` run that saved a checkpoint)", who,
       folder, kEncoderFile);
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.raw_data(), y.raw_data(), size_t(x.numel() * dtype_size(x.dtype()))) == 0;
}

// The encoder must be the model of the pretraining's checkpoint beside it: a kill between the two files (or a
// folder from a build that wrote the checkpoint first) can leave an earlier step's encoder, whose checksum holds.
void check_is_checkpoint_model(PretrainedEncoder& encoder, const std::string& who) {
  const std::string path = encoder.folder + "/checkpoint.safetensors";
  std::error_code error;
  if (!std::filesystem::exists(std::filesystem::symlink_status(path, error))) return;  // copied alone: taken as it is
  PretrainCheckpoint checkpoint;
  try {
    checkpoint = check_pretrain_checkpoint(path);
  } catch (const Error& e) {
    fail("{} {}: the checkpoint beside {} cannot say which step the encoder is of: {} (remove "
         "checkpoint.safetensors to fine-tune from the encoder as it is)", who, encoder.folder, kEncoderFile, e.what());
  }
  const nn::TensorMap model = nn::with_prefix_removed(checkpoint.tensors, "model.");
  bool same = model.size() == encoder.tensors.size();
  for (const auto& [name, t] : encoder.tensors) {
    auto it = model.find(name);
    same = same && it != model.end() && same_bytes(t, it->second);
  }
  EMBER_CHECK(same, "{} {}: {} is not the model of the checkpoint beside it (step {} of {}): the pretraining "
              "was stopped while it saved, leaving another step's encoder; `imdb pretrain --resume` with its flags "
              "writes the right one (or remove checkpoint.safetensors to fine-tune from this encoder as it is)",
              who, encoder.folder, kEncoderFile, checkpoint.step, checkpoint.total_steps);
  // Its settings too (a checksum redone over another --validation, say): the checkpoint's, setting by setting.
  const auto mine = encoder.config.to_metadata(), its = checkpoint.config.train.to_metadata();
  for (const auto& [key, value] : mine) {
    auto it = its.find(key);
    EMBER_CHECK(it != its.end() && it->second == value, "{} {}: {} records {} = {}, the checkpoint beside it {}: they "
                "are not of one run", who, encoder.folder, kEncoderFile, key, value.substr(0, 40),
                it == its.end() ? std::string("nothing") : it->second.substr(0, 40));
  }
  encoder.step = checkpoint.step;
  encoder.total_steps = checkpoint.total_steps;
}

}  // namespace

void save_encoder(const std::string& path, const TrainConfig& config, const MaskedTokenModel& model,
                  const Vocabulary& vocabulary, const std::string& held_out_fingerprint) {
  nn::TensorMap weights = model.state_dict();
  nn::Metadata meta = config.to_metadata();
  meta["format"] = kEncoderFormat;
  meta["vocab_sha256"] = vocabulary_fingerprint(vocabulary);
  if (!held_out_fingerprint.empty()) meta[kHeldOutKey] = held_out_fingerprint;
  meta[kContentKey] = content_fingerprint(weights, meta);
  nn::save_tensors(path, weights, meta);
}

PretrainedEncoder load_encoder(const std::string& folder, const std::string& who) {
  const std::string path = folder + "/" + kEncoderFile;
  // Its encoder and checkpoint change while a pretraining runs there: one of them may be a step ahead of the other.
  EMBER_CHECK(!train::run_in_progress(folder), "{} {}: a trainer is running there (it holds {}/.lock), so its files are still "
              "changing: wait until it has finished or stopped", who, folder, folder);
  std::error_code error;
  if (!std::filesystem::exists(path, error)) fail_no_encoder(folder, who);
  nn::Metadata meta;
  // load_weights: truncated or malformed files, and a NaN or an infinity (a checksum redone over it holds), fail here.
  nn::TensorMap tensors = nn::load_weights(path, &meta);
  auto format = meta.find("format");
  EMBER_CHECK(format != meta.end() && format->second == kEncoderFormat, "{}: '{}' has format '{}', expected {}{}",
              who, path, format == meta.end() ? "(none)" : format->second.substr(0, 60), kEncoderFormat,
              format != meta.end() && format->second.rfind("ember-imdb-model", 0) == 0
                  ? " (a classifier's model file, not a pretrained encoder)" : "");
  TrainConfig config;
  try {
    config = TrainConfig::from_metadata(meta);
  } catch (const Error& e) {
    fail("{}: '{}': {}", who, path, e.what());
  }
  // The sizes are checked against the tensors before anything is built from them (the head: none to check).
  nn::TensorMap with_head = tensors;
  with_head.emplace("head.weight", zeros({config.model.classes, config.model.dim}));
  check_settings_match_tensors(config.model, with_head, path);
  // Every tensor's name, shape and dtype, as the model it was saved from has them.
  try {
    Generator gen(0);
    MaskedTokenModel model(config.model, gen);
    model.load_state_dict(tensors);
  } catch (const Error& e) {
    fail("{}: '{}': {}", who, path, e.what());
  }
  check_content_fingerprint(tensors, meta, path);
  PretrainedEncoder encoder{folder, config, Vocabulary::load(folder + "/vocab.txt"), std::move(tensors), "", -1, -1};
  auto recorded = meta.find("vocab_sha256");
  EMBER_CHECK(recorded != meta.end() && recorded->second == vocabulary_fingerprint(encoder.vocabulary),
              "{} {}: vocab.txt is not the vocabulary the encoder was pretrained with (its SHA-256 differs from "
              "the one {} records)", who, folder, kEncoderFile);
  EMBER_CHECK(encoder.vocabulary.size() + 1 == encoder.config.model.vocab_size,
              "{} {}: vocab.txt has {} tokens, but the encoder's embedding has {} rows (the tokens and [MASK])",
              who, folder, encoder.vocabulary.size(), encoder.config.model.vocab_size);
  if (auto held_out = meta.find(kHeldOutKey); held_out != meta.end()) encoder.held_out_fingerprint = held_out->second;
  check_is_checkpoint_model(encoder, who);
  return encoder;
}

void check_encoder_settings_fit(const PretrainedEncoder& encoder, const TrainConfig& classifier) {
  const nn::ClassifierConfig &from = encoder.config.model, &to = classifier.model;
  const std::string& f = encoder.folder;
  auto same = [&](const char* what, int64_t pretrained, int64_t here) {
    EMBER_CHECK(pretrained == here, "--init {}: it was pretrained with {} {}, this run has {} {}", f, what, pretrained,
                what, here);
  };
  same("--dim", from.dim, to.dim);
  same("--heads", from.heads, to.heads);
  same("--layers", from.layers, to.layers);
  same("--ffn", from.ffn_dim, to.ffn_dim);
  same("--vocab", encoder.config.vocab_words, classifier.vocab_words);
  EMBER_CHECK(to.max_len <= from.max_len, "--init {}: it was pretrained on windows of {} tokens (--max-len), this "
              "run reads {}: its position embedding has no row for the ones past {}", f, from.max_len, to.max_len,
              from.max_len);
  // Validation reviews must be reviews the pretraining never read: as many, of as many (then, by their fingerprint,
  // the same ones: check_encoder_fits).
  if (classifier.validation > 0)
    EMBER_CHECK(encoder.config.validation == classifier.validation && encoder.config.limit == classifier.limit,
                "--init {}: this run holds out {} validation reviews, but the pretraining held out {} (of --limit {}, "
                "here {}), so it read other reviews' text: pretrain with the same --validation and --limit", f,
                classifier.validation, encoder.config.validation, encoder.config.limit, classifier.limit);
}

std::string check_encoder_fits(const PretrainedEncoder& encoder, const TrainConfig& classifier, const Data& data) {
  const std::string& f = encoder.folder;
  EMBER_CHECK(vocabulary_fingerprint(data.vocabulary) == vocabulary_fingerprint(encoder.vocabulary),
              "--init {}: it was pretrained on another vocabulary ({} tokens; this run's has {}): fine-tune with the "
              "pretraining's vocabulary (the same --vocab, --limit and --validation)", f, encoder.vocabulary.size(),
              data.vocabulary.size());
  check_encoder_settings_fit(encoder, classifier);
  if (classifier.validation == 0) return "";
  if (encoder.held_out_fingerprint.empty())
    return fmt::format("--init {}: its {} was written before pretrain recorded which reviews it held out: it held out "
                       "as many ({}, of --limit {}), but whether they are this run's validation reviews cannot be "
                       "checked (pretrain again to have them compared)", f, kEncoderFile, classifier.validation,
                       classifier.limit);
  EMBER_CHECK(encoder.held_out_fingerprint == data.validation_fingerprint,
              "--init {}: the pretraining held out {} reviews, but not this run's {} validation reviews (other --data, "
              "or the same reviews in another order), so it read some of them: pretrain on this run's --data with "
              "its --validation and --limit", f, encoder.config.validation, classifier.validation);
  return "";
}

std::string init_from_encoder(const PretrainedEncoder& encoder, const TrainConfig& classifier, const Data& data,
                              nn::TransformerClassifier& model) {
  std::string warning = check_encoder_fits(encoder, classifier, data);
  const std::string path = encoder.folder + "/" + kEncoderFile;
  nn::TensorMap state = model.state_dict();
  nn::TensorMap loaded;
  for (const auto& [name, current] : state) {
    if (name.rfind("head.", 0) == 0 || name.rfind("bigram_embedding.", 0) == 0) {  // not pretrained: as initialised
      loaded.emplace(name, current.detach().clone());
      continue;
    }
    auto it = encoder.tensors.find(name);
    EMBER_CHECK(it != encoder.tensors.end(), "--init: '{}' has no tensor '{}'", path, name);
    Tensor t = it->second;
    if (name == "token_embedding.weight" || name == "position_embedding.weight")
      t = t.narrow(0, 0, current.size(0)).contiguous();  // [MASK]'s row, and positions past max_len, left out
    loaded.emplace(name, t.to(current.device()));
  }
  try {
    model.load_state_dict(loaded);  // names, shapes and dtypes checked; nothing changed on error
  } catch (const Error& e) {
    fail("--init: '{}': {}", path, e.what());
  }
  return warning;
}

void check_init_is_not_out(const TrainConfig& config) {
  if (config.init.empty()) return;
  std::error_code error;
  EMBER_CHECK(!std::filesystem::equivalent(config.init, config.out, error), "train: --out {} is the --init folder: the "
              "fine-tune would write over the pretraining it starts from; give it a folder of its own", config.out);
}

}  // namespace ember::imdb
