// Fuzz target: the safetensors loader on arbitrary bytes. A file either loads or raises
// ember::Error; anything else (a crash, a sanitizer report, another exception) is a bug.
// What loads must also save and load back to the same entries.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "core/safetensors.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ember;
  const auto path = fuzz::scratch_dir() / "input.safetensors";
  fuzz::write_bytes(path, fuzz::as_text(data, size));
  safetensors::File file;
  try {
    file = safetensors::load(path.string());
  } catch (const Error&) {
    return 0;  // rejected with a clear error: fine
  }
  // Loaded: every entry's bytes match its shape and dtype.
  for (const auto& entry : file.entries) {
    int64_t n = 1;
    for (int64_t d : entry.shape) n *= d;
    EMBER_FUZZ_ASSERT(int64_t(entry.data.size()) == n * safetensors::dtype_size(entry.dtype));
  }
  // Round trip.
  const auto copy = fuzz::scratch_dir() / "copy.safetensors";
  try {
    safetensors::save(copy.string(), file.entries, file.metadata);
  } catch (const Error&) {
    return 0;  // e.g. a name save refuses; loading must not have crashed, which is what counts
  }
  safetensors::File again = safetensors::load(copy.string());
  EMBER_FUZZ_ASSERT(again.entries.size() == file.entries.size());
  EMBER_FUZZ_ASSERT(again.metadata == file.metadata);
  for (size_t i = 0; i < file.entries.size(); ++i) {
    const auto& a = file.entries[i];
    const auto& b = again.at(a.name);
    EMBER_FUZZ_ASSERT(a.dtype == b.dtype && a.shape == b.shape && a.data == b.data);
  }
  return 0;
}
