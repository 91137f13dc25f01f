// The test program's entry point (doctest); every tests/test_*.cpp adds its TEST_CASEs.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
