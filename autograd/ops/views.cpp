// Views: new shapes, strides and offsets over the same storage, no data copied. Each is
// differentiable: its backward maps the gradient back through the inverse view.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

#include "autograd/ops/op_support.h"
#include "core/cuda_ops.h"
#include "core/device_copy.h"

namespace ember {
namespace {

// Replaces one -1 in `shape` by the size that makes numel match.
Shape infer_size(const Shape& shape, int64_t total, const char* op) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      EMBER_CHECK(infer < 0, "{}: only one dimension can be -1 in {}", op, shape_str(shape));
      infer = int64_t(i);
    } else {
      EMBER_CHECK(out[i] >= 0, "{}: invalid size {} in {}", op, out[i], shape_str(shape));
      known *= out[i];
    }
  }
  if (infer >= 0) {
    EMBER_CHECK(known != 0 && total % known == 0, "{}: cannot infer -1 in {} for {} elements", op, shape_str(shape), total);
    out[size_t(infer)] = total / known;
  }
  EMBER_CHECK(numel(out) == total, "{}: shape {} does not hold {} elements", op, shape_str(shape), total);
  return out;
}

// Strides that let `shape` view a tensor of (old_shape, old_strides) without a copy, if any exist:
// each run of old dims that are contiguous with each other can be re-split freely.
std::optional<Strides> view_strides(const Shape& old_shape, const Strides& old_strides, const Shape& shape) {
  if (numel(old_shape) == 0 || old_shape.empty()) return contiguous_strides(shape);
  Strides strides(shape.size());
  int64_t view_d = int64_t(shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.empty() ? 1 : old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = int64_t(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    // End of a contiguous chunk: lay the view dims over it.
    if (d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return strides;
}

}  // namespace

Tensor Tensor::view(const Shape& requested) const {
  Shape shape = infer_size(requested, numel(), "view");
  auto strides = view_strides(this->shape(), this->strides(), shape);
  EMBER_CHECK(strides.has_value(), "view: shape {} cannot view a tensor of shape {} with strides {} without a copy "
              "(use reshape)", shape_str(shape), shape_str(this->shape()), shape_str(this->strides()));
  Tensor out = make_view(*this, shape, *strides, offset());
  record("view", out, {*this}, [in = this->shape()](const Tensor& g) -> Grads { return {g.reshape(in)}; });
  return out;
}

Tensor Tensor::reshape(const Shape& requested) const {
  Shape shape = infer_size(requested, numel(), "reshape");
  if (view_strides(this->shape(), this->strides(), shape)) return view(shape);
  return contiguous().view(shape);
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  EMBER_CHECK(int64_t(dims.size()) == dim(), "permute: {} dims given for a tensor of shape {}", dims.size(),
              shape_str(shape()));
  Shape shape(dims.size());
  Strides strides(dims.size());
  std::vector<int64_t> inverse(dims.size(), -1);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = normalize_dim(dims[i], dim(), "permute");
    EMBER_CHECK(inverse[size_t(d)] < 0, "permute: dim {} appears twice", d);
    inverse[size_t(d)] = int64_t(i);
    shape[i] = this->shape()[size_t(d)];
    strides[i] = this->strides()[size_t(d)];
  }
  Tensor out = make_view(*this, shape, strides, offset());
  record("permute", out, {*this}, [inverse](const Tensor& g) -> Grads { return {g.permute(inverse)}; });
  return out;
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  std::vector<int64_t> dims(static_cast<size_t>(this->dim()));
  std::iota(dims.begin(), dims.end(), 0);
  const int64_t d0 = normalize_dim(dim0, dim(), "transpose"), d1 = normalize_dim(dim1, dim(), "transpose");
  // NOTE: a 0-d tensor's dims 0 and -1 are valid but there is nothing to swap.
  if (!dims.empty()) std::swap(dims[size_t(d0)], dims[size_t(d1)]);
  return permute(dims);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = normalize_dim(d, dim(), "narrow");
  int64_t size = shape()[size_t(d)];
  EMBER_CHECK(start >= 0 && length >= 0 && start + length <= size,
              "narrow: [{}, {}) is outside dim {} of size {} (shape {})", start, start + length, d, size,
              shape_str(shape()));
  Shape shape = this->shape();
  shape[size_t(d)] = length;
  Tensor out = make_view(*this, shape, strides(), offset() + start * strides()[size_t(d)]);
  // The backward sends g, the gradient of the window only, along an edge marked with the window: the
  // engine adds it there into the input's gradient, one buffer for every window of the input (the pieces
  // of chunk, split and unbind), not an input-sized tensor of zeros per narrow (docs/autograd.md, "Slices").
  record("narrow", out, {*this}, [](const Tensor& g) -> Grads { return {g}; });
  if (out.grad_fn() && length < size) out.grad_fn()->inputs[0].window = GradWindow{d, start, length};
  return out;
}

namespace {
// The pieces of `x` along dim d with these lengths (each >= 0, summing to its size): narrow views.
std::vector<Tensor> pieces(const Tensor& x, int64_t d, const std::vector<int64_t>& lengths) {
  std::vector<Tensor> out;
  out.reserve(lengths.size());
  int64_t start = 0;
  for (int64_t length : lengths) {
    out.push_back(x.narrow(d, start, length));
    start += length;
  }
  return out;
}

// The checks split and chunk share; the dim, normalised.
int64_t split_dim(const Tensor& x, int64_t dim, const char* op) {
  EMBER_CHECK(x.defined(), "{}: the input tensor is undefined", op);
  EMBER_CHECK(x.dim() > 0, "{}: expected a tensor with at least 1 dim, got a 0-dim tensor", op);
  return normalize_dim(dim, x.dim(), op);
}
}  // namespace

// torch.chunk: pieces of ceil(size / chunks), the last one smaller (so there may be fewer than `chunks`);
// an empty dim gives `chunks` empty pieces.
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  const int64_t d = split_dim(x, dim, "chunk");
  EMBER_CHECK(chunks > 0, "chunk: the number of chunks must be positive, got {}", chunks);
  const int64_t size = x.shape()[size_t(d)];
  if (size == 0) return pieces(x, d, std::vector<int64_t>(size_t(chunks), 0));
  return split(x, size / chunks + (size % chunks != 0), d);  // ceil, without overflow for a huge `chunks`
}

// torch.split with a size: pieces of split_size, the last one smaller; one piece when split_size >= size.
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  const int64_t d = split_dim(x, dim, "split");
  const int64_t size = x.shape()[size_t(d)];
  EMBER_CHECK(split_size > 0 || (split_size == 0 && size == 0),
              "split: split_size must be positive (0 only for an empty dim), got {} for dim {} of size {}", split_size,
              d, size);
  std::vector<int64_t> lengths;
  for (int64_t start = 0; start < size; start += split_size) lengths.push_back(std::min(split_size, size - start));
  if (lengths.empty()) lengths.push_back(0);
  return pieces(x, d, lengths);
}

// torch.split with sizes (split_with_sizes): one piece per size, the sizes summing to the dim's size.
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  const int64_t d = split_dim(x, dim, "split");
  const int64_t size = x.shape()[size_t(d)];
  int64_t total = 0;
  for (int64_t length : sizes) {
    EMBER_CHECK(length >= 0, "split: sizes {} has a negative size", shape_str(sizes));
    total += length;
  }
  EMBER_CHECK(total == size, "split: sizes {} sum to {}, but dim {} has size {} (shape {})", shape_str(sizes), total, d,
              size, shape_str(x.shape()));
  return pieces(x, d, sizes);
}

// torch.unbind: every index of the dim, the dim removed (select views).
std::vector<Tensor> unbind(const Tensor& x, int64_t dim) {
  const int64_t d = split_dim(x, dim, "unbind");
  std::vector<Tensor> out;
  out.reserve(size_t(x.shape()[size_t(d)]));
  for (int64_t i = 0; i < x.shape()[size_t(d)]; ++i) out.push_back(x.select(d, i));
  return out;
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end) const {
  d = normalize_dim(d, dim(), "slice");
  int64_t size = shape()[size_t(d)];
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, start, size);
  return narrow(d, start, end - start);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  d = normalize_dim(d, dim(), "select");
  int64_t size = shape()[size_t(d)];
  EMBER_CHECK(index >= -size && index < size, "select: index {} out of range for dim {} of size {}", index, d, size);
  if (index < 0) index += size;
  return narrow(d, index, 1).squeeze(d);
}

Tensor Tensor::expand(const Shape& target) const {
  EMBER_CHECK(target.size() >= shape().size(), "expand: cannot expand {} to fewer dims {}", shape_str(shape()),
              shape_str(target));
  (void)ember::numel(target);  // a view too large to count is an error now, not in whatever uses it
  Shape shape(target.size());
  Strides strides(target.size(), 0);
  size_t lead = target.size() - this->shape().size();
  for (size_t i = 0; i < target.size(); ++i) {
    int64_t want = target[i];
    if (i < lead) {
      EMBER_CHECK(want >= 0, "expand: invalid size {} in {}", want, shape_str(target));
      shape[i] = want;
      continue;
    }
    int64_t have = this->shape()[i - lead];
    if (want == -1) want = have;
    EMBER_CHECK(have == want || have == 1, "expand: dim {} of size {} cannot expand to {} ({} -> {})", i - lead, have,
                want, shape_str(this->shape()), shape_str(target));
    shape[i] = want;
    strides[i] = have == want ? this->strides()[i - lead] : 0;
  }
  Tensor out = make_view(*this, shape, strides, offset());
  record("expand", out, {*this}, [in = this->shape()](const Tensor& g) -> Grads { return {sum_to(g, in)}; });
  return out;
}

Tensor Tensor::squeeze(int64_t d) const {
  d = normalize_dim(d, dim(), "squeeze");
  if (shape()[size_t(d)] != 1) return *this;
  Shape shape = this->shape();
  Strides strides = this->strides();
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  Tensor out = make_view(*this, shape, strides, offset());
  record("squeeze", out, {*this}, [in = this->shape()](const Tensor& g) -> Grads { return {g.reshape(in)}; });
  return out;
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = normalize_dim(d, dim() + 1, "unsqueeze");
  Shape shape = this->shape();
  Strides strides = this->strides();
  int64_t stride = size_t(d) < strides.size() ? strides[size_t(d)] * this->shape()[size_t(d)] : 1;
  shape.insert(shape.begin() + d, 1);
  strides.insert(strides.begin() + d, stride);
  Tensor out = make_view(*this, shape, strides, offset());
  record("unsqueeze", out, {*this}, [in = this->shape()](const Tensor& g) -> Grads { return {g.reshape(in)}; });
  return out;
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::clone() const {
  Tensor out = Tensor::empty(shape(), dtype(), device());
  kernel::copy(kernel_on(out), out.shape(), strided(out), strided(*this));
  record("clone", out, {*this}, [](const Tensor& g) -> Grads { return {g}; });
  return out;
}

Tensor Tensor::to(Dtype target) const {
  if (target == dtype()) return *this;
  Tensor out = Tensor::empty(shape(), target, device());
  kernel::copy(kernel_on(out), out.shape(), strided(out), strided(*this));
  if (is_real(target) && is_real(dtype()))
    record("to", out, {*this}, [source = dtype()](const Tensor& g) -> Grads { return {g.to(source)}; });
  return out;
}

Tensor Tensor::to(Device target) const {
  if (target == device()) return *this;
  Tensor source = contiguous();
  Tensor out = Tensor::empty(shape(), dtype(), target);
  copy_bytes_across_devices(out.raw_data(), target, source.raw_data(), device(), numel() * dtype_size(dtype()));
  record("to", out, {*this}, [source_device = device()](const Tensor& g) -> Grads { return {g.to(source_device)}; });
  return out;
}

namespace {
// Every in-place update starts with these checks, then bumps the storage's version, which
// autograd's saved tensors compare against (autograd/saved_tensor.h).
void check_inplace(const char* op, const Tensor& t) {
  EMBER_CHECK(t.defined(), "{}: the tensor is undefined", op);
  EMBER_CHECK(!grad_enabled() || !t.requires_grad(),
              "{}: in-place update of a tensor that requires grad; wrap it in NoGradGuard", op);
}
// src broadcasts to dst's own shape (an in-place update does not resize dst).
void check_into(const char* op, const Tensor& dst, const Tensor& src) {
  EMBER_CHECK(src.defined(), "{}: the source tensor is undefined", op);
  EMBER_CHECK(broadcast_shapes(src.shape(), dst.shape(), op) == dst.shape(), "{}: {} does not broadcast into {}", op,
              shape_str(src.shape()), shape_str(dst.shape()));
}
}  // namespace

void upload_into(const Tensor& dst, const void* host, int64_t bytes, GpuStream stream) {
  EMBER_CHECK(dst.defined(), "upload_into: the destination is an undefined tensor");
  EMBER_CHECK(dst.device().is_cuda() && dst.is_contiguous() && dst.numel() * int64_t(dtype_size(dst.dtype())) == bytes,
              "upload_into: expected a contiguous GPU tensor of {} bytes, got {} {} on {}", bytes,
              dtype_name(dst.dtype()), shape_str(dst.shape()), dst.device().str());
  if (bytes == 0) return;
  if (stream == GpuStream::Copy) cuda::upload_on_copy_stream(dst.device().index, dst.raw_data(), host, bytes);
  else copy_bytes_across_devices(dst.raw_data(), dst.device(), host, Device::cpu(), bytes);
}

Tensor& Tensor::copy_(const Tensor& source) {
  check_inplace("copy_", *this);
  check_into("copy_", *this, source);
  if (source.device() != device()) return copy_(source.detach().to(device()));
  bump_version();
  kernel::copy(kernel_on(*this), shape(), strided(*this), strided(source, shape()));
  return *this;
}
Tensor& Tensor::fill_(double value) {
  check_inplace("fill_", *this);
  bump_version();
  kernel::fill(kernel_on(*this), shape(), strided(*this), value);
  return *this;
}
Tensor& Tensor::add_(const Tensor& other, double alpha) {
  check_inplace("add_", *this);
  check_into("add_", *this, other);
  check_same_device("add_", {this, &other});
  EMBER_CHECK(other.dtype() == dtype(), "add_: dtypes differ ({} and {})", dtype_name(dtype()),
              dtype_name(other.dtype()));
  EMBER_CHECK(dtype() != Dtype::Bool, "add_: not defined for bool tensors");
  bump_version();
  kernel::add_into(kernel_on(*this), shape(), strided(*this), strided(other, shape()), alpha);
  return *this;
}
Tensor& Tensor::mul_(double value) {
  check_inplace("mul_", *this);
  EMBER_CHECK(is_real(dtype()), "mul_: expected a floating tensor (float32, float64 or bfloat16), got {}",
              dtype_name(dtype()));
  bump_version();
  kernel::scale(kernel_on(*this), shape(), strided(*this), value);
  return *this;
}

}  // namespace ember
