// CudaGraph (core/cuda_graph.h): the Tensor-free side is in cuda/graph.cu.
#include "core/cuda_graph.h"

#include <utility>

#include "core/cuda_ops.h"
#include "core/error.h"

namespace ember {

CudaGraph::~CudaGraph() { reset(); }

CudaGraph::CudaGraph(CudaGraph&& other) noexcept : graph_(std::exchange(other.graph_, nullptr)) {}

CudaGraph& CudaGraph::operator=(CudaGraph&& other) noexcept {
  if (this != &other) {
    reset();
    graph_ = std::exchange(other.graph_, nullptr);
  }
  return *this;
}

void CudaGraph::reset() {
  if (graph_ != nullptr) cuda::graph_destroy(std::exchange(graph_, nullptr));
}

void CudaGraph::capture(Device device, const std::function<void()>& fn) {
  EMBER_CHECK(device.is_cuda(), "CudaGraph::capture: {} is not a GPU", device.str());
  EMBER_CHECK(device.index < cuda_device_count(), "CudaGraph::capture: {} is not available ({} CUDA devices)",
              device.str(), cuda_device_count());
  reset();
  cuda::graph_capture_begin(device.index);
  try {
    fn();
  } catch (...) {
    cuda::graph_capture_end(device.index, false);
    throw;
  }
  graph_ = cuda::graph_capture_end(device.index, true);
}

void CudaGraph::replay() {
  EMBER_CHECK(graph_ != nullptr, "CudaGraph::replay: nothing captured");
  cuda::graph_replay(graph_);
}

}  // namespace ember
