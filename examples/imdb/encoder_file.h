// A pretrained encoder on disk (encoder.safetensors + vocab.txt in an `imdb pretrain` folder) and a
// classifier started from it (`imdb train --init RUN`). Everything is checked before anything is used:
// the file's format (a classifier's model.safetensors is refused as such), every tensor (names, shapes,
// dtypes, no NaN or infinity), its checksum, its settings against its tensors, its vocabulary, that it is the
// model of the checkpoint beside it (not an earlier step's, left by a kill), and its shapes and held-out
// reviews against the classifier's.
#pragma once
#include <cstdint>
#include <string>

#include "examples/imdb/masked_token_model.h"
#include "examples/imdb/settings.h"
#include "examples/imdb/trainer.h"
#include "examples/imdb/vocabulary.h"
#include "nn/checkpoint.h"
#include "nn/transformer.h"

namespace ember::imdb {

inline constexpr const char* kEncoderFile = "encoder.safetensors";
// The metadata key of the held-out reviews' fingerprint (Data::validation_fingerprint), written when the
// pretraining held some out (--validation N > 0).
inline constexpr const char* kHeldOutKey = "validation_reviews_sha256";

// Writes folder-relative `path` atomically: the model's tensors, `config`'s metadata (model.vocab_size
// counts [MASK]), the vocabulary's fingerprint (vocab.txt, without [MASK]), `held_out_fingerprint` (which
// reviews --validation held out; not written when empty) and the checksum.
void save_encoder(const std::string& path, const TrainConfig& config, const MaskedTokenModel& model,
                  const Vocabulary& vocabulary, const std::string& held_out_fingerprint);

struct PretrainedEncoder {
  std::string folder;
  TrainConfig config;      // the pretraining's settings (model.vocab_size = vocabulary + [MASK])
  Vocabulary vocabulary;   // vocab.txt: the classifier must encode its reviews with it
  nn::TensorMap tensors;   // the masked-token model's state
  std::string held_out_fingerprint;  // as recorded; empty: none (no --validation, or a file from before it was)
  // The pretraining's step and steps, from the checkpoint beside the encoder, whose model it is; -1: no checkpoint.
  int64_t step = -1, total_steps = -1;
};
// Reads folder/encoder.safetensors and folder/vocab.txt, checked (an ember::Error naming the file and the
// problem: missing, another kind of run, truncated or changed, a tensor of the wrong name, shape or dtype, a NaN or
// an infinity, another vocabulary, not the model of folder/checkpoint.safetensors). `who` starts the errors.
PretrainedEncoder load_encoder(const std::string& folder, const std::string& who = "--init");

// What check_encoder_fits checks of the settings alone (before the data is read): dim, heads, layers, FFN width,
// --vocab, max_len at most the pretraining's, and with --validation as many held-out reviews of as large a --limit.
void check_encoder_settings_fit(const PretrainedEncoder& encoder, const TrainConfig& classifier);
// Checks that a classifier of `classifier` (its settings) on `data` (its vocabulary and held-out reviews) can
// start from `encoder`: the same vocabulary (by its tokens), dim, heads, layers and FFN width, max_len at most the
// pretraining's, and, when the classifier holds out validation reviews, a pretraining that held out the same ones
// (by their fingerprint). Returns a warning to show, empty if none: an encoder written before the fingerprint was
// recorded is checked by the count and --limit of the reviews it held out only, and says so.
std::string check_encoder_fits(const PretrainedEncoder& encoder, const TrainConfig& classifier, const Data& data);

// Copies the encoder's weights into `model` (every tensor but the head, which keeps its initialisation):
// the token embedding's rows but [MASK]'s, the first max_len position rows. Checks with check_encoder_fits
// first, and returns its warning.
std::string init_from_encoder(const PretrainedEncoder& encoder, const TrainConfig& classifier, const Data& data,
                              nn::TransformerClassifier& model);

// An ember::Error if `config`'s --init folder is its --out: the fine-tune would write over the pretraining it
// starts from.
void check_init_is_not_out(const TrainConfig& config);

}  // namespace ember::imdb
