// Printing tensors: str(), operator<< and fmt::format("{}", tensor).
#pragma once
#include <fmt/format.h>

#include <ostream>
#include <string>

#include "core/tensor.h"

namespace ember {
std::ostream& operator<<(std::ostream& os, const Tensor& t);
}

template <>
struct fmt::formatter<ember::Tensor> : fmt::formatter<std::string> {
  auto format(const ember::Tensor& t, fmt::format_context& ctx) const {
    return fmt::formatter<std::string>::format(t.str(), ctx);
  }
};
