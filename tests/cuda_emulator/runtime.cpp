// The runtime API calls that are plain bookkeeping: errors and devices.
//
// Errors work as on a GPU: a failing call returns its code and also records it as the calling
// thread's last error, which cudaGetLastError() returns and clears. cudaGetErrorString() gives
// NVIDIA's text, followed by what the emulator saw when the code is the one it last recorded:
//   "invalid configuration argument (emulator: kernel k: block (2048, 1, 1) has 2048 threads; ...)".
// Devices: EMBER_EMULATED_DEVICES (default 1) of them, 0 to test the no-GPU path.
// Streams, events and graphs: streams.cpp.
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>

#include "state.h"

namespace ember_emu {
namespace {

thread_local cudaError_t last_error = cudaSuccess;
thread_local cudaError_t detail_code = cudaSuccess;
thread_local std::string detail_text;
thread_local int device = 0;

const char* nvidia_text(cudaError_t code) {
  switch (code) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureUnmatched: return "capture was not ended in the same stream as it began";
    case cudaErrorStreamCaptureIsolation: return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
  }
  return "unknown error";
}

}  // namespace

cudaError_t set_error(cudaError_t code, const std::string& detail) {
  last_error = code;
  detail_code = code;
  detail_text = std::string(nvidia_text(code)) + " (emulator: " + detail + ")";
  return code;
}

cudaError_t restore_error(cudaError_t code, const std::string& text) {
  last_error = code;
  detail_code = code;
  detail_text = text;
  return code;
}

namespace {
std::mutex broken_mutex;
std::atomic<bool> broken{false};
std::string broken_text;
}  // namespace

void break_device(const std::string& text) {
  std::lock_guard<std::mutex> lock(broken_mutex);
  broken_text = text;
  broken.store(true);
}

cudaError_t device_broken() {
  if (!broken.load()) return cudaSuccess;
  std::lock_guard<std::mutex> lock(broken_mutex);
  return restore_error(cudaErrorLaunchFailure, broken_text);
}

int device_count() {
  static const int count = [] {
    const char* env = std::getenv("EMBER_EMULATED_DEVICES");
    int n = env != nullptr ? std::atoi(env) : 1;
    return n < 0 ? 0 : (n > 16 ? 16 : n);
  }();
  return count;
}

int current_device() { return device; }

}  // namespace ember_emu

using namespace ember_emu;

cudaError_t cudaGetLastError() {
  cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return last_error; }

const char* cudaGetErrorString(cudaError_t error) {
  if (error == detail_code && error != cudaSuccess) return detail_text.c_str();
  return nvidia_text(error);
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureUnmatched: return "cudaErrorStreamCaptureUnmatched";
    case cudaErrorStreamCaptureIsolation: return "cudaErrorStreamCaptureIsolation";
    case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
  }
  return "cudaErrorUnknown";
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = device_count();
  if (*count == 0) return set_error(cudaErrorNoDevice, "EMBER_EMULATED_DEVICES=0");
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int d) {
  if (d < 0 || d >= device_count())
    return set_error(cudaErrorInvalidDevice, "cudaSetDevice(" + std::to_string(d) + ") with " +
                                                 std::to_string(device_count()) + " emulated devices");
  device = d;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* d) {
  if (device_count() == 0) return set_error(cudaErrorNoDevice, "EMBER_EMULATED_DEVICES=0");
  *d = device;
  return cudaSuccess;
}
