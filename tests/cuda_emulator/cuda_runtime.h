// A stand-in for CUDA's <cuda_runtime.h>, for the CPU emulator of the CUDA subset Ember uses.
//
// The emulated build (CMake option EMBER_CUDA_EMULATOR, target ember_emulated) puts this folder
// first on the include path, so `#include <cuda_runtime.h>` in cuda/*.cu finds this file, not
// NVIDIA's. It declares what the kernels and cuda/runtime.cu use, and nothing more:
//   - the kernel-side built-ins: dim3 / uint3, threadIdx, blockIdx, blockDim, gridDim (one copy
//     per OS thread, set by the emulator before it runs each CUDA thread), __syncthreads();
//   - the qualifiers (__global__, __device__, ...), which mean nothing to a CPU compiler;
//   - the runtime API calls, implemented in runtime.cpp (devices, streams, errors) and memory.cpp
//     (device memory, copies).
// The kernels themselves run through emulator.h (launch.cpp), which the translated .cu files call
// in place of the `<<<...>>>` syntax (translate.py).
#pragma once
#include <cstddef>
#include <cstdint>

// ---- Qualifiers: a CPU compiler needs none of them. (g++ and clang know __restrict__ already.)
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)

// ---- Thread and block coordinates.
struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

// One copy per OS thread: the emulator runs one block at a time on the launching thread, and sets
// threadIdx before it switches to each CUDA thread (a fiber, see fiber.h). `constinit` tells the
// compiler they need no dynamic initialisation, so reading one is a plain thread-local load.
extern thread_local constinit uint3 threadIdx;
extern thread_local constinit uint3 blockIdx;
extern thread_local constinit dim3 blockDim;
extern thread_local constinit dim3 gridDim;

// ---- Errors (the codes are NVIDIA's numbers; only those Ember can meet are listed).
enum cudaError_t : int {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorIllegalState = 401,
  cudaErrorNotReady = 600,
  cudaErrorLaunchOutOfResources = 701,
  cudaErrorLaunchFailure = 719,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureUnmatched = 903,
  cudaErrorStreamCaptureIsolation = 905,
  cudaErrorStreamCaptureImplicit = 906,
};
using cudaError = cudaError_t;

// A launch error (divergent barrier, bad block size, ...) is reported, like on a GPU, by the next
// cudaGetLastError(); cudaGetErrorString() then also says, after NVIDIA's text, what the emulator
// saw ("... (emulator: ...)").
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t error);
const char* cudaGetErrorName(cudaError_t error);

// ---- Devices: EMBER_EMULATED_DEVICES devices (default 1), each with 8 GiB of emulated memory.
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaDeviceSynchronize();

// ---- Streams and events (streams.cpp), with a GPU's ordering: work on a stream runs in the
// stream's order, lazily: it is queued and runs only when something needs it done (a synchronising
// call, another stream that waits on an event recorded after it, cudaEventQuery making progress, or
// a long queue), so that host code which reads results before the call that makes them complete
// sees old data (or, with EMBER_EMULATOR_PROTECT=1, faults) instead of passing by luck. The legacy
// default stream (null) runs its work at the call, after the pending work of every blocking stream.
struct CUstream_st;
using cudaStream_t = CUstream_st*;
constexpr unsigned cudaStreamDefault = 0x0;
constexpr unsigned cudaStreamNonBlocking = 0x1;
cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);

struct CUevent_st;
using cudaEvent_t = CUevent_st*;
constexpr unsigned cudaEventDefault = 0x0;
constexpr unsigned cudaEventDisableTiming = 0x2;
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventQuery(cudaEvent_t event);  // cudaErrorNotReady (also the last error) while pending
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags = 0);

// ---- Graphs (streams.cpp): stream capture, instantiation and replay. While a stream captures, its
// work is recorded, not run; a call that would make the host wait (a synchronisation, cudaMalloc,
// cudaFree, a synchronous or pageable copy) is refused with cudaErrorStreamCaptureUnsupported and
// invalidates the capture, and work on the legacy stream with cudaErrorStreamCaptureImplicit, as
// on a GPU in cudaStreamCaptureModeGlobal. A graph launch runs the recorded work in its order, on
// the stream it is launched on; the counters count it as one launch.
struct CUgraph_st;
struct CUgraphExec_st;
using cudaGraph_t = CUgraph_st*;
using cudaGraphExec_t = CUgraphExec_st*;
enum cudaStreamCaptureMode : int {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};
enum cudaStreamCaptureStatus : int {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2,
};
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph);
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
struct CUgraphNode_st;
using cudaGraphNode_t = CUgraphNode_st*;
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count);  // only the count (nodes null)

// ---- Memory (memory.cpp).
enum cudaMemcpyKind : int {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
cudaError_t cudaMalloc(void** ptr, size_t size);
template <typename T>
cudaError_t cudaMalloc(T** ptr, size_t size) {
  return cudaMalloc(reinterpret_cast<void**>(ptr), size);
}
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream = nullptr);
cudaError_t cudaMemcpyPeer(void* dst, int dst_device, const void* src, int src_device, size_t count);
cudaError_t cudaMemset(void* ptr, int value, size_t count);
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t stream = nullptr);

// ---- Kernel attributes: the only one the emulator honours raises a kernel's limit on dynamic
// shared memory above the default 48 KiB (up to 227 KiB, an H100's).
enum cudaFuncAttribute : int {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
  cudaFuncAttributePreferredSharedMemoryCarveout = 9,
};
cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value);
template <typename T>
cudaError_t cudaFuncSetAttribute(T* func, cudaFuncAttribute attr, int value) {
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(func), attr, value);
}

// ---- Device attributes: the limits kernels ask for before a launch (an H100's numbers).
enum cudaDeviceAttr : int {
  cudaDevAttrMaxThreadsPerBlock = 1,
  cudaDevAttrMaxSharedMemoryPerBlock = 8,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);

// ---- The kernel side: __syncthreads() and the launch (emulator.h).
#include "emulator.h"
#define __syncthreads() ::ember_emu::syncthreads(__FILE__, __LINE__)

// ---- Pinned (page-locked) host memory (pinned.cpp): copies from and to it do not make the host
// wait; copies from and to pageable memory do, and the emulator counts them (counters.h).
constexpr unsigned cudaHostAllocDefault = 0x0;
constexpr unsigned cudaHostAllocPortable = 0x1;
constexpr unsigned cudaHostAllocMapped = 0x2;
constexpr unsigned cudaHostAllocWriteCombined = 0x4;
cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned flags);
cudaError_t cudaMallocHost(void** ptr, size_t size);
cudaError_t cudaFreeHost(void* ptr);

// ---- Host waits, counted where they are called (counters.h). Every call that makes the host wait
// for the GPU is wrapped, in the code that calls it (not in the emulator's own files, which define
// EMBER_EMU_IMPLEMENTATION), so that the count names the call's file and line. EMBER_CUDA_CHECK's
// message quotes the call as written (#call does not expand the macro).
#ifndef EMBER_EMU_IMPLEMENTATION
#include "counters.h"
#define EMBER_EMU_WAITS(call, ...) (::ember_emu::note_host_wait(#call, __FILE__, __LINE__), ::call(__VA_ARGS__))
#define EMBER_EMU_COPY(call, ...) (::ember_emu::note_call_site(__FILE__, __LINE__), ::call(__VA_ARGS__))
#define cudaStreamSynchronize(...) EMBER_EMU_WAITS(cudaStreamSynchronize, __VA_ARGS__)
#define cudaDeviceSynchronize(...) EMBER_EMU_WAITS(cudaDeviceSynchronize, __VA_ARGS__)
#define cudaEventSynchronize(...) EMBER_EMU_WAITS(cudaEventSynchronize, __VA_ARGS__)
#define cudaFree(...) EMBER_EMU_WAITS(cudaFree, __VA_ARGS__)  // cudaFree synchronises the device
#define cudaFreeHost(...) EMBER_EMU_WAITS(cudaFreeHost, __VA_ARGS__)
#define cudaMemcpy(...) EMBER_EMU_COPY(cudaMemcpy, __VA_ARGS__)
#define cudaMemcpyAsync(...) EMBER_EMU_COPY(cudaMemcpyAsync, __VA_ARGS__)
#endif

// ---- Kernel parameters read in place (sm_70 and later): nothing to do on a CPU.
#define __grid_constant__

// ---- Warps (shuffles, votes, __syncwarp: their lanes meet in lockstep, masks checked) and atomics.
#include "warp.h"
