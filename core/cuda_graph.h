// A CUDA graph of one device's work: the work a function gives the device is captured once (not
// run), then replayed as one launch, with the same pointers, as often as asked (docs/cuda.md).
//
//   CudaGraph graph;
//   graph.warm_up(Device::cuda(0), step);     // step run once: the allocator notes what it needs
//   graph.capture(Device::cuda(0), step);     // step's GPU work recorded, not run
//   for (...) { refresh_inputs(); graph.replay(); }
//
// The captured function's host side runs once, at the capture: every replay repeats its GPU work
// exactly, so values the host computed then (a learning rate, a step count, a random seed) are
// replayed as they were, and inputs must be refreshed in place, in the tensors the graph reads.
// While capturing, the caching allocator makes no cudaMalloc (a block it has not cached is an
// error naming the warm-up) and keeps every block the capture used for the graph until the graph
// is destroyed, so tensors made during the capture (the loss, the gradients) are rewritten in place
// by each replay. A synchronising call, or a copy from the host, inside the capture is an error.
#pragma once
#include <functional>

#include "core/device.h"

namespace ember {

class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph();
  CudaGraph(CudaGraph&& other) noexcept;
  CudaGraph& operator=(CudaGraph&& other) noexcept;
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Captures the GPU work `fn` gives `device` (a GPU) into this graph (replacing any earlier one).
  // If fn throws, or the capture fails, nothing is kept and the error is raised.
  void capture(Device device, const std::function<void()>& fn);
  // Runs `fn` eagerly as the warm-up of the next capture: the caching allocator notes the size of
  // every block fn allocates, and capture() first puts a block of each in its cache (cudaMalloc for
  // the missing), so that the capture finds them even if later work (or state fn created for good)
  // has taken cached blocks since.
  void warm_up(Device device, const std::function<void()>& fn);
  // Queues the captured work on the device's stream (one launch; the host does not wait).
  void replay();
  bool captured() const { return graph_ != nullptr; }

 private:
  void reset();
  void* graph_ = nullptr;
  bool warmed_up_ = false;  // the allocator holds the sizes of a warm-up for the next capture
};

}  // namespace ember
