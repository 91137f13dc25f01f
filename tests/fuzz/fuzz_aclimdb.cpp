// Fuzz target: the Stanford aclImdb folder reader. The input describes a folder tree:
//   byte 0        bit k set = directory k of train/neg, train/pos, test/neg, test/pos exists
//   then records separated by '\0', each "name\x01contents"; record i goes into directory i % 4
//   (names: any bytes except '/' and '\0'; a name without '\x01' makes an empty file).
// The folder either loads or raises ember::Error; anything else is a bug.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

// NOTE: GCC 12 at -O3 warns wrongly about std::string assignment here (-Wrestrict, GCC bug 105651).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

#include "core/error.h"
#include "examples/imdb/dataset.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ember;
  namespace fs = std::filesystem;
  if (size == 0) return 0;
  const fs::path root = fuzz::scratch_dir() / "aclImdb";
  std::error_code error;
  fs::remove_all(root, error);
  const char* dirs[4] = {"train/neg", "train/pos", "test/neg", "test/pos"};
  for (int k = 0; k < 4; ++k)
    if (data[0] & (1 << k)) fs::create_directories(root / dirs[k]);
  fs::create_directories(root);
  std::string_view rest = fuzz::as_text(data + 1, size - 1);
  size_t record = 0;
  int expected_files[4] = {0, 0, 0, 0};
  while (!rest.empty() && record < 64) {
    size_t end = rest.find('\0');
    std::string_view item = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    size_t split = item.find('\x01');
    std::string name(item.substr(0, split));
    std::string_view contents = split == std::string_view::npos ? std::string_view() : item.substr(split + 1);
    for (char& c : name)
      if (c == '/') c = '_';
    if (name.empty() || name == "." || name == ".." || name.size() > 200) name = "r" + std::to_string(record);
    int k = int(record++ % 4);
    if (!(data[0] & (1 << k))) continue;
    fs::path file = root / dirs[k] / name;
    if (fs::exists(file, error)) continue;
    fuzz::write_bytes(file, contents);
    if (file.extension() == ".txt") ++expected_files[k];
  }
  imdb::ImdbSplit split;
  try {
    split = imdb::load_aclimdb(root.string());
  } catch (const Error&) {
    return 0;
  }
  EMBER_FUZZ_ASSERT(split.train.size() == size_t(expected_files[0] + expected_files[1]));
  EMBER_FUZZ_ASSERT(split.test.size() == size_t(expected_files[2] + expected_files[3]));
  for (size_t i = 0; i < split.train.size(); ++i)
    EMBER_FUZZ_ASSERT(split.train[i].label == (i < size_t(expected_files[0]) ? 0 : 1));
  return 0;
}
