// A doctest listener that ignores every event: derive from it and override the one you need
// (tests/main.cpp counts the selected cases; the emulated test program empties the device caches
// after each case, tests/cuda_emulator/checks/protected_run.cpp).
#pragma once
#include <doctest/doctest.h>

namespace ember_test {

struct Listener : doctest::IReporter {
  explicit Listener(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

}  // namespace ember_test
