// Softmax and log-softmax through cuDNN (cudnnSoftmaxForward / cudnnSoftmaxBackward), as an
// alternative to the framework's own row kernel (cuda/softmax_kernels.cu, whose softmax kernel of
// core/kernels.h calls these): rows x n seen as an NCHW tensor [rows, n, 1, 1], softmax over C. One
// cuDNN handle per device, on the device's stream. Chosen with cuda::set_softmax_cudnn(true) or
// EMBER_SOFTMAX=cudnn; bench/softmax_gpu_bench.cpp times the two.
// Off by default: the own kernel is the one the parity tests hold to the CPU.
// NOTE: compiled by CI with nvcc and run on the CPU emulator, not yet on a GPU (see docs/cuda.md).
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/cuda_ops.h"
#include "cuda/check.h"
#include "cuda/cudnn_softmax.h"
#include "cuda/launch.h"

#ifdef EMBER_WITH_CUDNN
#include <cudnn.h>
#endif

namespace ember::cuda {
namespace {

std::atomic<int> use_cudnn{-1};  // -1: not decided yet (read EMBER_SOFTMAX on first use)

#ifdef EMBER_WITH_CUDNN
cudnnHandle_t handle_for(int device) {
  static cudnnHandle_t handles[16] = {};
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (handles[device] == nullptr) EMBER_CUDNN_CHECK(cudnnCreate(&handles[device]));
  return handles[device];
}

// A [rows, n, 1, 1] descriptor, destroyed with the object.
struct Descriptor {
  cudnnTensorDescriptor_t desc = nullptr;
  Descriptor(bool float64, int64_t rows, int64_t n) {
    if (rows > 2147483647 || n > 2147483647) raise_message("softmax (cuDNN): more than 2^31 - 1 rows or columns");
    EMBER_CUDNN_CHECK(cudnnCreateTensorDescriptor(&desc));
    EMBER_CUDNN_CHECK(cudnnSetTensor4dDescriptor(desc, CUDNN_TENSOR_NCHW, float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT,
                                                 int(rows), int(n), 1, 1));
  }
  ~Descriptor() { cudnnDestroyTensorDescriptor(desc); }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
};

// What a softmax call of either direction needs: the device's handle on its stream, the rows' descriptor,
// the algorithm, and alpha = 1, beta = 0 in the data's type (cuDNN reads them as float or double).
struct SoftmaxCall {
  cudaStream_t stream;  // first: makes the device current before its handle is created
  cudnnHandle_t handle;
  Descriptor rows;
  cudnnSoftmaxAlgorithm_t algorithm;
  const void* alpha;
  const void* beta;

  SoftmaxCall(int device, bool float64, int64_t n_rows, int64_t n, bool log)
      : stream(use_device(device)),
        handle(handle_for(device)),
        rows(float64, n_rows, n),
        algorithm(log ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE),
        alpha(float64 ? static_cast<const void*>(&kOne64) : static_cast<const void*>(&kOne32)),
        beta(float64 ? static_cast<const void*>(&kZero64) : static_cast<const void*>(&kZero32)) {
    EMBER_CUDNN_CHECK(cudnnSetStream(handle, stream));
  }
  static constexpr double kOne64 = 1.0, kZero64 = 0.0;
  static constexpr float kOne32 = 1.0f, kZero32 = 0.0f;
};
#else
[[noreturn]] void no_cudnn() { raise_message("softmax: this build of Ember has no cuDNN"); }
#endif

}  // namespace

bool cudnn_available() {
#ifdef EMBER_WITH_CUDNN
  return true;
#else
  return false;
#endif
}

void set_softmax_cudnn(bool on) {
  if (on && !cudnn_available()) raise_message("softmax: this build of Ember has no cuDNN");
  use_cudnn = on ? 1 : 0;
}

bool softmax_cudnn() {
  int value = use_cudnn.load();
  if (value < 0) {
    const char* env = std::getenv("EMBER_SOFTMAX");
    value = env != nullptr && std::strcmp(env, "cudnn") == 0 && cudnn_available() ? 1 : 0;
    use_cudnn = value;
  }
  return value == 1;
}

void cudnn_softmax_forward(int device, bool float64, const void* x, void* y, int64_t rows, int64_t n, bool log) {
#ifdef EMBER_WITH_CUDNN
  if (rows == 0 || n == 0) return;
  SoftmaxCall call(device, float64, rows, n, log);
  EMBER_CUDNN_CHECK(cudnnSoftmaxForward(call.handle, call.algorithm, CUDNN_SOFTMAX_MODE_CHANNEL, call.alpha,
                                        call.rows.desc, x, call.beta, call.rows.desc, y));
#else
  (void)device, (void)float64, (void)x, (void)y, (void)rows, (void)n, (void)log;
  no_cudnn();
#endif
}

void cudnn_softmax_backward(int device, bool float64, const void* grad, const void* y, void* dx, int64_t rows,
                            int64_t n, bool log) {
#ifdef EMBER_WITH_CUDNN
  if (rows == 0 || n == 0) return;
  SoftmaxCall call(device, float64, rows, n, log);
  EMBER_CUDNN_CHECK(cudnnSoftmaxBackward(call.handle, call.algorithm, CUDNN_SOFTMAX_MODE_CHANNEL, call.alpha,
                                         call.rows.desc, y, call.rows.desc, grad, call.beta, call.rows.desc, dx));
#else
  (void)device, (void)float64, (void)grad, (void)y, (void)dx, (void)rows, (void)n, (void)log;
  no_cudnn();
#endif
}

}  // namespace ember::cuda
