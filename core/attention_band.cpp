// The attention band's text form (core/attention_band.h).
#include "core/attention_band.h"

#include <fmt/format.h>

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <system_error>

namespace ember {
namespace {

// The whole text as an integer in [min, max]: digits only (no sign, spaces or base prefix).
std::optional<int64_t> whole_integer(const std::string& text, int64_t min, int64_t max) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [stop, error] = std::from_chars(text.data(), end, value, 10);
  if (text.empty() || error != std::errc() || stop != end || value < min || value > max) return std::nullopt;
  return value;
}

}  // namespace

std::string attention_band_text(const AttentionBand& band) {
  if (band.window < 0) return "full";
  if (band.global == 0) return fmt::format("window:{}", band.window);
  return fmt::format("window:{},global:{}", band.window, band.global);
}

std::optional<AttentionBand> parse_attention_band(const std::string& text, int64_t max) {
  if (text == "full") return AttentionBand{};
  const std::string prefix = "window:", global_part = ",global:";
  if (text.rfind(prefix, 0) != 0) return std::nullopt;
  const std::string rest = text.substr(prefix.size());
  AttentionBand band;
  const size_t comma = rest.find(',');
  const std::optional<int64_t> window = whole_integer(rest.substr(0, comma), 0, max);
  if (!window) return std::nullopt;
  band.window = *window;
  if (comma != std::string::npos) {
    if (rest.compare(comma, global_part.size(), global_part) != 0) return std::nullopt;
    const std::optional<int64_t> global = whole_integer(rest.substr(comma + global_part.size()), 0, max);
    if (!global) return std::nullopt;
    band.global = *global;
  }
  return band;
}

}  // namespace ember
