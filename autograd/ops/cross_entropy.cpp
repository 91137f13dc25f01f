// Cross-entropy loss: fused log-softmax + negative log-likelihood.
//   loss = mean over counted rows r of (logsumexp(logits[r]) - logits[r, targets[r]])
// where a row is counted unless targets[r] == ignore_index.
// Backward: dlogits[r] = (softmax(logits[r]) - onehot(targets[r])) * g / count; 0 for ignored rows.
//
// When every row is ignored (or N == 0) the loss is 0 and the gradient all zeros (PyTorch gives
// nan here; a batch of padding only should not poison a running sum of losses).
// Validation: logits 2-D floating [N, C]; targets 1-D int32 or int64 of length N, each in [0, C)
// or equal to ignore_index; otherwise an ember::Error naming the op, the shapes and the bad value.
// On a GPU the targets may stay on the host (the trainer keeps them there): they are checked there
// and uploaded without the host waiting; targets already on the GPU are read back to be checked
// (the host waits for the GPU). The backward reads its incoming gradient on the GPU, never on the host.
// Kernels: core/kernels.h (CPU: core/cpu/cross_entropy.cpp, GPU: cuda/cross_entropy_kernels.cu).
#include <cstdint>
#include <vector>

#include "autograd/ops/op_support.h"

namespace ember {
namespace {

// The loss of contiguous logits x [N, C] and int64 targets t [N] on x's device, `count` rows counted, and
// its one backward (from the saved row max and sum of exponentials; the incoming gradient read on the device).
// `inputs`: the op's inputs the node records.
Tensor cross_entropy_of(const Tensor& x, const Tensor& t, int64_t ignore_index, int64_t count,
                        std::vector<Tensor> inputs) {
  const int64_t N = x.size(0), C = x.size(1);
  const On on = kernel_on(x);
  Tensor row_max = Tensor::empty({N}, x.dtype(), x.device());
  Tensor sum_exp = Tensor::empty({N}, x.dtype(), x.device());
  Tensor loss = Tensor::empty({}, x.dtype(), x.device());
  Tensor scratch = Tensor::empty({kernel::cross_entropy_scratch(on, N)}, Dtype::Float64, x.device());
  kernel::cross_entropy_forward(on, x.raw_data(), t.data<int64_t>(), N, C, ignore_index, count, row_max.raw_data(),
                                sum_exp.raw_data(), loss.raw_data(), scratch.data<double>());
  // NOTE: the closure must not hold the output (its own node would own it: a cycle).
  record("cross_entropy", loss, inputs,
         [on, saved_x = save(x), saved_t = save(t), row_max, sum_exp, ignore_index, count,
          n_inputs = inputs.size()](const Tensor& grad) -> Grads {
           const Tensor &x = saved_x.get(), &t = saved_t.get();
           // NOTE: on a GPU, g stays there (reading it on the host would wait for the whole forward).
           Tensor g = grad.to(Dtype::Float64).contiguous();
           Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
           kernel::cross_entropy_backward(on, x.raw_data(), t.data<int64_t>(), row_max.raw_data(),
                                          sum_exp.raw_data(), dx.raw_data(), x.size(0), x.size(1), ignore_index,
                                          g.data<double>(), count);
           Grads grads(n_inputs);
           grads[0] = dx;
           return grads;
         });
  return loss;
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  EMBER_CHECK(logits.defined() && targets.defined(), "cross_entropy: an input tensor is undefined");
  if (logits.dtype() == Dtype::BFloat16)  // mixed precision: the loss in float32 (widened_from_bf16)
    return cross_entropy(widened_from_bf16(logits), targets, ignore_index);
  if (targets.device() != Device::cpu())  // host targets go with logits anywhere: checked, then uploaded
    check_same_device("cross_entropy", {&logits, &targets});
  EMBER_CHECK(logits.dim() == 2, "cross_entropy: logits must be 2-D [N, C], got {}", shape_str(logits.shape()));
  EMBER_CHECK(is_floating(logits.dtype()), "cross_entropy: logits must be float32 or float64, got {}",
              dtype_name(logits.dtype()));
  EMBER_CHECK(is_integer(targets.dtype()), "cross_entropy: targets must be int32 or int64, got {}",
              dtype_name(targets.dtype()));
  EMBER_CHECK(targets.dim() == 1 && targets.size(0) == logits.size(0),
              "cross_entropy: targets {} do not match logits {}: expected 1-D targets of length {}",
              shape_str(targets.shape()), shape_str(logits.shape()), logits.size(0));
  const int64_t N = logits.size(0), C = logits.size(1);
  // Checked on the host (a GPU tensor is copied back first).
  Tensor t = targets.detach().to(Dtype::Int64).contiguous().to(Device::cpu());
  const int64_t* tp = t.data<int64_t>();
  for (int64_t r = 0; r < N; ++r)
    EMBER_CHECK(tp[r] == ignore_index || (tp[r] >= 0 && tp[r] < C),
                "cross_entropy: target {} at row {} is out of range for {} classes (logits {}, ignore_index {})",
                tp[r], r, C, shape_str(logits.shape()), ignore_index);

  int64_t count = 0;
  for (int64_t r = 0; r < N; ++r) count += tp[r] != ignore_index;
  // The kernels read the targets on the logits' device (an upload, without waiting, on a GPU).
  return cross_entropy_of(logits.detach().contiguous(), t.to(logits.device()), ignore_index, count,
                          {logits, targets});
}

Tensor cross_entropy(const Tensor& logits, const DeviceIds& targets) {
  EMBER_CHECK(logits.defined() && targets.ids.defined(), "cross_entropy: an input tensor is undefined");
  if (logits.dtype() == Dtype::BFloat16) return cross_entropy(widened_from_bf16(logits), targets);
  EMBER_CHECK(logits.dim() == 2 && is_floating(logits.dtype()) && logits.device() == targets.ids.device(),
              "cross_entropy: staged targets on {} need floating 2-D logits there, got {} {} on {}",
              targets.ids.device().str(), dtype_name(logits.dtype()), shape_str(logits.shape()), logits.device().str());
  EMBER_CHECK(targets.ids.dim() == 1 && targets.ids.size(0) == logits.size(0),
              "cross_entropy: targets {} do not match logits {}: expected 1-D targets of length {}",
              shape_str(targets.ids.shape()), shape_str(logits.shape()), logits.size(0));
  EMBER_CHECK(targets.bound == logits.size(1), "cross_entropy: the targets were checked against {} classes, the "
              "logits have {}", targets.bound, logits.size(1));
  constexpr int64_t ignore_index = -100;  // none: stage_ids checked every target in [0, C)
  // The staged targets are saved like any input: a copy_ or fill_ of them before backward is an error.
  // NOTE: the trainer's refills for the next batch (stage_ids, upload_into) do not bump the version,
  // so they raise nothing; they go to the other of two buffers (optim/train/prefetch.h) or between
  // steps (a graph's inputs), never into targets a pending backward reads.
  return cross_entropy_of(logits.detach().contiguous(), targets.ids, ignore_index, logits.size(0), {logits});
}

}  // namespace ember
