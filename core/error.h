// Errors: every bad input raises ember::Error with a message that names the op and the shapes.
#pragma once
#include <fmt/core.h>  // the light half of fmt: fmt::format of built-in types (a TU that formats more includes fmt/format.h)
#include <stdexcept>
#include <string>
#include <utility>

namespace ember {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Throw an ember::Error whose message is formatted with fmt.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace ember

// EMBER_CHECK(cond, "matmul: {} @ {}: ...", a, b): throws ember::Error when cond is false.
#define EMBER_CHECK(cond, ...)      \
  do {                              \
    if (!(cond)) ::ember::fail(__VA_ARGS__); \
  } while (0)
