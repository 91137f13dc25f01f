// The basic layers: Linear, Embedding, LayerNorm, Dropout, GELU.
// Initialisation follows the IMDb recipe: weights N(0, 0.02), biases 0, LayerNorm gain 1 and shift 0.
#pragma once
#include <cstdint>

#include "autograd/ops.h"
#include "nn/module.h"

namespace ember::nn {

constexpr double kInitStd = 0.02;

// y = x @ weight^T + bias; weight [out, in], bias [out]. x is [..., in].
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, Generator& gen, bool bias = true);
  Tensor forward(const Tensor& x) const;
  Parameter weight, bias;  // bias undefined when built without one
};

// Rows of weight [num_embeddings, dim] picked by integer ids.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, Generator& gen);
  // All zeros, drawing nothing (a table added to another, that starts as if absent).
  Embedding(int64_t num_embeddings, int64_t dim);
  Tensor forward(const Tensor& ids) const {
    auto scope = forward_scope();
    return embedding(weight, ids);
  }
  Parameter weight;
};

// Normalises the last dim, then scales by weight and shifts by bias (both [dim]).
class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5);
  Tensor forward(const Tensor& x) const {
    auto scope = forward_scope();
    return layer_norm(x, weight, bias, eps);
  }
  Parameter weight, bias;
  double eps;
};

// Zeroes activations with probability p while training; the identity in eval mode.
class Dropout : public Module {
 public:
  Dropout(double p, Generator& gen) : p(p), gen_(&gen) {}
  Tensor forward(const Tensor& x) const {
    auto scope = forward_scope();
    return dropout(x, p, is_training(), *gen_);
  }
  Generator& generator() const { return *gen_; }  // what it draws from (activation checkpoints replay it)
  double p;

 private:
  Generator* gen_;
};

class GELU : public Module {
 public:
  Tensor forward(const Tensor& x) const {
    auto scope = forward_scope();
    return gelu(x);
  }
};

}  // namespace ember::nn
