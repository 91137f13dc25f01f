// Device names and parsing.
#include "core/device.h"

#include <charconv>
#include <string>
#include <system_error>

#include "core/error.h"

namespace ember {

Device Device::parse(const std::string& text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.rfind("cuda:", 0) == 0) {
    int index = -1;
    const char* first = text.data() + 5;
    const char* last = text.data() + text.size();
    auto [end, error] = std::from_chars(first, last, index);
    if (error == std::errc() && end == last && index >= 0) return cuda(index);
  }
  fail("unknown device '{}': expected cpu, cuda or cuda:N", text);
}

std::string Device::str() const { return is_cpu() ? "cpu" : fmt::format("cuda:{}", index); }

}  // namespace ember
