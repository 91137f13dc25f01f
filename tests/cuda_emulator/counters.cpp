// The emulator's counts (counters.h): launches, library calls, host waits with their call sites,
// copies. One set for the process, under a lock (tests read them from the launching thread).
#include "counters.h"

#include <cxxabi.h>
#include <execinfo.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace ember_emu {
namespace {

std::mutex mutex;
Counts current;
std::atomic<bool> dry{[] {
  const char* env = std::getenv("EMBER_EMULATOR_DRY");
  return env != nullptr && env[0] == '1';
}()};
thread_local const char* site_file = nullptr;  // note_call_site: the copy call about to run
thread_local int site_line = 0;

std::string short_site(const char* file, int line) {
  if (file == nullptr) return "?";
  const char* slash = std::strrchr(file, '/');
  return std::string(slash != nullptr ? slash + 1 : file) + ":" + std::to_string(line);
}

// "binary(_ZN5ember4cuda11synchronizeEi+0x1c) [0x...]" -> "ember::cuda::synchronize(int)".
std::string frame_name(const char* symbol) {
  std::string s = symbol;
  const size_t open = s.find('('), plus = s.find('+', open == std::string::npos ? 0 : open);
  if (open == std::string::npos || plus == std::string::npos || plus == open + 1) return s;
  const std::string mangled = s.substr(open + 1, plus - open - 1);
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  std::string out = status == 0 && demangled != nullptr ? demangled : mangled;
  std::free(demangled);
  return out;
}

// The calling host functions, innermost first, without the emulator's own frames.
std::vector<std::string> host_stack() {
  void* frames[16];
  const int n = backtrace(frames, 16);
  char** symbols = backtrace_symbols(frames, n);
  std::vector<std::string> out;
  for (int i = 0; i < n && symbols != nullptr; ++i) {
    std::string name = frame_name(symbols[i]);
    if (name.rfind("ember_emu::", 0) == 0) continue;
    out.push_back(name);
    if (out.size() == 8) break;
  }
  std::free(symbols);
  return out;
}

}  // namespace

Counts counts() {
  std::lock_guard<std::mutex> lock(mutex);
  return current;
}

void reset_counts() {
  std::lock_guard<std::mutex> lock(mutex);
  current = Counts{};
}

bool dry_mode() { return dry.load(std::memory_order_relaxed); }
void set_dry_mode(bool on) { dry.store(on, std::memory_order_relaxed); }

std::string describe(const Counts& c) {
  std::ostringstream out;
  out << c.kernel_launches << " kernel launches (" << c.graph_launches << " of them graph launches), " << c.library_calls << " library calls, " << c.host_waits.size()
      << " host waits, " << c.copies_to_device << " copies (" << c.bytes_to_device << " bytes) to the device, "
      << c.copies_to_host << " (" << c.bytes_to_host << " bytes) to the host, " << c.copies_on_device << " ("
      << c.bytes_on_device << " bytes) on the device, " << c.pageable_copies << " pageable copies, " << c.memsets
      << " memsets, " << c.event_records << " event records, " << c.stream_waits << " stream waits, " << c.captures
      << " graph captures, " << c.mallocs << " cudaMalloc calls\n";
  for (const HostWait& w : c.host_waits) {
    out << "  host wait: " << w.call << " at " << w.site << "\n";
    for (const std::string& f : w.stack) out << "      in " << f << "\n";
  }
  for (const auto& [name, n] : c.launches_by_kernel)
    out << "  " << n << " x " << name << " (" << c.blocks_by_kernel.at(name) << " blocks)\n";
  return out.str();
}

std::string to_json(const Counts& c) {
  std::ostringstream out;
  out << "{\"work_items\": " << c.work_items() << ", \"kernel_launches\": " << c.kernel_launches
      << ", \"graph_launches\": " << c.graph_launches << ", \"library_calls\": " << c.library_calls
      << ", \"host_waits\": " << c.host_waits.size() << ", \"copies_to_device\": " << c.copies_to_device
      << ", \"bytes_to_device\": " << c.bytes_to_device << ", \"copies_to_host\": " << c.copies_to_host
      << ", \"bytes_to_host\": " << c.bytes_to_host << ", \"copies_on_device\": " << c.copies_on_device
      << ", \"bytes_on_device\": " << c.bytes_on_device << ", \"pageable_copies\": " << c.pageable_copies
      << ", \"memsets\": " << c.memsets << ", \"event_records\": " << c.event_records
      << ", \"stream_waits\": " << c.stream_waits << ", \"captures\": " << c.captures << ", \"mallocs\": " << c.mallocs
      << ", \"by_kernel\": {";
  const char* separator = "";
  for (const auto& [name, n] : c.launches_by_kernel) out << separator << "\"" << name << "\": " << n, separator = ", ";
  out << "}}";
  return out.str();
}

void note_kernel_launch(const char* name, uint64_t blocks) {
  std::lock_guard<std::mutex> lock(mutex);
  ++current.kernel_launches;
  ++current.launches_by_kernel[name];
  current.blocks_by_kernel[name] += int64_t(blocks);
}

void note_library_call(const char* name) {
  std::lock_guard<std::mutex> lock(mutex);
  ++current.library_calls;
  ++current.launches_by_kernel[name];
  current.blocks_by_kernel[name] += 0;
}

void note_graph_launch(size_t nodes) {
  std::lock_guard<std::mutex> lock(mutex);
  ++current.kernel_launches;
  ++current.graph_launches;
  ++current.launches_by_kernel["cudaGraphLaunch"];
  current.blocks_by_kernel["cudaGraphLaunch"] += int64_t(nodes);  // for a graph: its nodes
}

void note_host_wait(const char* call, const char* file, int line) {
  // NOTE: no stack in dry mode: a backtrace costs more than the wait it names, and would be timed.
  HostWait wait{call, short_site(file, line), dry_mode() ? std::vector<std::string>{} : host_stack()};
  std::lock_guard<std::mutex> lock(mutex);
  current.host_waits.push_back(std::move(wait));
}

void note_call_site(const char* file, int line) {
  site_file = file;
  site_line = line;
}

void note_copy(const char* call, bool to_device, bool host_pinned, uint64_t bytes, bool waits) {
  const char* file = site_file;
  const int line = site_line;
  site_file = nullptr;
  if (waits) note_host_wait(call, file, line);
  std::lock_guard<std::mutex> lock(mutex);
  (to_device ? current.bytes_to_device : current.bytes_to_host) += int64_t(bytes);
  if (bytes > 0) ++(to_device ? current.copies_to_device : current.copies_to_host);  // 0: a wait only (memory.cpp)
  if (!host_pinned) ++current.pageable_copies;
}

void note_device_copy(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex);
  ++current.copies_on_device;
  current.bytes_on_device += int64_t(bytes);
}

void note_call(Call call) {
  std::lock_guard<std::mutex> lock(mutex);
  switch (call) {
    case Call::kMemset: ++current.memsets; break;
    case Call::kEventRecord: ++current.event_records; break;
    case Call::kStreamWait: ++current.stream_waits; break;
    case Call::kCapture: ++current.captures; break;
    case Call::kMalloc: ++current.mallocs; break;
  }
}

namespace {

// EMBER_EMULATOR_COUNTS=1: the whole run's counts, printed when the program ends.
struct PrintAtExit {
  ~PrintAtExit() {
    const char* env = std::getenv("EMBER_EMULATOR_COUNTS");
    if (env != nullptr && env[0] == '1') std::fprintf(stderr, "emulator counts: %s\n", to_json(counts()).c_str());
  }
};
PrintAtExit print_at_exit;

}  // namespace

}  // namespace ember_emu

extern "C" void ember_emulator_reset_counts() { ember_emu::reset_counts(); }

extern "C" size_t ember_emulator_counts_json(char* out, size_t size) {
  const std::string text = ember_emu::to_json(ember_emu::counts());
  if (out != nullptr && size > 0) std::snprintf(out, size, "%s", text.c_str());
  return text.size();
}
