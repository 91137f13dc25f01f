// A pretrained encoder on disk (encoder.safetensors + vocab.txt in an `imdb pretrain` folder) and a
// classifier started from it (`imdb train --init RUN`). Everything is checked before anything is used:
// the file's format (a classifier's model.safetensors is refused as such), its checksum, its settings
// against its tensors, its vocabulary, and its shapes against the classifier's settings.
#pragma once
#include <string>

#include "examples/imdb/masked_token_model.h"
#include "examples/imdb/settings.h"
#include "examples/imdb/vocabulary.h"
#include "nn/checkpoint.h"
#include "nn/transformer.h"

namespace ember::imdb {

inline constexpr const char* kEncoderFile = "encoder.safetensors";

// Writes folder-relative `path` atomically: the model's tensors, `config`'s metadata (model.vocab_size
// counts [MASK]), the vocabulary's fingerprint (vocab.txt, without [MASK]) and the checksum.
void save_encoder(const std::string& path, const TrainConfig& config, const MaskedTokenModel& model,
                  const Vocabulary& vocabulary);

struct PretrainedEncoder {
  std::string folder;
  TrainConfig config;      // the pretraining's settings (model.vocab_size = vocabulary + [MASK])
  Vocabulary vocabulary;   // vocab.txt: the classifier must encode its reviews with it
  nn::TensorMap tensors;   // the masked-token model's state
};
// Reads folder/encoder.safetensors and folder/vocab.txt, checked (an ember::Error naming the file and
// the problem: missing, a classifier's run, truncated or changed, another vocabulary).
PretrainedEncoder load_encoder(const std::string& folder);

// Checks that a classifier of `classifier` (its settings) on `vocabulary` can start from `encoder`:
// the same vocabulary (by its tokens), dim, heads, layers and FFN width, max_len at most the pretraining's,
// and, when the classifier holds out validation reviews, a pretraining that held out the same ones.
void check_encoder_fits(const PretrainedEncoder& encoder, const TrainConfig& classifier, const Vocabulary& vocabulary);

// Copies the encoder's weights into `model` (every tensor but the head, which keeps its initialisation):
// the token embedding's rows but [MASK]'s, the first max_len position rows. Checks with check_encoder_fits first.
void init_from_encoder(const PretrainedEncoder& encoder, const TrainConfig& classifier, const Vocabulary& vocabulary,
                       nn::TransformerClassifier& model);

}  // namespace ember::imdb
