// CudaGraph (core/cuda_graph.h): the Tensor-free side is in cuda/graph.cu.
#include "core/cuda_graph.h"

#include <functional>
#include <utility>

#include "core/cuda_ops.h"
#include "core/error.h"

namespace ember {

CudaGraph::~CudaGraph() { reset(); }

CudaGraph::CudaGraph(CudaGraph&& other) noexcept
    : graph_(std::exchange(other.graph_, nullptr)), warmed_up_(std::exchange(other.warmed_up_, false)) {}

CudaGraph& CudaGraph::operator=(CudaGraph&& other) noexcept {
  if (this != &other) {
    reset();
    graph_ = std::exchange(other.graph_, nullptr);
    warmed_up_ = std::exchange(other.warmed_up_, false);
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
  if (std::exchange(warmed_up_, false)) cuda::allocator_fill_recorded(device.index);
  cuda::graph_capture_begin(device.index);
  try {
    fn();
  } catch (...) {
    cuda::graph_capture_end(device.index, false);
    throw;
  }
  graph_ = cuda::graph_capture_end(device.index, true);
}

void CudaGraph::warm_up(Device device, const std::function<void()>& fn) {
  EMBER_CHECK(device.is_cuda() && device.index < cuda_device_count(), "CudaGraph::warm_up: {} is not an available GPU",
              device.str());
  cuda::allocator_record(device.index, true);
  try {
    fn();
  } catch (...) {
    cuda::allocator_record(device.index, false);
    throw;
  }
  cuda::allocator_record(device.index, false);
  warmed_up_ = true;
}

void CudaGraph::replay() {
  EMBER_CHECK(graph_ != nullptr, "CudaGraph::replay: nothing captured");
  cuda::graph_replay(graph_);
}

}  // namespace ember
