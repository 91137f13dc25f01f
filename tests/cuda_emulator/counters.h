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
//
// Dry mode (EMBER_EMULATOR_DRY=1, or set_dry_mode): every call is checked, queued and counted as
// always, but no work is done: kernels, cuBLAS and cuDNN calls, memsets and copies onto the device
// run as nothing, and a copy to the host writes zeros. What is left is the host's own cost, to time
// (docs/cuda.md, "The host's share"). Values are garbage then (every read-back is 0: a loss of 0, no
// NaN, a gradient norm of 0, predictions of class 0), so only programs that survive that are
// timed this way; fresh cudaMalloc memory is not filled either, and a host wait keeps no call stack.
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
  int64_t copies_to_device = 0, bytes_to_device = 0;  // host to device copies
  int64_t copies_to_host = 0, bytes_to_host = 0;      // device to host copies
  int64_t copies_on_device = 0, bytes_on_device = 0;  // device to device copies
  int64_t memsets = 0;
  int64_t event_records = 0;  // cudaEventRecord
  int64_t stream_waits = 0;   // cudaStreamWaitEvent
  int64_t captures = 0;       // graphs captured (cudaStreamEndCapture that gave one)
  int64_t mallocs = 0;        // cudaMalloc (a caching allocator's misses)
  int64_t pageable_copies = 0;  // copies between the device and pageable (not pinned) host memory
  std::vector<HostWait> host_waits;
  std::map<std::string, int64_t> launches_by_kernel;
  std::map<std::string, int64_t> blocks_by_kernel;  // blocks launched, summed over the kernel's launches
  // Every call that queues work for the GPU (each costs the host about one launch on a GPU):
  // kernels and graphs, library calls, copies each way, memsets.
  int64_t work_items() const {
    return kernel_launches + library_calls + copies_to_device + copies_to_host + copies_on_device + memsets;
  }
};

Counts counts();      // since the last reset_counts() (or the program's start)
void reset_counts();
// The counts in words: totals, then each host wait with its site and stack, then launches by kernel.
std::string describe(const Counts& counts);
// The same as one JSON object (host waits as a count; launches by kernel as an object).
std::string to_json(const Counts& counts);

// Dry mode (see the top): EMBER_EMULATOR_DRY=1 at the start; tests switch it around a case.
bool dry_mode();
void set_dry_mode(bool on);

// Called by the emulator itself (and by the macros of cuda_runtime.h).
void note_kernel_launch(const char* name, uint64_t blocks);
void note_library_call(const char* name);
void note_graph_launch(size_t nodes);
void note_host_wait(const char* call, const char* file, int line);
// The site of the copy call about to run (cudaMemcpy*): memory.cpp decides whether it waits.
void note_call_site(const char* file, int line);
void note_copy(const char* call, bool to_device, bool host_pinned, uint64_t bytes, bool waits);
void note_device_copy(uint64_t bytes);  // device to device
// The other calls counted (not inside a capture: those are the graph's, counted as its launch).
enum class Call { kMemset, kEventRecord, kStreamWait, kCapture, kMalloc };
void note_call(Call call);

// Pinned host memory (pinned.cpp): whether [ptr, ptr + bytes) lies inside one cudaMallocHost block.
bool is_pinned(const void* ptr, size_t bytes);

}  // namespace ember_emu

// For programs built both for a GPU and for the emulator (bench/train_step_bench.cpp): declared
// weak there, these are null on a GPU. EMBER_EMULATOR_COUNTS=1 also prints the whole run's counts
// (to_json) to stderr when the program ends.
extern "C" void ember_emulator_reset_counts();
// The counts since the last reset as JSON (to_json), into out (at most size bytes, with the final
// 0); returns the length the whole text needs, as snprintf does.
extern "C" size_t ember_emulator_counts_json(char* out, size_t size);
