// The emulator's counts (counters.h): launches, library calls, host waits with their call sites,
// copies. One set for the process, under a lock (tests read them from the launching thread).
#include "counters.h"

#include <cxxabi.h>
#include <execinfo.h>

#include <cstdint>
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

std::string describe(const Counts& c) {
  std::ostringstream out;
  out << c.kernel_launches << " kernel launches (" << c.graph_launches << " of them graph launches), " << c.library_calls << " library calls, " << c.host_waits.size()
      << " host waits, " << c.bytes_to_device << " bytes to the device, " << c.bytes_to_host << " bytes to the host, "
      << c.pageable_copies << " pageable copies\n";
  for (const HostWait& w : c.host_waits) {
    out << "  host wait: " << w.call << " at " << w.site << "\n";
    for (const std::string& f : w.stack) out << "      in " << f << "\n";
  }
  for (const auto& [name, n] : c.launches_by_kernel)
    out << "  " << n << " x " << name << " (" << c.blocks_by_kernel.at(name) << " blocks)\n";
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
  HostWait wait{call, short_site(file, line), host_stack()};
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
  if (!host_pinned) ++current.pageable_copies;
}

}  // namespace ember_emu
