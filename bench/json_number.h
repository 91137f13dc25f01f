// A benchmark's JSON numbers with the digits its readers have always had: fmt prints x with `spec`
// ("{:.3f}", "{:.6g}", ...), the text is read back, and nlohmann writes that double in its shortest
// form (1.5 for "1.500"), which every JSON reader (bench/*.py, bench/gpu-check.sh) reads as the number
// the format string used to write. NaN and infinities come out as null.
#pragma once
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

inline double json_number(double x, const char* spec) { return std::stod(fmt::format(fmt::runtime(spec), x)); }

// An array of such numbers (a benchmark's per-step times).
inline nlohmann::ordered_json json_numbers(const std::vector<double>& xs, const char* spec) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (double x : xs) out.push_back(json_number(x, spec));
  return out;
}
