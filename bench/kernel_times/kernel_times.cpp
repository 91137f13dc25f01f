// Per-kernel GPU time of any CUDA program, measured by the GPU itself (CUPTI's activity records: each
// kernel's, copy's and memset's start and end on the device's clock), for finding where a step's GPU time goes.
// A shared library loaded beside the program; nothing in Ember links it:
//
//   LD_PRELOAD=build/libember_kernel_times.so build/train_step_bench --device cuda --steps 20 --warmup 0
//
// At exit it prints one row per kernel name (calls, total and mean microseconds, share of the GPU's busy time),
// the copies and memsets, and the busy time against the span from the first record to the last (the rest is
// the GPU idle, waiting for the host). EMBER_KERNEL_TIMES_OUT=FILE writes the table there instead of stderr;
// EMBER_KERNEL_TIMES_TOP=N keeps the N largest rows (default 40).
// Records of kernels launched inside a replayed CUDA graph are kernels too: they are counted the same way.
// NOTE: written and compiled without a GPU: not yet run on one (bench/gpu-profile.sh is its first use).
#include <cupti.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace {

struct Row {
  int64_t calls = 0;
  uint64_t total_ns = 0;
};

struct Totals {
  std::mutex mutex;
  std::map<std::string, Row> rows;  // kernel name (or "[copy HtoD]", "[memset]") -> its time
  uint64_t first_ns = UINT64_MAX, last_ns = 0, busy_ns = 0;
  int64_t dropped = 0;

  void add(const std::string& name, uint64_t start, uint64_t end) {
    if (end < start) return;
    std::lock_guard<std::mutex> lock(mutex);
    Row& row = rows[name];
    ++row.calls;
    row.total_ns += end - start;
    busy_ns += end - start;
    first_ns = std::min(first_ns, start);
    last_ns = std::max(last_ns, end);
  }
};

Totals& totals() {
  static Totals* t = new Totals;  // never destroyed: records may arrive during exit
  return *t;
}

const char* copy_kind(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "[copy HtoD]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "[copy DtoH]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "[copy DtoD]";
    default: return "[copy other]";
  }
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = size_t(8) << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        totals().add(k->name ? k->name : "?", k->start, k->end);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        totals().add(copy_kind(m->copyKind), m->start, m->end);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        totals().add("[memset]", m->start, m->end);
        break;
      }
      default: break;
    }
  }
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped) == CUPTI_SUCCESS) totals().dropped += int64_t(dropped);
  std::free(buffer);
}

// Kernel names come mangled: demangling is left to the reader (c++filt); the table is short enough.
void print_table() {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  Totals& t = totals();
  std::lock_guard<std::mutex> lock(t.mutex);
  const char* out_path = std::getenv("EMBER_KERNEL_TIMES_OUT");
  FILE* out = out_path ? std::fopen(out_path, "w") : stderr;
  if (out == nullptr) out = stderr;
  const char* top_env = std::getenv("EMBER_KERNEL_TIMES_TOP");
  const size_t top = top_env ? size_t(std::atoll(top_env)) : 40;
  std::vector<std::pair<std::string, Row>> rows(t.rows.begin(), t.rows.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.total_ns > b.second.total_ns; });
  const double span_us = t.last_ns > t.first_ns ? double(t.last_ns - t.first_ns) / 1e3 : 0.0;
  std::fprintf(out, "kernel_times: GPU busy %.1f us of a %.1f us span (%.0f%%), %zu names, %lld records dropped\n",
               double(t.busy_ns) / 1e3, span_us, span_us > 0 ? 100.0 * double(t.busy_ns) / 1e3 / span_us : 0.0,
               rows.size(), static_cast<long long>(t.dropped));
  std::fprintf(out, "%10s %12s %10s %6s  %s\n", "calls", "total us", "mean us", "share", "name");
  for (size_t i = 0; i < rows.size() && i < top; ++i) {
    const Row& r = rows[i].second;
    std::fprintf(out, "%10lld %12.1f %10.2f %5.1f%%  %.160s\n", static_cast<long long>(r.calls), double(r.total_ns) / 1e3,
                 double(r.total_ns) / 1e3 / double(r.calls), 100.0 * double(r.total_ns) / double(std::max<uint64_t>(t.busy_ns, 1)),
                 rows[i].first.c_str());
  }
  if (out != stderr) std::fclose(out);
}

__attribute__((constructor)) void start_recording() {
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "kernel_times: CUPTI refused its callbacks: no table\n");
    return;
  }
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET);
  std::atexit(print_table);
}

}  // namespace
