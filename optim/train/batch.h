// A step's batch: named arrays. The data gives them as host tensors (Batch); on a GPU a step reads them as a
// DeviceBatch (prefetch.h uploads it during the step before; graph_step.h replays a step on it). Most arrays go up as they are; an array of ids (tokens, targets) is declared in the batch's Layout, so that its
// ids are checked on the host before they go (a kernel cannot raise an error naming the bad id, and a CUDA graph
// replays without the host's checks) and, for an embedding's backward, with their buckets (stage_ids,
// autograd/ops.h): the graph-safe embedding and cross_entropy overloads read them as DeviceIds.
//
//   train::Layout layout{{"tokens", {.id_bound = vocab, .buckets = true}}, {"labels", {.id_bound = classes}},
//                        {"positions", {.id_bound = max_len, .buckets = true, .same_per_shape = true}}};
//   train::DeviceBatch on_gpu;
//   train::stage(batch, layout, Device::cuda(0), GpuStream::Compute, on_gpu);  // no host wait
//   Tensor logits = model.forward(on_gpu.ids_at("tokens"), on_gpu.ids_at("positions"), on_gpu.at("mask"));
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "autograd/ops.h"
#include "core/device.h"
#include "core/gpu_stream.h"
#include "core/tensor.h"

namespace ember::train {

// A batch on the host: named arrays (CPU tensors), what a run's data gives for each step.
using Batch = std::map<std::string, Tensor>;

// How one named array goes up. The default: as it is (any dtype).
struct ArrayKind {
  int64_t id_bound = 0;         // > 0: integer ids, each checked in [0, id_bound) on the host (DeviceIds)
  bool buckets = false;         // ids with the embedding backward's buckets (a training step's; not an evaluation's)
  bool same_per_shape = false;  // the same values in every batch of its shape (positions 0 .. T-1): staged again
                                // only when the shape changes
};
using Layout = std::map<std::string, ArrayKind>;  // arrays it does not name go up as they are

// Named arrays on a GPU. Every array is in `arrays` (an ids array: its ids); ids arrays are also in `ids`, with
// their bound and buckets, for embedding(weight, DeviceIds) and cross_entropy(logits, DeviceIds).
struct DeviceBatch {
  std::map<std::string, Tensor> arrays;
  std::map<std::string, DeviceIds> ids;
  std::set<std::string> same_per_shape;  // arrays up already for their shape (ArrayKind::same_per_shape)
  const Tensor& at(const std::string& name) const;          // an error naming the array when it is not there
  const DeviceIds& ids_at(const std::string& name) const;   // the same, for an ids array
  const DeviceIds* find_ids(const std::string& name) const;  // nullptr when there is none of that name
};

// The host batch's arrays into `into` on `device` (a GPU), in stream order on `stream` (the compute stream, or the
// copy stream: the caller orders it with events), through pinned staging: the host does not wait. Tensors of
// `into` of the array's shape are rewritten in place (a graph's inputs, a prefetcher's buffers keep their
// addresses); others are made. Each host array is a contiguous CPU tensor; ids are checked (an error naming the
// array and the id). `with_buckets = false` leaves every ids array's buckets out (a forward without gradients).
void stage(const Batch& batch, const Layout& layout, Device device, GpuStream stream, DeviceBatch& into,
           bool with_buckets = true);

}  // namespace ember::train
