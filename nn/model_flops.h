// The model FLOPs of the classifier (nn/transformer.h): the numerator of model FLOP utilisation
// (MFU = model FLOPs per second / the chip's measured matrix rate; bench/gemm_peak.cpp the rate,
// `imdb flops` the ratio). They count what the model's definition asks for, 2 FLOPs per
// multiply-add of its matrix products, whatever the kernels actually compute (padding, skipped or
// masked tiles and the recomputation of --checkpoint are not counted), as PaLM's MFU does
// (Chowdhery et al. 2022, appendix B). Per sequence of L tokens, forward:
//   each block   QKV 2 L d (3d), output projection 2 L d d, FFN 2 L d f twice: L (8 d^2 + 4 d f);
//                attention's Q K^T and P V: 2 P (d / heads) per head each, 4 P d in all, where P is
//                the number of (query, key) pairs attended: L^2 for full attention
//   the head     2 d classes, on the one pooled vector
//   not counted  embeddings (look-ups, no product), LayerNorm, softmax, GELU, dropout, pooling, the loss
// A training step is 3 forwards: backward makes two products (the input's gradient and the
// weight's, or for attention dQ and dK, dP and dV) for each forward one.
#pragma once
#include <cstdint>

#include "nn/transformer.h"

namespace ember::nn {

// The (query, key) pairs attention scores in a sequence of `len` tokens: len^2 when full; with a
// window (attention_window >= 0), query i sees key j when |i - j| <= window or either is one of the
// first attention_global tokens (docs/attention.md, "Long reviews").
int64_t attended_pairs(const ClassifierConfig& config, int64_t len);

// The forward's matrix FLOPs for one sequence of `len` tokens (the formula above).
double forward_flops(const ClassifierConfig& config, int64_t len);

// A training step's model FLOPs on `batch` sequences of `len` tokens each: 3 x the forward's.
double training_step_flops(const ClassifierConfig& config, int64_t batch, int64_t len);

}  // namespace ember::nn
