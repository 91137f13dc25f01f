// The emulator's shared bookkeeping between its files (not seen by the kernels): the last error
// of the calling thread, the devices, the streams' queues, and device memory's protection.
#pragma once
#include <cstddef>
#include <functional>
#include <string>

#include "cuda_runtime.h"

namespace ember_emu {

// Records `code` as the calling thread's last error (cudaGetLastError returns and clears it) and
// `detail` as what cudaGetErrorString(code) adds to NVIDIA's text. Returns code.
cudaError_t set_error(cudaError_t code, const std::string& detail);
// Records `code` again with the whole text cudaGetErrorString gave for it then (an error of queued
// work, reported later by a synchronising call). Returns code.
cudaError_t restore_error(cudaError_t code, const std::string& text);

// A kernel's fault injected by EMBER_EMULATOR_FAULT (launch.cpp) breaks the device, as a fault does
// on a GPU: from then on memory, copies, memsets, waits, events, graph and kernel launches return
// the fault again (cudaErrorLaunchFailure, with its text). device_broken: cudaSuccess until then.
void break_device(const std::string& text);
cudaError_t device_broken();

int device_count();      // EMBER_EMULATED_DEVICES, default 1
int current_device();    // the calling thread's cudaSetDevice
bool stream_is_valid(cudaStream_t stream);  // null (the legacy default stream) or a live stream

// ---- Streams (streams.cpp). Work is a kernel launch, a copy, a memset or a library call, made
// into a function when it is asked for (its arguments checked and copied then), run when its
// stream gets to it. Returns its error (cudaSuccess).
using Work = std::function<cudaError_t()>;
// Queues `work` on `stream`: on a created stream it runs later, in the stream's order; on the
// legacy stream (null) at once, after the pending work of every blocking stream; while the stream
// captures, it is recorded into the graph instead. A refusal (a capture rule) is returned and
// recorded as the last error, and the work dropped.
cudaError_t enqueue(cudaStream_t stream, Work work);
// Runs what is queued on `stream` now (for null, the legacy stream: every blocking stream's work),
// for work the emulator does at its call (NCCL's collectives, a pageable or synchronous copy);
// with `whole_device`, every stream's (cudaFree synchronises the device). The error of queued work
// that failed, if any (reported once).
cudaError_t catch_up(cudaStream_t stream, bool whole_device = false);
bool stream_capturing(cudaStream_t stream);
// For a call a GPU refuses while a stream captures (a host wait, cudaMalloc, cudaFree):
// cudaSuccess when none does; else cudaErrorStreamCaptureUnsupported, recorded as the last error
// and with every capture invalidated.
cudaError_t refuse_in_capture(const char* call);

// ---- EMBER_EMULATOR_PROTECT=1 (memory.cpp, pinned.cpp).
bool protect_mode();
// Pinned host memory that a queued copy will write (device to host: the host must not read it
// before the copy is done) or read (host to device: the host must not write it): with protection
// on, its pages are PROT_NONE or PROT_READ from the copy's queueing until it runs.
void hold_pinned(const void* ptr, size_t bytes, bool device_writes);
// The queued copy runs: its pages are opened for it (`open`), then given their held state again
// less this copy's hold, if it `held` one (`open` false; a graph's copy holds none).
void run_pinned_copy(const void* ptr, size_t bytes, bool device_writes, bool open, bool held);

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
// the counts to stderr when the program ends), and in the counters (counters.h); work recorded
// into a graph is not a launch (the graph's launch is, once).
void count_launch(const char* name, cudaStream_t stream);

}  // namespace ember_emu
