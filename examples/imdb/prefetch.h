// The next batch, uploaded while the current step runs (docs/cuda.md, "The next batch, uploaded
// during the step"): the batch is checked on the host and copied to the GPU on its copy stream
// (core/copy_stream.h), into one of two sets of GPU buffers, while the compute stream runs the step
// before it. Events order the two on the GPU; the host never waits.
//
//   BatchPrefetcher prefetcher(device, model_config, batch_size);
//   prefetcher.prefetch(batch_0);
//   for (n = 0; ...) {
//     const DeviceBatch& inputs = prefetcher.take();    // the step waits (on the GPU) for its upload
//     Tensor loss = gpu_step(model, optimizer, inputs, clip);    // or GraphStep::run(inputs)
//     prefetcher.release();                             // the step that reads `inputs` is queued
//     prefetcher.prefetch(batch_n_plus_1);              // its upload runs during step n
//   }
//
// Slot k % 2 holds batch k. Before batch k + 2 overwrites it, the copy stream waits for the step
// that read batch k; the compute stream waits for batch k's upload before its step. The host copies
// each batch into pinned staging blocks (cuda/runtime.cu), each reused only once the copy that read
// it is done (its event), never by waiting: another block is taken while one is busy.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

#include "autograd/ops.h"
#include "core/copy_stream.h"
#include "core/device.h"
#include "core/gpu_stream.h"
#include "examples/imdb/batcher.h"
#include "nn/transformer.h"

namespace ember::imdb {

// A batch's inputs on the GPU, as the step reads them (views into a prefetcher's buffers, or a
// graph's own tensors).
struct DeviceBatch {
  int64_t batch = 0, seq_len = 0;
  DeviceIds tokens;     // int64 [B, T] with the embedding backward's buckets
  DeviceIds positions;  // int64 [1, T]: 0 .. T-1, with buckets
  DeviceIds labels;     // int64 [B]
  Tensor mask;          // bool [B, T], true at padding
  DeviceIds bigrams;    // int64 [B, T]: the tokens' hashed_bigrams, with buckets (a model with bigram_buckets only)
  const DeviceIds* bigrams_if_any() const { return bigrams.ids.defined() ? &bigrams : nullptr; }
};

// The batch's inputs into `into` on `device` (a GPU), as the step reads them: the one way a batch
// goes up, for every step and evaluation that reads a DeviceBatch. The tokens, with the embedding
// backward's buckets when `with_buckets`, and the labels are checked on the host and staged
// (stage_ids, autograd/ops.h), the padding mask uploaded, all through pinned staging on `stream` (the
// compute stream, or the copy stream: the caller orders it with events), without a host wait; with
// model.bigram_buckets, the tokens' hashed bigrams (nn/bigrams.h, computed on the host) too.
// Tensors of `into` already made are rewritten in place (a graph's inputs, a prefetcher's buffers
// keep their addresses); made on the first call otherwise. The positions (0 .. T-1), the same for
// every batch of a length, are staged only when `into` last held another length (or none).
// (Without buckets: for a forward without gradients, an evaluation's.)
void stage(const Batch& batch, const nn::ClassifierConfig& model, Device device, GpuStream stream, DeviceBatch& into,
           bool with_buckets = true);

class BatchPrefetcher {
 public:
  // Buffers for batches of up to max_batch reviews of up to model.max_len tokens on `device` (a GPU).
  BatchPrefetcher(Device device, const nn::ClassifierConfig& model, int64_t max_batch);
  // NOTE: the buffers go back to the caching allocator, which hands blocks out in the compute
  // stream's order: the compute stream first waits (on the GPU) for an upload still queued.
  ~BatchPrefetcher();
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  // Checks `batch` on the host (token ids below the vocabulary size, labels below the classes,
  // sizes within the buffers') and queues its upload on the copy stream. The host does not wait.
  // The batch prefetched before must have been taken.
  void prefetch(const Batch& batch);
  // The prefetched batch, for the step about to be queued: the compute stream waits (on the GPU)
  // for its upload. Valid until the prefetch after next.
  const DeviceBatch& take();
  // The step that reads the taken batch is queued: its buffers are free once that work is done.
  void release();

  bool has_prefetched() const { return prefetched_ > taken_; }
  int64_t uploads() const { return prefetched_; }
  // Recorded on the copy stream after the last prefetched batch's upload (tests poll it).
  const GpuEvent& last_upload() const { return slots_[size_t((prefetched_ + 1) % 2)].uploaded; }

 private:
  struct Slot {
    Tensor ids, buckets, positions, position_buckets, labels, mask;  // flat, of the largest batch's sizes
    Tensor bigram_ids, bigram_buckets;                              // (a model with bigram embeddings)
    DeviceBatch view;  // views of the last batch's sizes into them
    GpuEvent uploaded, read;
    explicit Slot(Device device) : uploaded(device), read(device) {}
  };

  Device device_;
  nn::ClassifierConfig model_;
  int64_t max_batch_;
  std::array<Slot, 2> slots_;
  int64_t prefetched_ = 0, taken_ = 0, released_ = 0;
};

}  // namespace ember::imdb
