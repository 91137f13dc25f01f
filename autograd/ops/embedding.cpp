// Embedding lookup: out[..., :] = weight[ids[...], :].
//
// Backward scatters the output gradient's rows into a dense [V, D] gradient. Repeated ids must
// add up, deterministically whatever the thread count: the positions are bucketed by vocabulary
// row first (on the host: a counting sort over the rows, or with few ids in a large table a stable
// sort of the positions; the same buckets), then each thread (a GPU block) owns whole rows and
// adds their positions' gradients in position order. No two threads ever touch the same row, so
// there are no races. Kernels: core/kernels.h (CPU: core/cpu/embedding.cpp, GPU:
// cuda/embedding_kernels.cu).
// NOTE: on a GPU, ids may stay on the host (the trainer keeps its tokens there): they are checked
// there, and neither the forward nor the backward makes the host wait for the GPU (the ids and
// buckets are uploaded through pinned staging). Ids on the GPU are read back first, which waits.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "autograd/ops/op_support.h"

namespace ember {
namespace {

// "[1, 2]": the multi-index of flat position `flat` in `shape`.
std::string position_str(const Shape& shape, int64_t flat) {
  Shape index(shape.size(), 0);
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return shape_str(index);
}

// The ids as int64, contiguous and row-major, each checked against the vocabulary size V.
std::vector<int64_t> checked_ids(const Tensor& ids, int64_t V) {
  std::vector<int64_t> out = ids.to_vector<int64_t>();
  for (size_t i = 0; i < out.size(); ++i)
    EMBER_CHECK(out[i] >= 0 && out[i] < V, "embedding: id {} at position {} of ids {} is out of range for a vocabulary of {} rows",
                out[i], position_str(ids.shape(), int64_t(i)), shape_str(ids.shape()), V);
  return out;
}

// Rows of `ids` grouped by vocabulary row: positions[starts[k] .. starts[k+1]) are the positions
// (ascending) whose id is rows[k]; only rows that occur are listed.
struct RowBuckets {
  std::vector<int64_t> rows, starts, positions;
};

RowBuckets bucket_by_row(const std::vector<int64_t>& ids, int64_t V) {
  RowBuckets buckets;
  if (int64_t(ids.size()) * 8 < V) {
    // Few ids in a large table (a batch's hashed n-grams among 2^23 rows, examples/imdb/nbsvm.h): sort the
    // positions by row, O(n log n), rather than count over every row (a 64 MB array at 2^23 rows, each step).
    // The same buckets: stable, so each row's positions stay ascending.
    buckets.positions.resize(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) buckets.positions[i] = int64_t(i);
    std::stable_sort(buckets.positions.begin(), buckets.positions.end(),
                     [&](int64_t a, int64_t b) { return ids[size_t(a)] < ids[size_t(b)]; });
    for (size_t k = 0; k < ids.size(); ++k) {
      const int64_t row = ids[size_t(buckets.positions[k])];
      if (buckets.rows.empty() || buckets.rows.back() != row) {
        buckets.rows.push_back(row);
        buckets.starts.push_back(int64_t(k));
      }
    }
    buckets.starts.push_back(int64_t(ids.size()));
    return buckets;
  }
  std::vector<int64_t> count(size_t(V) + 1, 0);
  for (int64_t id : ids) ++count[size_t(id) + 1];
  for (int64_t v = 0; v < V; ++v) {
    if (count[size_t(v) + 1] > 0) {
      buckets.rows.push_back(v);
      buckets.starts.push_back(count[size_t(v)]);
    }
    count[size_t(v) + 1] += count[size_t(v)];  // now the first slot of row v + 1
  }
  buckets.starts.push_back(int64_t(ids.size()));
  buckets.positions.resize(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) buckets.positions[size_t(count[size_t(ids[i])]++)] = int64_t(i);
  return buckets;
}

// `values` as an int64 tensor [n] on `device` (an upload, without waiting, to a GPU).
Tensor on_device(const std::vector<int64_t>& values, Device device) {
  if (values.empty()) return Tensor::empty({0}, Dtype::Int64, device);
  return from_vector(values, {int64_t(values.size())}).to(device);
}

}  // namespace

// ---- Ids staged on a GPU before a CUDA graph's step (autograd/ops.h, DeviceIds)

void stage_ids(const Tensor& host_ids, int64_t bound, bool with_buckets, Device device, DeviceIds& into,
               GpuStream stream) {
  EMBER_CHECK(host_ids.defined(), "stage_ids: the ids are an undefined tensor");
  EMBER_CHECK(host_ids.device().is_cpu() && is_integer(host_ids.dtype()),
              "stage_ids: expected integer ids on the host, got {} on {}", dtype_name(host_ids.dtype()),
              host_ids.device().str());
  EMBER_CHECK(device.is_cuda(), "stage_ids: the ids go to a GPU, not {}", device.str());
  EMBER_CHECK(bound > 0, "stage_ids: the bound must be > 0, got {}", bound);
  std::vector<int64_t> ids = host_ids.to_vector<int64_t>();
  for (size_t i = 0; i < ids.size(); ++i)
    EMBER_CHECK(ids[i] >= 0 && ids[i] < bound, "stage_ids: id {} at position {} of ids {} is out of range [0, {})",
                ids[i], position_str(host_ids.shape(), int64_t(i)), shape_str(host_ids.shape()), bound);
  const int64_t n = int64_t(ids.size());
  // NOTE: a CUDA graph reads the tensors it was captured with: they are rewritten in place, so the
  // shape (and device) must stay those of the first call.
  if (into.ids.defined())
    EMBER_CHECK(into.ids.shape() == host_ids.shape() && into.ids.device() == device &&
                    into.buckets.defined() == with_buckets,
                "stage_ids: ids {} on {} cannot go into the staged ids {} on {} (a graph's inputs keep their shape)",
                shape_str(host_ids.shape()), device.str(), shape_str(into.ids.shape()), into.ids.device().str());
  else {
    into.ids = Tensor::empty(host_ids.shape(), Dtype::Int64, device);
    if (with_buckets) into.buckets = Tensor::empty({3 * n + 2}, Dtype::Int64, device);
  }
  into.bound = bound;
  upload_into(into.ids, ids.data(), n * 8, stream);
  if (!with_buckets) return;
  RowBuckets buckets = bucket_by_row(ids, bound);
  std::vector<int64_t> packed(size_t(3 * n + 2), 0);  // count, rows [n], starts [n + 1], positions [n]
  packed[0] = int64_t(buckets.rows.size());
  std::copy(buckets.rows.begin(), buckets.rows.end(), packed.begin() + 1);
  std::copy(buckets.starts.begin(), buckets.starts.end(), packed.begin() + 1 + n);
  std::copy(buckets.positions.begin(), buckets.positions.end(), packed.begin() + 2 + 2 * n);
  upload_into(into.buckets, packed.data(), int64_t(packed.size()) * 8, stream);
}

Tensor embedding(const Tensor& weight, const DeviceIds& ids) {
  EMBER_CHECK(weight.dim() == 2 && is_floating(weight.dtype()) && weight.device().is_cuda(),
              "embedding: staged ids need a floating 2-D weight on a GPU, got {} {} on {}", dtype_name(weight.dtype()),
              shape_str(weight.shape()), weight.device().str());
  // The buckets serve only the backward: ids staged without them do for a forward that records none
  // (an evaluation's, under NoGradGuard).
  EMBER_CHECK(ids.ids.defined() && ids.ids.device() == weight.device() &&
                  (ids.buckets.defined() || !any_requires_grad({weight})),
              "embedding: the staged ids must be on the weight's device {} with their buckets (stage_ids with_buckets)",
              weight.device().str());
  const int64_t V = weight.shape()[0], D = weight.shape()[1];
  EMBER_CHECK(ids.bound == V, "embedding: the ids were checked against {} rows, the weight has {}", ids.bound, V);
  Shape out_shape = ids.ids.shape();
  out_shape.push_back(D);
  const On on = kernel_on(weight);
  Tensor out = Tensor::empty(out_shape, weight.dtype(), weight.device());
  kernel::embedding_forward(on, weight.raw_data(), weight.strides()[0], weight.strides()[1], ids.ids.data<int64_t>(),
                            ids.ids.numel(), D, out.raw_data());
  // The staged buckets are saved like any tensor the backward reads (cross_entropy's staged targets
  // say why the trainer's refills do not trip the check).
  record("embedding", out, {weight},
         [on, buckets = save(ids.buckets), n = ids.ids.numel(), V, D](const Tensor& g) -> Grads {
           Tensor grad = g.contiguous();
           Tensor dweight = zeros({V, D}, grad.dtype(), grad.device());
           if (n == 0) return {dweight};
           const int64_t* b = buckets.get().data<int64_t>();  // count, rows [n], starts [n + 1], positions [n]
           kernel::embedding_backward(on, grad.raw_data(), b + 1, b + 1 + n, b + 2 + 2 * n, n, D, dweight.raw_data(),
                                      b);
           return {dweight};
         });
  return out;
}

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  if (ids.device() != Device::cpu())  // host ids go with a weight anywhere: checked, then uploaded
    check_same_device("embedding", {&weight, &ids});
  EMBER_CHECK(weight.dim() == 2, "embedding: weight must be 2-D [V, D], got shape {}", shape_str(weight.shape()));
  EMBER_CHECK(is_integer(ids.dtype()), "embedding: ids must be int32 or int64, got {}", dtype_name(ids.dtype()));
  EMBER_CHECK(is_floating(weight.dtype()), "embedding: weight must be float32 or float64, got {}",
              dtype_name(weight.dtype()));
  const int64_t V = weight.shape()[0], D = weight.shape()[1];
  std::vector<int64_t> id_list = checked_ids(ids, V);

  Shape out_shape = ids.shape();
  out_shape.push_back(D);
  const On on = kernel_on(weight);
  Tensor out = Tensor::empty(out_shape, weight.dtype(), weight.device());
  Tensor device_ids = on_device(id_list, weight.device());
  kernel::embedding_forward(on, weight.raw_data(), weight.strides()[0], weight.strides()[1],
                            device_ids.data<int64_t>(), int64_t(id_list.size()), D, out.raw_data());
  record("embedding", out, {weight, ids}, [on, id_list = std::move(id_list), V, D](const Tensor& g) -> Grads {
    RowBuckets buckets = bucket_by_row(id_list, V);
    Tensor grad = g.contiguous();
    Tensor dweight = zeros({V, D}, grad.dtype(), grad.device());
    if (buckets.rows.empty()) return {dweight, Tensor()};
    const Device device = grad.device();
    Tensor rows = on_device(buckets.rows, device), starts = on_device(buckets.starts, device),
           positions = on_device(buckets.positions, device);
    kernel::embedding_backward(on, grad.raw_data(), rows.data<int64_t>(), starts.data<int64_t>(),
                               positions.data<int64_t>(), int64_t(buckets.rows.size()), D, dweight.raw_data(),
                               nullptr);
    return {dweight, Tensor()};
  });
  return out;
}

}  // namespace ember
