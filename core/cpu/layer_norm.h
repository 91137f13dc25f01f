// CPU layer normalisation over the last dim: fused forward (saving mean and 1/std per row) and
// fused backward (dx, dweight, dbias).
//
// Precision: the forward computes in the input's dtype, on the row shifted by its first element
// (so rows far from zero keep their digits), in two passes (the mean, then the mean of squared
// deviations from it, so no cancellation), each a 16-lane sum; the saved mean / rstd are float64 tensors whatever the
// input dtype. The backward computes in the input's dtype too, on each row shifted by its first element
// again; each chunk's dweight / dbias sums are added in double.
// Determinism: rows are processed by one thread each; dweight and dbias are summed per chunk of
// layer_norm_rows_per_chunk(D) rows (a fixed split that depends only on D), and the chunk sums
// are then added in chunk order. Results are bitwise identical for any thread count.
#pragma once
#include <cstdint>

#include "core/kernel_results.h"

namespace ember::cpu {

// x: contiguous [rows, D], floating; weight, bias: contiguous [D] of x's dtype, or undefined.
LayerNormForward layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);

// grad, x: contiguous [rows, D]; mean, rstd: from layer_norm_forward; weight: [D] or undefined.
//   xhat = (x - mean) * rstd, gw = grad * weight
//   dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)),  dweight = sum_rows grad * xhat,  dbias = sum_rows grad
LayerNormGrads layer_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& weight, bool need_dx, bool need_dweight, bool need_dbias);

// Rows whose dweight / dbias contributions are summed together before the chunks are combined.
int64_t layer_norm_rows_per_chunk(int64_t D);

}  // namespace ember::cpu
