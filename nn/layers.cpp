// The basic layers: parameter shapes and initialisation; forward passes are single ops.
#include <cstdint>

#include "nn/layers.h"

namespace ember::nn {

Linear::Linear(int64_t in_features, int64_t out_features, Generator& gen, bool with_bias) {
  EMBER_CHECK(in_features > 0 && out_features > 0, "Linear: sizes must be positive, got in={} out={}", in_features,
              out_features);
  weight = register_parameter("weight", normal({out_features, in_features}, 0.0, kInitStd, gen));
  if (with_bias) bias = register_parameter("bias", zeros({out_features}));
}

Tensor Linear::forward(const Tensor& x) const {
  auto scope = forward_scope();
  EMBER_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), "Linear: input {} does not end in in_features {}",
              shape_str(x.shape()), weight.size(1));
  return linear(x, weight, bias);  // = matmul(x, weight^T) + bias, in one GEMM
}

Embedding::Embedding(int64_t num_embeddings, int64_t dim, Generator& gen) {
  EMBER_CHECK(num_embeddings > 0 && dim > 0, "Embedding: sizes must be positive, got {} x {}", num_embeddings, dim);
  weight = register_parameter("weight", normal({num_embeddings, dim}, 0.0, kInitStd, gen));
}

Embedding::Embedding(int64_t num_embeddings, int64_t dim) {
  EMBER_CHECK(num_embeddings > 0 && dim > 0, "Embedding: sizes must be positive, got {} x {}", num_embeddings, dim);
  weight = register_parameter("weight", zeros({num_embeddings, dim}));
}

LayerNorm::LayerNorm(int64_t dim, double eps) : eps(eps) {
  EMBER_CHECK(dim > 0, "LayerNorm: dim must be positive, got {}", dim);
  weight = register_parameter("weight", ones({dim}));
  bias = register_parameter("bias", zeros({dim}));
}

}  // namespace ember::nn
