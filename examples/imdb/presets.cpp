// The presets' flags, and the reasons for the values a flag's default does not give.
#include "examples/imdb/presets.h"

#include <cstddef>
#include <string>
#include <vector>

#include "core/error.h"

namespace ember::imdb {

const std::vector<Preset>& presets() {
  static const std::vector<Preset> all = {
      // The recipe's best long-input setting (docs/imdb.md): the first 128 and last 384 tokens, a
      // window of 256 keys and one global token; +1.52 points over the recipe (3 seeds).
      {"head+tail-512",
       {"--max-len", "512", "--truncate", "head+tail", "--attention", "window:256,global:1"},
       "the recipe on each review's first 128 and last 384 tokens (docs/imdb.md)"},
      // The accuracy ensemble's Transformer (docs/imdb.md, "Beyond the recipe"; scripts/imdb_ensemble.sh trains it
      // and NBSVM, imdb nbsvm, and averages their probabilities). Chosen on validation (2,500 held-out training
      // reviews, seed 0):
      // head+tail 512 with hashed word-pair embeddings, one epoch (with them the model fits the training
      // reviews within an epoch: over three, its validation accuracy fell from its first epoch's); products
      // in bfloat16, as every run that chose it.
      {"head+tail-512-bigrams",
       {"--max-len", "512", "--truncate", "head+tail", "--attention", "window:256,global:1", "--bigrams", "131072",
        "--epochs", "1", "--precision", "bf16"},
       "head+tail-512 with word-pair embeddings, one epoch, bf16: the ensemble's Transformer (docs/imdb.md)"},
      // The ensemble's other member in the preset's first two versions, before NBSVM replaced it (docs/imdb.md).
      // fastText's model in Ember's terms (Joulin et al., 2016): no encoder block (--layers 0), so a review is
      // the mean of its words' and word pairs' embeddings (2^20 pair buckets, 32 wide) and a linear head; whole
      // reviews (2,560 tokens cost nothing without attention), a learning rate ten times the recipe's (a
      // linear model over sparse features), one epoch (it fits the training reviews in one), and every
      // training word (--vocab 100000 keeps all 83,187; the recipe's 20,000 read 0.4 points better alone on
      // validation, but 0.4 worse in the ensemble, whose other member has those 20,000).
      {"bigram-bag",
       {"--layers", "0", "--dim", "32", "--heads", "1", "--bigrams", "1048576", "--max-len", "2560", "--truncate",
        "head+tail", "--lr", "5e-3", "--epochs", "1", "--vocab", "100000", "--precision", "bf16"},
       "a bag of words and word pairs over whole reviews (fastText's model; the ensemble's member before NBSVM)"},
      // A model a GPU fills (issue 35): BERT-small's widths, full attention over 512 tokens, 64 reviews
      // a step, bfloat16 products: 44 MFLOP per token forward, 4.33 TFLOP per 64 x 512 step
      // (nn/model_flops.h). The learning rate: the recipe's 5e-4 suits its 2 x 128 model; a wider,
      // deeper pre-LN encoder trained from scratch takes a lower peak (Adam's steps should shrink as
      // the width grows; BERT used 1e-4 at batch 256), and 3e-4 is the usual choice for a 6-layer,
      // 512-wide encoder at batch 64. The warm-up is 10% of the steps (117 of 3 epochs' 1,173), not
      // the recipe's 5%, so that Adam's second moments settle before the peak. The recipe's weight
      // decay, clip, dropout, linear decay, vocabulary and 3 epochs stay.
      {"gpu-large",
       {"--dim", "512", "--heads", "8", "--layers", "6", "--ffn", "2048", "--max-len", "512", "--truncate",
        "head+tail", "--batch-size", "64", "--precision", "bf16", "--lr", "3e-4", "--warmup", "0.1"},
       "a model a GPU fills: 6 x 512 wide, 64 x 512 tokens a step, bf16 (docs/cuda.md)"},
  };
  return all;
}

std::string preset_names() {
  std::string names;
  for (const Preset& p : presets()) names += (names.empty() ? "" : ", ") + p.name;
  return names;
}

std::vector<std::string> expand_preset(const std::vector<std::string>& args) {
  std::vector<std::string> rest;
  const Preset* chosen = nullptr;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name;
    if (args[i] == "--preset") {
      EMBER_CHECK(i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0, "--preset needs a name (one of: {})",
                  preset_names());
      name = args[++i];
    } else if (args[i].rfind("--preset=", 0) == 0) {
      name = args[i].substr(9);
    } else {
      rest.push_back(args[i]);
      continue;
    }
    chosen = nullptr;
    for (const Preset& p : presets())
      if (p.name == name) chosen = &p;
    EMBER_CHECK(chosen != nullptr, "--preset '{}' is not a preset (known: {})", name.substr(0, 40), preset_names());
  }
  if (chosen == nullptr || rest.empty()) return rest;
  std::vector<std::string> expanded{rest[0]};  // the command, then the preset, then the explicit flags
  expanded.insert(expanded.end(), chosen->flags.begin(), chosen->flags.end());
  expanded.insert(expanded.end(), rest.begin() + 1, rest.end());
  return expanded;
}

}  // namespace ember::imdb
