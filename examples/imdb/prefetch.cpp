// BatchPrefetcher (examples/imdb/prefetch.h): two sets of GPU buffers, filled on the copy stream.
#include "examples/imdb/prefetch.h"

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"

namespace ember::imdb {

BatchPrefetcher::BatchPrefetcher(Device device, const nn::ClassifierConfig& model, int64_t max_batch)
    : device_(device), model_(model), max_batch_(max_batch), slots_{Slot(device), Slot(device)} {
  EMBER_CHECK(device.is_cuda(), "BatchPrefetcher: uploads go to a GPU, not {}", device.str());
  EMBER_CHECK(max_batch > 0 && model.max_len > 0, "BatchPrefetcher: batches of {} x {} tokens", max_batch,
              model.max_len);
  const int64_t n = max_batch * model.max_len, T = model.max_len;
  for (Slot& s : slots_) {
    s.ids = Tensor::empty({n}, Dtype::Int64, device);
    s.buckets = Tensor::empty({3 * n + 2}, Dtype::Int64, device);
    s.positions = Tensor::empty({T}, Dtype::Int64, device);
    s.position_buckets = Tensor::empty({3 * T + 2}, Dtype::Int64, device);
    s.labels = Tensor::empty({max_batch}, Dtype::Int64, device);
    s.mask = Tensor::empty({n}, Dtype::Bool, device);
    // NOTE: the blocks may have been freed by work still queued on the compute stream: the first
    // upload into them waits for it.
    s.read.record(GpuStream::Compute);
  }
}

BatchPrefetcher::~BatchPrefetcher() {
  try {
    for (const Slot& s : slots_) s.uploaded.wait(GpuStream::Compute);
  } catch (...) {  // NOTE: a destructor must not throw; a broken device fails the next call anyway
  }
}

void BatchPrefetcher::prefetch(const Batch& batch) {
  EMBER_CHECK(prefetched_ == taken_, "BatchPrefetcher::prefetch: the batch prefetched before was not taken");
  const int64_t B = batch.batch, T = batch.seq_len, n = B * T;
  EMBER_CHECK(B > 0 && T > 0 && B <= max_batch_ && T <= model_.max_len,
              "BatchPrefetcher::prefetch: a batch of {} x {} tokens; at most {} x {}", B, T, max_batch_, model_.max_len);
  EMBER_CHECK(int64_t(batch.tokens.size()) == n && int64_t(batch.key_mask.size()) == n &&
                  int64_t(batch.labels.size()) == B,
              "BatchPrefetcher::prefetch: the batch's tokens ({}), mask ({}) and labels ({}) do not match {} x {}",
              batch.tokens.size(), batch.key_mask.size(), batch.labels.size(), B, T);
  Slot& s = slots_[size_t(prefetched_ % 2)];
  // Views of this batch's sizes, rewritten by the uploads below.
  DeviceBatch& v = s.view;
  v = DeviceBatch{};
  v.batch = B;
  v.seq_len = T;
  v.tokens.ids = s.ids.narrow(0, 0, n).view({B, T});
  v.tokens.buckets = s.buckets.narrow(0, 0, 3 * n + 2);
  v.positions.ids = s.positions.narrow(0, 0, T).view({1, T});
  v.positions.buckets = s.position_buckets.narrow(0, 0, 3 * T + 2);
  v.labels.ids = s.labels.narrow(0, 0, B);
  v.mask = s.mask.narrow(0, 0, n).view({B, T});
  s.read.wait(GpuStream::Copy);  // the step that read this slot's last batch is done (on the GPU)
  stage_ids(from_vector(batch.tokens, {B, T}), model_.vocab_size, /*with_buckets=*/true, device_, v.tokens,
            GpuStream::Copy);
  if (s.positions_len != T) {  // the same for every batch of this length: uploaded when it changes
    stage_ids(arange(T).view({1, T}), model_.max_len, /*with_buckets=*/true, device_, v.positions, GpuStream::Copy);
    s.positions_len = T;
  }
  v.positions.bound = model_.max_len;  // staged with it (above, or for an earlier batch of this length)
  std::vector<uint8_t> padding(batch.key_mask.size());
  for (size_t i = 0; i < padding.size(); ++i) padding[i] = batch.key_mask[i] == 0;
  upload_into(v.mask, padding.data(), n, GpuStream::Copy);
  stage_ids(from_vector(batch.labels, {B}), model_.classes, /*with_buckets=*/false, device_, v.labels,
            GpuStream::Copy);
  s.uploaded.record(GpuStream::Copy);
  ++prefetched_;
}

const DeviceBatch& BatchPrefetcher::take() {
  EMBER_CHECK(prefetched_ > taken_, "BatchPrefetcher::take: no batch was prefetched");
  EMBER_CHECK(released_ == taken_, "BatchPrefetcher::take: the batch taken before was not released");
  Slot& s = slots_[size_t(taken_ % 2)];
  s.uploaded.wait(GpuStream::Compute);
  ++taken_;
  return s.view;
}

void BatchPrefetcher::release() {
  EMBER_CHECK(released_ < taken_, "BatchPrefetcher::release: no batch was taken");
  slots_[size_t(released_ % 2)].read.record(GpuStream::Compute);
  ++released_;
}

}  // namespace ember::imdb
