// cuDNN's softmax for the CPU emulator (see cudnn.h for the formulas): descriptors are checked
// (all three the same shape and type; the data in device memory), then each softmax group is a
// loop over its elements. A group is the C values of one (n, h, w) in CHANNEL mode (element
// (n, c, h, w) of a packed tensor sits at ((n * C + c) * H + h) * W + w), or the C * H * W values
// of one n in INSTANCE mode.
#include <cmath>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "counters.h"
#include "cudnn.h"
#include "state.h"

struct cudnnContext {
  cudaStream_t stream = nullptr;
};
struct cudnnTensorStruct {
  bool set = false;
  cudnnTensorFormat_t format = CUDNN_TENSOR_NCHW;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int n = 0, c = 0, h = 0, w = 0;
};

namespace {

thread_local cudnnStatus_t detail_status = CUDNN_STATUS_SUCCESS;
thread_local std::string detail_text;

const char* nvidia_text(cudnnStatus_t status) {
  switch (status) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
  }
  return "CUDNN_STATUS_UNKNOWN";
}

cudnnStatus_t fail(cudnnStatus_t status, const std::string& what) {
  detail_status = status;
  detail_text = std::string(nvidia_text(status)) + " (emulator: " + what + ")";
  return status;
}

size_t numel(const cudnnTensorStruct& d) { return size_t(d.n) * d.c * d.h * d.w; }
size_t elem_size(const cudnnTensorStruct& d) { return d.type == CUDNN_DATA_DOUBLE ? 8 : 4; }

// Checks the descriptors and pointers of one call; "" when all is well.
std::string check(const char* call, cudnnHandle_t handle, std::initializer_list<std::pair<cudnnTensorDescriptor_t, const void*>> operands,
                  cudnnSoftmaxAlgorithm_t algo, cudnnSoftmaxMode_t mode) {
  const std::string c = call;
  if (handle == nullptr) return c + ": no handle";
  if (algo < CUDNN_SOFTMAX_FAST || algo > CUDNN_SOFTMAX_LOG) return c + ": unknown algorithm";
  if (mode != CUDNN_SOFTMAX_MODE_INSTANCE && mode != CUDNN_SOFTMAX_MODE_CHANNEL) return c + ": unknown mode";
  const cudnnTensorStruct* first = operands.begin()->first;
  for (const auto& [desc, ptr] : operands) {
    if (desc == nullptr || !desc->set) return c + ": a tensor descriptor was never set";
    if (desc->n != first->n || desc->c != first->c || desc->h != first->h || desc->w != first->w ||
        desc->type != first->type || desc->format != first->format)
      return c + ": the tensor descriptors differ";
    if (desc->format != CUDNN_TENSOR_NCHW) return c + ": only NCHW tensors are emulated";
    if (numel(*desc) > 0 && !ember_emu::in_device_memory(ptr, numel(*desc) * elem_size(*desc)))
      return c + ": a tensor's data is not all in device memory";
  }
  return "";
}

// Calls fn(offset, stride, count) for every softmax group of the tensor.
template <typename Fn>
void for_each_group(const cudnnTensorStruct& d, cudnnSoftmaxMode_t mode, Fn fn) {
  const size_t C = size_t(d.c), HW = size_t(d.h) * d.w;
  for (size_t n = 0; n < size_t(d.n); ++n) {
    if (mode == CUDNN_SOFTMAX_MODE_INSTANCE) fn(n * C * HW, size_t(1), C * HW);
    else
      for (size_t hw = 0; hw < HW; ++hw) fn(n * C * HW + hw, HW, C);
  }
}

template <typename T>
void forward(cudnnSoftmaxAlgorithm_t algo, cudnnSoftmaxMode_t mode, const cudnnTensorStruct& d, T alpha,
             const T* x, T beta, T* y) {
  for_each_group(d, mode, [&](size_t offset, size_t stride, size_t count) {
    double m = -INFINITY;
    if (algo != CUDNN_SOFTMAX_FAST)
      for (size_t i = 0; i < count; ++i) m = std::fmax(m, double(x[offset + i * stride]));
    else
      m = 0;
    double sum = 0;
    for (size_t i = 0; i < count; ++i) sum += std::exp(double(x[offset + i * stride]) - m);
    for (size_t i = 0; i < count; ++i) {
      const double v = double(x[offset + i * stride]) - m;
      const double s = algo == CUDNN_SOFTMAX_LOG ? v - std::log(sum) : std::exp(v) / sum;
      T& out = y[offset + i * stride];
      out = beta == T(0) ? T(double(alpha) * s) : T(double(alpha) * s + double(beta) * double(out));
    }
  });
}

template <typename T>
void backward(cudnnSoftmaxAlgorithm_t algo, cudnnSoftmaxMode_t mode, const cudnnTensorStruct& d, T alpha,
              const T* y, const T* dy, T beta, T* dx) {
  for_each_group(d, mode, [&](size_t offset, size_t stride, size_t count) {
    double sum = 0;
    for (size_t i = 0; i < count; ++i) {
      const size_t at = offset + i * stride;
      sum += algo == CUDNN_SOFTMAX_LOG ? double(dy[at]) : double(dy[at]) * double(y[at]);
    }
    for (size_t i = 0; i < count; ++i) {
      const size_t at = offset + i * stride;
      const double g = algo == CUDNN_SOFTMAX_LOG ? double(dy[at]) - std::exp(double(y[at])) * sum
                                                 : double(y[at]) * (double(dy[at]) - sum);
      dx[at] = beta == T(0) ? T(double(alpha) * g) : T(double(alpha) * g + double(beta) * double(dx[at]));
    }
  });
}

// Dry mode (counters.h): the call queued in its place, as nothing.
cudnnStatus_t queued_nothing(cudnnHandle_t handle) {
  const cudaError_t queued = ember_emu::enqueue(handle->stream, [] { return cudaSuccess; });
  return queued == cudaSuccess ? CUDNN_STATUS_SUCCESS : fail(CUDNN_STATUS_EXECUTION_FAILED, cudaGetErrorString(queued));
}

}  // namespace

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  if (handle == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnCreate: null handle pointer");
  if (ember_emu::device_count() == 0) return fail(CUDNN_STATUS_NOT_INITIALIZED, "cudnnCreate: no device");
  *handle = new cudnnContext;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  if (handle == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnDestroy: no handle");
  delete handle;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnSetStream: no handle");
  if (!ember_emu::stream_is_valid(stream)) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnSetStream: unknown stream");
  handle->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}

const char* cudnnGetErrorString(cudnnStatus_t status) {
  if (status == detail_status && status != CUDNN_STATUS_SUCCESS) return detail_text.c_str();
  return nvidia_text(status);
}

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* desc) {
  if (desc == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnCreateTensorDescriptor: null pointer");
  *desc = new cudnnTensorStruct;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t desc) {
  delete desc;  // null is fine, as in cuDNN
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t desc, cudnnTensorFormat_t format,
                                         cudnnDataType_t type, int n, int c, int h, int w) {
  if (desc == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnSetTensor4dDescriptor: null descriptor");
  if (n <= 0 || c <= 0 || h <= 0 || w <= 0)
    return fail(CUDNN_STATUS_BAD_PARAM, "cudnnSetTensor4dDescriptor: every dimension must be positive");
  if (type != CUDNN_DATA_FLOAT && type != CUDNN_DATA_DOUBLE)
    return fail(CUDNN_STATUS_NOT_SUPPORTED, "cudnnSetTensor4dDescriptor: only float and double are emulated");
  if (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC)
    return fail(CUDNN_STATUS_BAD_PARAM, "cudnnSetTensor4dDescriptor: unknown format");
  *desc = cudnnTensorStruct{true, format, type, n, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSoftmaxForward(cudnnHandle_t handle, cudnnSoftmaxAlgorithm_t algo, cudnnSoftmaxMode_t mode,
                                  const void* alpha, const cudnnTensorDescriptor_t xDesc, const void* x,
                                  const void* beta, const cudnnTensorDescriptor_t yDesc, void* y) {
  std::string problem = check("cudnnSoftmaxForward", handle, {{xDesc, x}, {yDesc, y}}, algo, mode);
  if (!problem.empty()) return fail(CUDNN_STATUS_BAD_PARAM, problem);
  ember_emu::count_launch("cudnnSoftmaxForward", handle->stream);
  if (ember_emu::dry_mode()) return queued_nothing(handle);
  // Scalars and the descriptor read at the call; the softmax runs when the stream gets to it.
  const cudnnTensorStruct desc = *xDesc;
  cudaError_t queued;
  if (desc.type == CUDNN_DATA_DOUBLE) {
    const double a = *static_cast<const double*>(alpha), b = *static_cast<const double*>(beta);
    queued = ember_emu::enqueue(handle->stream, [=] {
      ember_emu::DeviceAccess access;
      forward(algo, mode, desc, a, static_cast<const double*>(x), b, static_cast<double*>(y));
      return cudaSuccess;
    });
  } else {
    const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
    queued = ember_emu::enqueue(handle->stream, [=] {
      ember_emu::DeviceAccess access;
      forward(algo, mode, desc, a, static_cast<const float*>(x), b, static_cast<float*>(y));
      return cudaSuccess;
    });
  }
  return queued == cudaSuccess ? CUDNN_STATUS_SUCCESS : fail(CUDNN_STATUS_EXECUTION_FAILED, cudaGetErrorString(queued));
}

cudnnStatus_t cudnnSoftmaxBackward(cudnnHandle_t handle, cudnnSoftmaxAlgorithm_t algo, cudnnSoftmaxMode_t mode,
                                   const void* alpha, const cudnnTensorDescriptor_t yDesc, const void* y,
                                   const cudnnTensorDescriptor_t dyDesc, const void* dy, const void* beta,
                                   const cudnnTensorDescriptor_t dxDesc, void* dx) {
  std::string problem = check("cudnnSoftmaxBackward", handle, {{yDesc, y}, {dyDesc, dy}, {dxDesc, dx}}, algo, mode);
  if (!problem.empty()) return fail(CUDNN_STATUS_BAD_PARAM, problem);
  ember_emu::count_launch("cudnnSoftmaxBackward", handle->stream);
  if (ember_emu::dry_mode()) return queued_nothing(handle);
  const cudnnTensorStruct desc = *yDesc;
  cudaError_t queued;
  if (desc.type == CUDNN_DATA_DOUBLE) {
    const double a = *static_cast<const double*>(alpha), b = *static_cast<const double*>(beta);
    queued = ember_emu::enqueue(handle->stream, [=] {
      ember_emu::DeviceAccess access;
      backward(algo, mode, desc, a, static_cast<const double*>(y), static_cast<const double*>(dy), b,
               static_cast<double*>(dx));
      return cudaSuccess;
    });
  } else {
    const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
    queued = ember_emu::enqueue(handle->stream, [=] {
      ember_emu::DeviceAccess access;
      backward(algo, mode, desc, a, static_cast<const float*>(y), static_cast<const float*>(dy), b,
               static_cast<float*>(dx));
      return cudaSuccess;
    });
  }
  return queued == cudaSuccess ? CUDNN_STATUS_SUCCESS : fail(CUDNN_STATUS_EXECUTION_FAILED, cudaGetErrorString(queued));
}
