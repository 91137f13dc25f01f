// The runtime API calls that are plain bookkeeping: errors, devices, streams.
//
// Errors work as on a GPU: a failing call returns its code and also records it as the calling
// thread's last error, which cudaGetLastError() returns and clears. cudaGetErrorString() gives
// NVIDIA's text, followed by what the emulator saw when the code is the one it last recorded:
//   "invalid configuration argument (emulator: kernel k: block (2048, 1, 1) has 2048 threads; ...)".
// Devices: EMBER_EMULATED_DEVICES (default 1) of them, 0 to test the no-GPU path.
// Streams and events: handles, checked when used; all work is done synchronously by the call that asks.
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>

#include "state.h"

namespace ember_emu {
namespace {

thread_local cudaError_t last_error = cudaSuccess;
thread_local cudaError_t detail_code = cudaSuccess;
thread_local std::string detail_text;
thread_local int device = 0;

std::mutex streams_mutex;
std::set<cudaStream_t> streams;
std::set<cudaEvent_t> events;  // under streams_mutex

bool event_is_valid(cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(streams_mutex);
  return events.count(event) > 0;
}

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
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
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

int device_count() {
  static const int count = [] {
    const char* env = std::getenv("EMBER_EMULATED_DEVICES");
    int n = env != nullptr ? std::atoi(env) : 1;
    return n < 0 ? 0 : (n > 16 ? 16 : n);
  }();
  return count;
}

int current_device() { return device; }

bool stream_is_valid(cudaStream_t stream) {
  if (stream == nullptr) return true;
  std::lock_guard<std::mutex> lock(streams_mutex);
  return streams.count(stream) > 0;
}

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
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
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

cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }  // everything already ran

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  if (stream == nullptr || flags > cudaStreamNonBlocking)
    return set_error(cudaErrorInvalidValue, "cudaStreamCreateWithFlags: bad arguments");
  if (device_count() == 0) return set_error(cudaErrorNoDevice, "EMBER_EMULATED_DEVICES=0");
  *stream = reinterpret_cast<cudaStream_t>(new char);  // a unique address is all a handle needs
  std::lock_guard<std::mutex> lock(streams_mutex);
  streams.insert(*stream);
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(streams_mutex);
  if (streams.erase(stream) == 0) return set_error(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: unknown stream");
  delete reinterpret_cast<char*>(stream);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (!stream_is_valid(stream)) return set_error(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize: unknown stream");
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  if (event == nullptr || (flags & ~cudaEventDisableTiming) != 0)
    return set_error(cudaErrorInvalidValue, "cudaEventCreateWithFlags: bad arguments");
  if (device_count() == 0) return set_error(cudaErrorNoDevice, "EMBER_EMULATED_DEVICES=0");
  *event = reinterpret_cast<cudaEvent_t>(new char);
  std::lock_guard<std::mutex> lock(streams_mutex);
  events.insert(*event);
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(streams_mutex);
  if (events.erase(event) == 0) return set_error(cudaErrorInvalidResourceHandle, "cudaEventDestroy: unknown event");
  delete reinterpret_cast<char*>(event);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!event_is_valid(event)) return set_error(cudaErrorInvalidResourceHandle, "cudaEventRecord: unknown event");
  if (!stream_is_valid(stream)) return set_error(cudaErrorInvalidResourceHandle, "cudaEventRecord: unknown stream");
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (!event_is_valid(event)) return set_error(cudaErrorInvalidResourceHandle, "cudaEventQuery: unknown event");
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!event_is_valid(event)) return set_error(cudaErrorInvalidResourceHandle, "cudaEventSynchronize: unknown event");
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags) {
  if (!event_is_valid(event) || !stream_is_valid(stream) || flags != 0)
    return set_error(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: unknown stream or event, or flags");
  return cudaSuccess;
}
