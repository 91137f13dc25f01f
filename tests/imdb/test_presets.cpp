// imdb's presets (examples/imdb/presets.h): the command line a preset expands to. The flags it
// then sets, and their override, are checked end to end in tests/cli_test.sh.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "examples/imdb/presets.h"

using namespace ember;
using namespace ember::imdb;
using Args = std::vector<std::string>;

TEST_CASE("presets: the preset's flags go right after the command, before every explicit flag") {
  const Args large = {"--dim", "512", "--heads", "8", "--layers", "6", "--ffn", "2048", "--max-len", "512",
                      "--truncate", "head+tail", "--batch-size", "64", "--precision", "bf16", "--lr", "3e-4",
                      "--warmup", "0.1"};
  Args want = {"train"};
  want.insert(want.end(), large.begin(), large.end());
  want.insert(want.end(), {"--heads", "4", "--epochs", "1"});
  // Wherever --preset stands, the explicit flags come after it, so their values win (the last one does).
  CHECK(expand_preset({"train", "--preset", "gpu-large", "--heads", "4", "--epochs", "1"}) == want);
  CHECK(expand_preset({"train", "--heads", "4", "--preset=gpu-large", "--epochs", "1"}) == want);
  CHECK(expand_preset({"train", "--heads", "4", "--epochs", "1", "--preset", "gpu-large"}) == want);
  // The last preset named is the one used; without one the command line is as it was.
  CHECK(expand_preset({"train", "--preset", "head+tail-512", "--preset", "gpu-large", "--heads", "4", "--epochs", "1"}) ==
        want);
  CHECK(expand_preset({"train", "--heads", "4"}) == Args{"train", "--heads", "4"});
  CHECK(expand_preset({"compare", "--preset", "head+tail-512"}) ==
        Args{"compare", "--max-len", "512", "--truncate", "head+tail", "--attention", "window:256,global:1"});
}

TEST_CASE("presets: an unknown or missing name is an error that names the known presets") {
  CHECK_THROWS_WITH_AS(expand_preset({"train", "--preset", "gpu-huge"}),
                       "--preset 'gpu-huge' is not a preset (known: head+tail-512, head+tail-512-bigrams, bigram-bag, gpu-large)", Error);
  CHECK_THROWS_WITH_AS(expand_preset({"train", "--preset="}), doctest::Contains("(known: head+tail-512, head+tail-512-bigrams, bigram-bag, gpu-large)"),
                       Error);
  CHECK_THROWS_WITH_AS(expand_preset({"train", "--preset"}), "--preset needs a name (one of: head+tail-512, head+tail-512-bigrams, bigram-bag, gpu-large)",
                       Error);
  CHECK_THROWS_WITH_AS(expand_preset({"train", "--preset", "--heads", "4"}), doctest::Contains("needs a name"), Error);
}
