// The pretrained encoder's file, its checks, and a classifier's start from it.
#include "examples/imdb/encoder_file.h"

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <system_error>
#include <utility>

#include "core/error.h"
#include "examples/imdb/trainer.h"

namespace ember::imdb {

namespace {

constexpr const char* kEncoderFormat = "ember-imdb-encoder-v1";

}  // namespace

void save_encoder(const std::string& path, const TrainConfig& config, const MaskedTokenModel& model,
                  const Vocabulary& vocabulary) {
  nn::TensorMap weights = model.state_dict();
  nn::Metadata meta = config.to_metadata();
  meta["format"] = kEncoderFormat;
  meta["vocab_sha256"] = vocabulary_fingerprint(vocabulary);
  meta[kContentKey] = content_fingerprint(weights, meta);
  nn::save_tensors(path, weights, meta);
}

PretrainedEncoder load_encoder(const std::string& folder) {
  const std::string path = folder + "/" + kEncoderFile;
  std::error_code error;
  if (!std::filesystem::exists(path, error)) {
    EMBER_CHECK(!std::filesystem::exists(folder + "/model.safetensors", error),
                "--init {}: that is a classifier's run (model.safetensors), not a pretrained encoder; --init takes "
                "the folder of an `imdb pretrain` run (its {})", folder, kEncoderFile);
    fail("--init {}: there is no {} there (the folder of an `imdb pretrain` run that saved a checkpoint)", folder,
         kEncoderFile);
  }
  nn::Metadata meta;
  nn::TensorMap tensors = nn::load_tensors(path, &meta);  // truncated or malformed files fail here
  auto format = meta.find("format");
  EMBER_CHECK(format != meta.end() && format->second == kEncoderFormat, "--init: '{}' has format '{}', expected {}{}",
              path, format == meta.end() ? "(none)" : format->second.substr(0, 60), kEncoderFormat,
              format != meta.end() && format->second.rfind("ember-imdb-model", 0) == 0
                  ? " (a classifier's model file, not a pretrained encoder)" : "");
  TrainConfig config;
  try {
    config = TrainConfig::from_metadata(meta);
  } catch (const Error& e) {
    fail("--init: '{}': {}", path, e.what());
  }
  // The sizes are checked against the tensors before anything is built from them (the head: none to check).
  nn::TensorMap with_head = tensors;
  with_head.emplace("head.weight", zeros({config.model.classes, config.model.dim}));
  check_settings_match_tensors(config.model, with_head, path);
  check_content_fingerprint(tensors, meta, path);
  PretrainedEncoder encoder{folder, config, Vocabulary::load(folder + "/vocab.txt"), std::move(tensors)};
  auto recorded = meta.find("vocab_sha256");
  EMBER_CHECK(recorded != meta.end() && recorded->second == vocabulary_fingerprint(encoder.vocabulary),
              "--init {}: vocab.txt is not the vocabulary the encoder was pretrained with (its SHA-256 differs from "
              "the one {} records)", folder, kEncoderFile);
  EMBER_CHECK(encoder.vocabulary.size() + 1 == encoder.config.model.vocab_size,
              "--init {}: vocab.txt has {} tokens, but the encoder's embedding has {} rows (the tokens and [MASK])",
              folder, encoder.vocabulary.size(), encoder.config.model.vocab_size);
  return encoder;
}

void check_encoder_fits(const PretrainedEncoder& encoder, const TrainConfig& classifier, const Vocabulary& vocabulary) {
  const nn::ClassifierConfig &from = encoder.config.model, &to = classifier.model;
  const std::string& f = encoder.folder;
  EMBER_CHECK(vocabulary_fingerprint(vocabulary) == vocabulary_fingerprint(encoder.vocabulary),
              "--init {}: it was pretrained on another vocabulary ({} tokens; this run's has {}): fine-tune with the "
              "pretraining's vocabulary (the same --vocab, --limit and --validation)", f, encoder.vocabulary.size(),
              vocabulary.size());
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
  // Validation reviews must be reviews the pretraining never read.
  if (classifier.validation > 0)
    EMBER_CHECK(encoder.config.validation == classifier.validation && encoder.config.limit == classifier.limit,
                "--init {}: this run holds out {} validation reviews, but the pretraining held out {} (of --limit {}, "
                "here {}), so it read other reviews' text: pretrain with the same --validation and --limit", f,
                classifier.validation, encoder.config.validation, encoder.config.limit, classifier.limit);
}

void init_from_encoder(const PretrainedEncoder& encoder, const TrainConfig& classifier, const Vocabulary& vocabulary,
                       nn::TransformerClassifier& model) {
  check_encoder_fits(encoder, classifier, vocabulary);
  nn::TensorMap state = model.state_dict();
  nn::TensorMap loaded;
  for (const auto& [name, current] : state) {
    if (name.rfind("head.", 0) == 0 || name.rfind("bigram_embedding.", 0) == 0) {  // not pretrained: as initialised
      loaded.emplace(name, current.detach().clone());
      continue;
    }
    auto it = encoder.tensors.find(name);
    EMBER_CHECK(it != encoder.tensors.end(), "--init {}: the encoder has no tensor '{}'", encoder.folder, name);
    Tensor t = it->second;
    if (name == "token_embedding.weight" || name == "position_embedding.weight")
      t = t.narrow(0, 0, current.size(0)).contiguous();  // [MASK]'s row, and positions past max_len, left out
    loaded.emplace(name, t.to(current.device()));
  }
  model.load_state_dict(loaded);  // names, shapes and dtypes checked; nothing changed on error
}

}  // namespace ember::imdb
