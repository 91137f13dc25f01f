// Data parallelism: buckets of gradients, filled as backward makes them ready (autograd/hooks.h),
// all-reduced in bucket order while backward goes on, then averaged back into each .grad.
#include "nn/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "autograd/ops.h"
#include "core/distributed/agreement.h"
#include "core/error.h"

namespace ember::nn {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// FNV-1a over 64-bit words: a fingerprint of what must be equal on every rank.
struct Fingerprint {
  uint64_t value = 1469598103934665603ull;
  void add(uint64_t word) {
    for (int i = 0; i < 8; ++i) value = (value ^ ((word >> (8 * i)) & 0xff)) * 1099511628211ull;
  }
};

}  // namespace

DataParallel::DataParallel(std::vector<Tensor> parameters, distributed::ProcessGroup& group,
                           DataParallelOptions options)
    : params_(std::move(parameters)), group_(group), options_(options) {
  EMBER_CHECK(options_.bucket_bytes > 0, "DataParallel: bucket_bytes must be positive, got {}", options_.bucket_bytes);
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    EMBER_CHECK(p.defined() && p.requires_grad() && p.is_leaf() && p.is_contiguous(),
                "DataParallel: parameter {} must be a contiguous leaf that requires grad", i);
    // NOTE: one process sends nothing, so its parameters may live anywhere (a GPU run without mpirun).
    EMBER_CHECK(group_.size() == 1 || p.device() == group_.device(), "DataParallel: parameter {} is on {}, the {} group's tensors on {}", i,
                p.device().str(), group_.backend(), group_.device().str());
  }
  if (group_.size() > 1) {
    check_same_on_every_rank();
    broadcast_parameters();
  }

  // Buckets in reverse parameter order (backward makes the last layers' gradients first), one
  // dtype per bucket, closed once they reach bucket_bytes.
  bucket_of_.resize(params_.size());
  ready_.assign(params_.size(), 0);
  for (size_t k = params_.size(); k-- > 0;) {
    const Tensor& p = params_[k];
    const int64_t bytes = p.numel() * dtype_size(p.dtype());
    bool fits = !buckets_.empty() && buckets_.back().dtype == p.dtype() &&
                (buckets_.back().numel * dtype_size(p.dtype()) + bytes <= options_.bucket_bytes);
    if (!fits) {
      buckets_.emplace_back();
      buckets_.back().dtype = p.dtype();
    }
    Bucket& bucket = buckets_.back();
    bucket.params.push_back(k);
    bucket.offsets.push_back(bucket.numel);
    bucket.numel += p.numel();
    bucket_of_[k] = buckets_.size() - 1;
  }
  for (Bucket& bucket : buckets_) {
    bucket.buffer = Tensor::empty({bucket.numel}, bucket.dtype, group_.device());
    const Tensor& first = params_[bucket.params.front()];
    if (bucket.params.size() == 1 && first.dim() >= 2 && options_.sparse_min_rows > 0 &&
        first.size(0) >= options_.sparse_min_rows && group_.device().is_cpu())
      bucket.touched = Tensor::empty({first.size(0)}, Dtype::Bool);
  }
  // One process: the gradients are already the average; nothing to send.
  if (group_.size() == 1) options_.reduce_gradients = false;
  if (options_.reduce_gradients && options_.overlap)
    for (size_t k = 0; k < params_.size(); ++k)
      hooks_.push_back(on_grad_ready(params_[k], [this, k](const Tensor&) { on_ready(k); }));
}

DataParallel::~DataParallel() {
  hooks_.clear();
  try {
    group_.wait_all();  // nothing may still write into the buckets or gradients
  } catch (...) {
  }
}

void DataParallel::check_same_on_every_rank() {
  Fingerprint params, options;
  params.add(params_.size());
  for (const Tensor& p : params_) {
    params.add(uint64_t(p.dtype()));
    params.add(p.shape().size());
    for (int64_t d : p.shape()) params.add(uint64_t(d));
  }
  options.add(uint64_t(options_.bucket_bytes));
  options.add(options_.reduce_gradients);
  options.add(uint64_t(options_.sparse_min_rows));
  Tensor mine = from_vector(std::vector<int64_t>{int64_t(params.value), int64_t(options.value)}, {2}, group_.device());
  Tensor all = Tensor::empty({2 * int64_t(group_.size())}, Dtype::Int64, group_.device());
  group_.all_gather(mine, all);
  std::vector<int64_t> values = all.to(Device::cpu()).to_vector<int64_t>();
  // Every rank sees every fingerprint, so every rank raises the same error (an AgreedError).
  for (int r = 1; r < group_.size(); ++r) {
    if (values[2 * r] != values[0])
      throw distributed::AgreedError(fmt::format("DataParallel: rank {} has other parameters than rank 0 (count, "
                                                 "shapes or dtypes differ): every rank must build the same model", r));
    if (values[2 * r + 1] != values[1])
      throw distributed::AgreedError(fmt::format("DataParallel: rank {} was given other options than rank 0 "
                                                 "(bucket_bytes, reduce_gradients or sparse_min_rows differ)", r));
  }
}

void DataParallel::check_replicas_agree() {
  Fingerprint bits;
  for (const Tensor& p : params_) {
    Tensor host = p.detach().to(Device::cpu()).contiguous();
    const unsigned char* data = static_cast<const unsigned char*>(host.raw_data());
    const int64_t bytes = host.numel() * dtype_size(host.dtype());
    uint64_t word = 0;
    for (int64_t i = 0; i < bytes; ++i) {  // 8 bytes at a time into the fingerprint
      word = (word << 8) | data[i];
      if (i % 8 == 7 || i == bytes - 1) bits.add(word), word = 0;
    }
  }
  Tensor mine = from_vector(std::vector<int64_t>{int64_t(bits.value)}, {1}, group_.device());
  Tensor all = Tensor::empty({int64_t(group_.size())}, Dtype::Int64, group_.device());
  group_.all_gather(mine, all);
  std::vector<int64_t> values = all.to(Device::cpu()).to_vector<int64_t>();
  for (int r = 1; r < group_.size(); ++r)
    if (values[size_t(r)] != values[0])
      throw distributed::AgreedError(fmt::format("DataParallel: rank {}'s parameters differ from rank 0's: the ranks "
                                                 "no longer train the same model (a rank took another step, or its "
                                                 "arithmetic differs)", r));
}

void DataParallel::broadcast_parameters() {
  for (Tensor& p : params_) {
    Tensor data = p.detach();
    group_.broadcast(data, 0);
  }
}

void DataParallel::on_ready(size_t param) {
  EMBER_CHECK(!ready_[param], "DataParallel: parameter {} got a second gradient before synchronize_gradients(): one "
              "backward() per step (gradient accumulation over several passes is not supported)", param);
  ready_[param] = 1;
  Bucket& bucket = buckets_[bucket_of_[param]];
  if (++bucket.ready == bucket.params.size()) launch_ready_buckets(/*from_hook=*/true);
}

void DataParallel::launch_ready_buckets(bool from_hook) {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].ready == buckets_[next_launch_].params.size()) {
    launch(buckets_[next_launch_++]);
    stats_.early_buckets += from_hook;
  }
}

void DataParallel::launch(Bucket& bucket) {
  if (bucket.touched.defined()) return launch_sparse(bucket);
  const int64_t item = dtype_size(bucket.dtype);
  for (size_t j = 0; j < bucket.params.size(); ++j) {
    Tensor& p = params_[bucket.params[j]];
    Tensor grad = p.grad();
    if (!grad.defined()) {  // no gradient reached it on this rank: it counts as zeros
      grad = zeros_like(p.detach());
      p.set_grad(grad);
    } else if (!grad.is_contiguous()) {
      grad = grad.contiguous();
      p.set_grad(grad);
    }
    if (bucket.buffer.device().is_cpu())
      std::memcpy(static_cast<char*>(bucket.buffer.raw_data()) + bucket.offsets[j] * item, grad.raw_data(),
                  size_t(grad.numel() * item));
    else
      bucket.buffer.narrow(0, bucket.offsets[j], grad.numel()).copy_(grad.view({grad.numel()}));
  }
  const double submitted = now_seconds();
  ++stats_.collectives;
  group_.start_all_reduce(bucket.buffer, distributed::ReduceOp::Sum, [this, &bucket, submitted] {
    unflatten(bucket, submitted);
  });
}

// Runs when the bucket's sum is in its buffer: on the communication thread (CPU), or in
// wait_all() (GPU). Writes buffer / size into each gradient.
void DataParallel::unflatten(Bucket& bucket, double submitted) {
  const double done = now_seconds();
  stats_.comm_seconds += done - std::max(submitted, comm_thread_free_at_);
  const double scale = 1.0 / double(group_.size());
  if (bucket.buffer.device().is_cpu()) {
    // Plain loops, not Tensor ops: this may run beside the training thread, off the thread pool.
    dispatch_floating(bucket.dtype, "DataParallel", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* sum = bucket.buffer.data<T>();
      for (size_t j = 0; j < bucket.params.size(); ++j) {
        Tensor grad = params_[bucket.params[j]].grad();
        T* out = grad.data<T>();
        const T* in = sum + bucket.offsets[j];
        const T s = T(scale);
        for (int64_t i = 0, n = grad.numel(); i < n; ++i) out[i] = in[i] * s;
      }
    });
  } else {
    bucket.buffer.mul_(scale);
    for (size_t j = 0; j < bucket.params.size(); ++j) {
      Tensor grad = params_[bucket.params[j]].grad();
      grad.copy_(bucket.buffer.narrow(0, bucket.offsets[j], grad.numel()).view(grad.shape()));
    }
  }
  comm_thread_free_at_ = now_seconds();
}

// A sparse bucket: this rank's non-zero rows marked (on the calling thread), the marks all-reduced
// (max); then, on the communication thread, the rows marked anywhere are packed, all-reduced and
// written back / size. Rows no rank touched stay as they are: +0 on every rank.
void DataParallel::launch_sparse(Bucket& bucket) {
  Tensor& p = params_[bucket.params.front()];
  Tensor grad = p.grad();
  if (!grad.defined()) {
    grad = zeros_like(p.detach());
    p.set_grad(grad);
  } else if (!grad.is_contiguous()) {
    grad = grad.contiguous();
    p.set_grad(grad);
  }
  const int64_t rows = grad.size(0), row_bytes = grad.numel() / rows * dtype_size(grad.dtype());
  const char* data = static_cast<const char*>(grad.raw_data());
  bool* marks = bucket.touched.data<bool>();
  const std::vector<char> zero(size_t(row_bytes), 0);
  // Any bit set marks a row (-0.0 too), so that the result is the dense sum's bit for bit.
  for (int64_t r = 0; r < rows; ++r) marks[r] = std::memcmp(data + r * row_bytes, zero.data(), size_t(row_bytes)) != 0;
  const double submitted = now_seconds();
  stats_.collectives += 2;
  group_.start_all_reduce(bucket.touched, distributed::ReduceOp::Max, [this, &bucket, submitted] {
    reduce_touched_rows(bucket, submitted);
  });
}

void DataParallel::reduce_touched_rows(Bucket& bucket, double submitted) {
  Tensor grad = params_[bucket.params.front()].grad();
  const int64_t rows = grad.size(0), width = grad.numel() / rows;
  const bool* marks = bucket.touched.data<bool>();
  std::vector<int64_t> touched;
  for (int64_t r = 0; r < rows; ++r)
    if (marks[r]) touched.push_back(r);
  const double scale = 1.0 / double(group_.size());
  dispatch_floating(bucket.dtype, "DataParallel", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* g = grad.data<T>();
    T* packed = bucket.buffer.data<T>();
    for (size_t k = 0; k < touched.size(); ++k) std::memcpy(packed + k * width, g + touched[k] * width, width * sizeof(T));
    Tensor sent = bucket.buffer.narrow(0, 0, int64_t(touched.size()) * width);
    if (sent.numel() > 0) group_.all_reduce(sent, distributed::ReduceOp::Sum);  // on this (the communication) thread
    const T s = T(scale);
    for (size_t k = 0; k < touched.size(); ++k) {
      T* out = g + touched[k] * width;
      const T* in = packed + k * width;
      for (int64_t i = 0; i < width; ++i) out[i] = in[i] * s;
    }
    stats_.bytes += int64_t(touched.size()) * width * int64_t(sizeof(T)) + rows;
  });
  const double done = now_seconds();
  stats_.comm_seconds += done - std::max(submitted, comm_thread_free_at_);
  comm_thread_free_at_ = done;
}

void DataParallel::synchronize_gradients() {
  const double start = now_seconds();
  if (options_.reduce_gradients) {
    for (Bucket& bucket : buckets_) bucket.ready = bucket.params.size();  // the rest count as ready now
    launch_ready_buckets(/*from_hook=*/false);
    group_.wait_all();
    for (const Bucket& bucket : buckets_)
      if (!bucket.touched.defined()) stats_.bytes += bucket.numel * dtype_size(bucket.dtype);  // sparse: counted as sent
  }
  for (Bucket& bucket : buckets_) bucket.ready = 0;
  std::fill(ready_.begin(), ready_.end(), 0);
  next_launch_ = 0;
  stats_.exposed_seconds += now_seconds() - start;
  ++stats_.steps;
}

}  // namespace ember::nn
