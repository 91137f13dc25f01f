// A batch staged on the GPU, and BatchPrefetcher (examples/imdb/prefetch.h): two sets of GPU buffers, filled on the
// copy stream.
#include "examples/imdb/prefetch.h"

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "nn/bigrams.h"

namespace ember::imdb {

void stage(const Batch& batch, const nn::ClassifierConfig& model, Device device, GpuStream stream, DeviceBatch& into,
           bool with_buckets) {
  const int64_t B = batch.batch, T = batch.seq_len;
  const bool new_length = into.seq_len != T || !into.positions.ids.defined();
  into.batch = B;
  into.seq_len = T;
  const Tensor tokens = from_vector(batch.tokens, {B, T});
  stage_ids(tokens, model.vocab_size, with_buckets, device, into.tokens, stream);
  if (new_length) stage_ids(arange(T).view({1, T}), model.max_len, with_buckets, device, into.positions, stream);
  std::vector<uint8_t> padding(batch.key_mask.size());
  for (size_t i = 0; i < padding.size(); ++i) padding[i] = batch.key_mask[i] == 0;
  if (!into.mask.defined()) into.mask = Tensor::empty({B, T}, Dtype::Bool, device);
  upload_into(into.mask, padding.data(), B * T, stream);
  stage_ids(from_vector(batch.labels, {B}), model.classes, /*with_buckets=*/false, device, into.labels, stream);
  if (model.bigram_buckets > 0)
    stage_ids(nn::hashed_bigrams(tokens, model.bigram_buckets), model.bigram_buckets, with_buckets, device, into.bigrams,
              stream);
}

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
    if (model.bigram_buckets > 0) {
      s.bigram_ids = Tensor::empty({n}, Dtype::Int64, device);
      s.bigram_buckets = Tensor::empty({3 * n + 2}, Dtype::Int64, device);
    }
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
  DeviceBatch& v = s.view;  // views of this batch's sizes, rewritten by stage()
  if (v.batch != B || v.seq_len != T) {
    v.tokens.ids = s.ids.narrow(0, 0, n).view({B, T});
    v.tokens.buckets = s.buckets.narrow(0, 0, 3 * n + 2);
    v.labels.ids = s.labels.narrow(0, 0, B);
    v.mask = s.mask.narrow(0, 0, n).view({B, T});
    if (s.bigram_ids.defined()) {
      v.bigrams.ids = s.bigram_ids.narrow(0, 0, n).view({B, T});
      v.bigrams.buckets = s.bigram_buckets.narrow(0, 0, 3 * n + 2);
    }
  }
  if (v.seq_len != T) {  // (stage() then uploads this length's positions)
    v.positions.ids = s.positions.narrow(0, 0, T).view({1, T});
    v.positions.buckets = s.position_buckets.narrow(0, 0, 3 * T + 2);
  }
  s.read.wait(GpuStream::Copy);  // the step that read this slot's last batch is done (on the GPU)
  stage(batch, model_, device_, GpuStream::Copy, v);
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
