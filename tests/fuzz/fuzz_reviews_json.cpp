// Fuzz target: the reviews.json reader, then the vocabulary and encoding on whatever it accepts.
// A file either loads or raises ember::Error; anything else is a bug.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "examples/imdb/dataset.h"
#include "examples/imdb/vocabulary.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ember;
  using namespace ember::imdb;
  const auto path = fuzz::scratch_dir() / "reviews.json";
  fuzz::write_bytes(path, fuzz::as_text(data, size));
  ImdbSplit split;
  try {
    split = load_reviews_json(path.string());
  } catch (const Error&) {
    return 0;
  }
  EMBER_FUZZ_ASSERT(split.train.size() == split.test.size() && !split.train.empty());
  for (const auto* reviews : {&split.train, &split.test})
    for (const Review& r : *reviews) EMBER_FUZZ_ASSERT(r.label == 0 || r.label == 1);
  Vocabulary vocabulary = Vocabulary::build(split.train, 50);
  EMBER_FUZZ_ASSERT(vocabulary.size() >= 2 && vocabulary.size() <= 52);
  for (const auto& ids : vocabulary.encode_all(split.test, 16)) {
    EMBER_FUZZ_ASSERT(ids.size() <= 16);
    for (int32_t id : ids) EMBER_FUZZ_ASSERT(id >= 1 && id < vocabulary.size());
  }
  return 0;
}
