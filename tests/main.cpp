// The test programs' entry point (doctest); every tests/test_*.cpp adds its TEST_CASEs.
// Under ctest each case runs as its own test (--test-case=<name>). A name that ctest or doctest
// mangles (a ';' splits it in two in CMake) would then select no case at all and "pass" without
// running anything; here a --test-case filter that selects nothing is a failure instead.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <string_view>

#include "tests/doctest_listener.h"

namespace {

// Remembers how many test cases the run's filters selected.
struct SelectedCount : ember_test::Listener {
  static inline unsigned selected = 0;
  using Listener::Listener;
  void test_run_end(const doctest::TestRunStats& stats) override { selected = stats.numTestCasesPassingFilters; }
};
REGISTER_LISTENER("selected_count", 1, SelectedCount);

}  // namespace

int main(int argc, char** argv) {
  bool filtered = false, query = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg.starts_with("--test-case=") || arg.starts_with("-tc=")) filtered = true;
    if (arg.starts_with("--list") || arg.starts_with("-l") || arg.starts_with("--help") || arg == "-h" ||
        arg.starts_with("--count") || arg == "-c" || arg.starts_with("--version") || arg == "-v")
      query = true;
  }
  doctest::Context context(argc, argv);
  const int result = context.run();
  if (context.shouldExit() || query) return result;
  if (filtered && SelectedCount::selected == 0) {
    std::fprintf(stderr, "no test case matches the --test-case filter (a name with ';' is split by ctest)\n");
    return result != 0 ? result : 1;
  }
  return result;
}
