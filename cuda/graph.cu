// CUDA graphs: the work of a device's stream captured once and replayed as one launch (the entry
// points of core/cuda_ops.h; the caching allocator's side is in cuda/runtime.cu).
// NOTE: compiled by CI with nvcc and run on the CPU emulator, not yet on a GPU (see docs/cuda.md).
#include "core/cuda_ops.h"
#include "cuda/launch.h"

namespace ember::cuda {
namespace {

struct Graph {
  cudaGraphExec_t exec;
  int device;
  int pool;  // the allocator's pool of the capture's blocks
};

int capture_pools[16] = {};  // the running capture's pool, per device

}  // namespace

void graph_capture_begin(int device) {
  cudaStream_t stream = use_device(device);
  const int pool = allocator_begin_capture(device);
  const cudaError_t status = cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
  if (status != cudaSuccess) {
    allocator_end_capture(device);
    allocator_release_pool(device, pool);
    EMBER_CUDA_CHECK(status);
  }
  capture_pools[device] = pool;
}

void* graph_capture_end(int device, bool ok) {
  cudaStream_t stream = use_device(device);
  cudaGraph_t graph = nullptr;
  const cudaError_t status = cudaStreamEndCapture(stream, &graph);
  allocator_end_capture(device);
  const int pool = capture_pools[device];
  capture_pools[device] = 0;
  if (!ok || status != cudaSuccess) {
    cudaGetLastError();
    if (graph != nullptr) cudaGraphDestroy(graph);
    allocator_release_pool(device, pool);
    if (!ok) return nullptr;
    EMBER_CUDA_CHECK(status);  // the capture was invalidated: its message says by what
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (instantiated != cudaSuccess) allocator_release_pool(device, pool);
  EMBER_CUDA_CHECK(instantiated);
  return new Graph{exec, device, pool};
}

void graph_replay(void* graph) {
  auto* g = static_cast<Graph*>(graph);
  note_launch(kGraphReplayLaunch);
  EMBER_CUDA_CHECK(cudaGraphLaunch(g->exec, use_device(g->device)));
}

void graph_destroy(void* graph) {
  auto* g = static_cast<Graph*>(graph);
  if (g == nullptr) return;
  cudaSetDevice(g->device);
  cudaGraphExecDestroy(g->exec);
  allocator_release_pool(g->device, g->pool);  // later work on the stream comes after any replay
  delete g;
}

}  // namespace ember::cuda
