// Joining tensors: cat along an existing dim, stack along a new one (cat of unsqueezed views).
// Backward of cat: each input's gradient is the narrow view of the output gradient it came from.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "autograd/ops/op_support.h"

namespace ember {
namespace {

// Same dtype and device as input 0, and defined; names the op and the offending input.
void check_list(const std::vector<Tensor>& tensors, const char* op) {
  EMBER_CHECK(!tensors.empty(), "{}: expected a non-empty list of tensors", op);
  for (size_t i = 0; i < tensors.size(); ++i) {
    EMBER_CHECK(tensors[i].defined(), "{}: input {} is undefined", op, i);
    EMBER_CHECK(tensors[i].dtype() == tensors[0].dtype(), "{}: input {} has dtype {}, but input 0 has {}", op, i,
                dtype_name(tensors[i].dtype()), dtype_name(tensors[0].dtype()));
    EMBER_CHECK(tensors[i].device() == tensors[0].device(), "{}: input {} is on {}, but input 0 is on {}", op, i,
                tensors[i].device().str(), tensors[0].device().str());
  }
}

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  check_list(tensors, "cat");
  const Shape& first = tensors[0].shape();
  EMBER_CHECK(!first.empty(), "cat: input 0 is 0-dim; cannot concatenate scalars (use stack)");
  dim = normalize_dim(dim, int64_t(first.size()), "cat");
  int64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Shape& s = tensors[i].shape();
    EMBER_CHECK(s.size() == first.size(), "cat: input {} has shape {} ({} dims), but input 0 has {} ({} dims)", i,
                shape_str(s), s.size(), shape_str(first), first.size());
    for (size_t d = 0; d < s.size(); ++d)
      EMBER_CHECK(int64_t(d) == dim || s[d] == first[d],
                  "cat: input {} has shape {}, but input 0 has {}: sizes differ in dim {} (concatenating along dim {})",
                  i, shape_str(s), shape_str(first), d, dim);
    total += s[size_t(dim)];
  }
  Shape out_shape = first;
  out_shape[size_t(dim)] = total;
  Tensor out = Tensor::empty(out_shape, tensors[0].dtype(), tensors[0].device());
  std::vector<int64_t> starts, lengths;
  std::vector<bool> needs;
  int64_t start = 0;
  for (const Tensor& t : tensors) {
    int64_t length = t.shape()[size_t(dim)];
    if (length > 0) {
      Tensor slot = make_view(out, t.shape(), out.strides(), out.offset() + start * out.strides()[size_t(dim)]);
      kernel::copy(kernel_on(slot), slot.shape(), strided(slot), strided(t));
    }
    starts.push_back(start);
    lengths.push_back(length);
    needs.push_back(t.requires_grad());
    start += length;
  }
  record("cat", out, tensors, [dim, starts, lengths, needs](const Tensor& g) -> Grads {
    Grads grads(needs.size());
    for (size_t i = 0; i < needs.size(); ++i)
      if (needs[i]) grads[i] = g.narrow(dim, starts[i], lengths[i]);
    return grads;
  });
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  check_list(tensors, "stack");
  const Shape& first = tensors[0].shape();
  for (size_t i = 0; i < tensors.size(); ++i)
    EMBER_CHECK(tensors[i].shape() == first, "stack: input {} has shape {}, but input 0 has {} (all must be equal)", i,
                shape_str(tensors[i].shape()), shape_str(first));
  dim = normalize_dim(dim, int64_t(first.size()) + 1, "stack");
  std::vector<Tensor> expanded;
  expanded.reserve(tensors.size());
  for (const Tensor& t : tensors) expanded.push_back(t.unsqueeze(dim));
  return cat(expanded, dim);
}

}  // namespace ember
