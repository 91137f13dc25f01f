// Shared by the fuzz targets: a private scratch folder for the bytes a loader must read from a file.
// The targets are built two ways: by scripts/fuzz.sh with clang's libFuzzer (+ ASan/UBSan), and by
// CMake into fuzz_replay_<target>, which runs the same function over the seed corpus and the saved
// regressions (tests/fuzz/corpus/<target>/, tests/fuzz/regressions/<target>/) as a ctest test.
#pragma once
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>

namespace ember::fuzz {

// A folder unique to this process, created on first use and removed at exit.
inline const std::filesystem::path& scratch_dir() {
  struct Dir {
    std::filesystem::path path;
    Dir() {
      path = std::filesystem::temp_directory_path() / ("ember_fuzz_" + std::to_string(::getpid()));
      std::filesystem::create_directories(path);
    }
    ~Dir() {
      std::error_code error;
      std::filesystem::remove_all(path, error);
    }
  };
  static Dir dir;
  return dir.path;
}

inline void write_bytes(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A failed invariant: abort so that libFuzzer (and the replay test) reports it as a crash.
#define EMBER_FUZZ_ASSERT(cond)                                                   \
  do {                                                                            \
    if (!(cond)) {                                                                \
      std::fprintf(stderr, "fuzz invariant failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                               \
    }                                                                             \
  } while (0)

}  // namespace ember::fuzz
