// SavedTensor: the version check of a tensor saved for backward (autograd/saved_tensor.h).
#include <cstdint>
#include <string>

#include "autograd/saved_tensor.h"

#include "autograd/node.h"
#include "core/error.h"

namespace ember {

SavedTensor::SavedTensor(const Tensor& tensor)
    : tensor_(tensor.defined() ? tensor.detach() : Tensor()),
      version_(tensor.defined() ? tensor.impl()->storage->version() : 0) {}

const Tensor& SavedTensor::get() const {
  if (tensor_.defined()) [[likely]] {
    const uint64_t now = tensor_.impl()->storage->version();
    if (now != version_) [[unlikely]] {
      const Node* node = running_node();
      const std::string op = node != nullptr ? node->name : std::string("(outside backward)");
      fail("backward of {}: one of the tensors needed for its gradient ({} {}) has been modified by an in-place "
           "operation: saved by {} at version {}, now at version {}. Change it after backward, or change a clone()",
           op, dtype_name(tensor_.dtype()), shape_str(tensor_.shape()), op, version_, now);
    }
  }
  return tensor_;
}

}  // namespace ember
