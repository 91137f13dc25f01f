// CPU cross-entropy: fused log-softmax + negative log-likelihood over rows of [N, C] logits:
// loss per row = log(s) - (x[target] - m), m the row max and s = sum(e^(x - m)).
#pragma once
#include <cstdint>

#include "core/kernel_results.h"

namespace ember::cpu {

// logits: contiguous [N, C] floating; targets: contiguous int64 [N], already validated (each in
// [0, C) or == ignore_index). The loss sum is taken per fixed chunk of rows in double and the chunks
// added in order: the result does not depend on the thread count.
CrossEntropyForward cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index);

// dlogits = (softmax(row) - onehot(target)) * scale for counted rows, 0 for ignored rows.
// scale = grad / count (the caller passes it).
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const CrossEntropyForward& saved,
                              int64_t ignore_index, double scale);

}  // namespace ember::cpu
