// CPU cross-entropy: fused log-softmax + negative log-likelihood over rows of [N, C] logits.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace ember::cpu {

struct CrossEntropyForward {
  Tensor loss;       // 0-d, the logits' dtype: mean over counted rows of lse - logit[target]; 0 if none
  Tensor lse;        // [N], the logits' dtype: log(sum(exp(row))) per row (0 for ignored rows)
  int64_t count = 0; // rows whose target is not ignore_index
};

// logits: contiguous [N, C] floating; targets: contiguous int64 [N], already validated (each in
// [0, C) or == ignore_index). The loss sum is taken per fixed chunk of rows in double and the chunks
// added in order: the result does not depend on the thread count.
CrossEntropyForward cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index);

// dlogits = (softmax(row) - onehot(target)) * scale for counted rows, 0 for ignored rows.
// scale = grad / count (the caller passes it).
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, int64_t ignore_index,
                              double scale);

}  // namespace ember::cpu
