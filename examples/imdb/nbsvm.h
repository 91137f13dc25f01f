// NBSVM (Wang and Manning, 2012) in Ember's terms: a linear classifier over each review's set of word n-grams
// (n = 1 .. 3, hashed; examples/imdb/ngram_features.h), each feature scaled by its naive-Bayes log-count ratio
// from the training reviews, trained with the logistic loss and an L2 penalty (as Mesnil et al., 2015, did
// for their 91.87% with word triples) by Ember's autograd and Adam. The score of a review is
//   z = b + sum over its distinct n-grams f of w[f] * r[f],   P(positive) = sigmoid(z);
// w starts at zero, so the penalty pulls toward "no evidence", and r makes a strongly one-sided n-gram
// cheap to use and a neutral one dear. A member of the accuracy ensemble (imdb eval --run A --run B,
// examples/imdb/ensemble.h) beside the Transformer; `imdb nbsvm` trains one.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/tensor.h"
#include "examples/imdb/settings.h"
#include "examples/imdb/vocabulary.h"
#include "nn/module.h"

namespace ember::imdb {

struct NbsvmConfig {
  // The data and the run, as imdb train reads them: data, data_dir, out, limit, validation, vocab_words,
  // model.max_len (whole reviews by default), truncate, seed (the batches' order), threads, epochs, lr,
  // batch_size, quiet. The rest of it is not used.
  TrainConfig run;
  int64_t order = 3;              // n-grams for n = 1 .. order
  int64_t buckets = 1 << 23;      // hashed n-gram ids (IMDb's training reviews: 5.2 M distinct 1-3-grams, 3.7 M of them triples)
  double alpha = 1.0;             // naive Bayes' smoothing count
  double l2 = 4e-5;               // lambda / 2 * |w|^2 beside the mean loss: about liblinear's C = 1 over 25,000 reviews
  NbsvmConfig();                  // run: whole reviews, every word, 1 epoch at lr 0.01, batches of 32
  // Throws ember::Error naming the setting that is out of range.
  void validate() const;
};

// A trained NBSVM: its settings, vocabulary and tensors (float32 on the CPU).
struct NbsvmModel {
  NbsvmConfig config;
  Vocabulary vocabulary;
  Tensor weight;  // [buckets, 1], one per n-gram id
  Tensor bias;    // [1]
  std::vector<float> ratios;  // r of each id (fixed: counted, not learnt); the file's "ratios" tensor [buckets]
};

struct NbsvmResult {
  std::vector<double> epoch_losses;          // mean logistic loss of each epoch's batches (the penalty not in it)
  std::vector<double> validation_accuracies; // each epoch's, with --validation
  double test_accuracy = -1;                 // at the end, without --validation (-1: not evaluated)
  double seconds = 0;
};

// Trains on the training reviews (less the --validation ones) and writes out/nbsvm.safetensors and
// out/vocab.txt (both atomically; a run of any kind in `out`, an NBSVM's included, is an ember::Error before
// anything is written, unless run.overwrite: then its files are removed just before this run's are written). With --validation, the held-out reviews are evaluated after each
// epoch and the test reviews never; without, the test reviews once at the end.
NbsvmResult train_nbsvm(const NbsvmConfig& config);

// NBSVM's trainable part as a module (what train::Loop trains): a weight per n-gram bucket and a bias, zero at first.
struct NbsvmWeights : nn::Module {
  explicit NbsvmWeights(int64_t buckets)
      : weight(register_parameter("weight", zeros({buckets, 1}))), bias(register_parameter("bias", zeros({1}))) {}
  Tensor weight;  // [buckets, 1]
  Tensor bias;    // [1]
};

// Reviews given as n-gram sets (ngram_set of their token ids), as a batch: the ids [B, L] int64 and each one's
// ratio [B, L] float32, a review's features padded to the longest's with id 0 and value 0 (which add nothing).
// A set's id outside [0, ratios.size()) is an ember::Error.
struct NbsvmFeatures {
  Tensor ids, values;
};
NbsvmFeatures nbsvm_features(const std::vector<float>& ratios, const std::vector<const std::vector<int32_t>*>& sets);
// The scores z of a batch of features: [B], differentiable in `weight` and `bias`.
Tensor nbsvm_scores(const Tensor& weight, const Tensor& bias, const Tensor& ids, const Tensor& values);
// The same from the n-gram sets.
Tensor nbsvm_scores(const Tensor& weight, const Tensor& bias, const std::vector<float>& ratios,
                    const std::vector<const std::vector<int32_t>*>& sets);

// True if `folder` holds an NBSVM run (its nbsvm.safetensors).
bool is_nbsvm_run(const std::string& folder);
// Loads and checks a run: the file's format and settings, the tensors' shapes, vocab.txt against the
// vocabulary the model recorded, every weight finite, the content checksum. ember::Error naming the file.
NbsvmModel load_nbsvm(const std::string& folder);
// P(positive) of each review (its token ids, encoded with the model's vocabulary), in order.
std::vector<double> nbsvm_probabilities(const NbsvmModel& model, const std::vector<std::vector<int32_t>>& reviews);
// P(positive) of one review's text.
double nbsvm_predict(const NbsvmModel& model, const std::string& review);

}  // namespace ember::imdb
