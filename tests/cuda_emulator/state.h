// The emulator's shared bookkeeping between its files (not seen by the kernels): the last error
// of the calling thread, the devices, and the streams.
#pragma once
#include <string>

#include "cuda_runtime.h"

namespace ember_emu {

// Records `code` as the calling thread's last error (cudaGetLastError returns and clears it) and
// `detail` as what cudaGetErrorString(code) adds to NVIDIA's text. Returns code.
cudaError_t set_error(cudaError_t code, const std::string& detail);

int device_count();      // EMBER_EMULATED_DEVICES, default 1
int current_device();    // the calling thread's cudaSetDevice
bool stream_is_valid(cudaStream_t stream);  // null (the legacy default stream) or a live stream

// Whether [ptr, ptr + bytes) lies inside one live cudaMalloc allocation (memory.cpp); its device
// in *device when it does.
bool in_device_memory(const void* ptr, size_t bytes, int* device = nullptr);

// While one is alive, device memory is readable and writable by the host (the emulator's own
// work: kernels, copies, library calls); with EMBER_EMULATOR_PROTECT=1 it is not otherwise.
struct DeviceAccess {
  DeviceAccess();
  ~DeviceAccess();
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;
};

// Counts a kernel launch or library call by name when EMBER_EMULATOR_LAUNCHES=1 (launch.cpp prints
// the counts to stderr when the program ends).
void count_launch(const char* name);

}  // namespace ember_emu
