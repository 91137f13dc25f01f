// What the emulator counts, for tests that assert how a piece of host code drives the GPU: kernel
// launches (and the blocks of each kernel), library calls (cuBLAS, cuDNN), host waits (every call
// that makes the host wait for the GPU, each with its call site), bytes copied each way, and copies
// from or to pageable host memory (which wait too, and cannot overlap). Not seen by the kernels.
//
//   ember_emu::reset_counts();
//   run_one_training_step();
//   ember_emu::Counts c = ember_emu::counts();
//   CHECK_MESSAGE(c.host_waits.empty(), ember_emu::describe(c));
//
// The host waits are noted where the call is made (cuda_runtime.h wraps the synchronising calls
// in macros that pass __FILE__ and __LINE__) and with the host's call stack, so a test that finds
// one names the .cu line and the functions that led there.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ember_emu {

struct HostWait {
  std::string call;                // "cudaStreamSynchronize", "cudaMemcpyAsync from pageable memory", ...
  std::string site;                // "runtime.cu:170"
  std::vector<std::string> stack;  // the host's functions that led there, innermost first (demangled)
};

struct Counts {
  int64_t kernel_launches = 0;  // a graph launch counts as one (its nodes are not counted again)
  int64_t graph_launches = 0;
  int64_t library_calls = 0;    // cuBLAS and cuDNN calls (each runs kernels of its own on a GPU)
  int64_t bytes_to_device = 0;  // host to device copies
  int64_t bytes_to_host = 0;    // device to host copies
  int64_t pageable_copies = 0;  // copies between the device and pageable (not pinned) host memory
  std::vector<HostWait> host_waits;
  std::map<std::string, int64_t> launches_by_kernel;
  std::map<std::string, int64_t> blocks_by_kernel;  // blocks launched, summed over the kernel's launches
};

Counts counts();      // since the last reset_counts() (or the program's start)
void reset_counts();
// The counts in words: totals, then each host wait with its site and stack, then launches by kernel.
std::string describe(const Counts& counts);

// Called by the emulator itself (and by the macros of cuda_runtime.h).
void note_kernel_launch(const char* name, uint64_t blocks);
void note_library_call(const char* name);
void note_graph_launch(size_t nodes);
void note_host_wait(const char* call, const char* file, int line);
// The site of the copy call about to run (cudaMemcpy*): memory.cpp decides whether it waits.
void note_call_site(const char* file, int line);
void note_copy(const char* call, bool to_device, bool host_pinned, uint64_t bytes, bool waits);

// Pinned host memory (pinned.cpp): whether [ptr, ptr + bytes) lies inside one cudaMallocHost block.
bool is_pinned(const void* ptr, size_t bytes);

}  // namespace ember_emu
