// A benchmark's JSON numbers with the digits its readers have always had: fmt prints x with `spec`
// ("{:.3f}", "{:.6g}", ...), the text is read back, and nlohmann writes that double in its shortest
// form (1.5 for "1.500"), which every JSON reader (bench/*.py, bench/gpu-check.sh) reads as the number
// the format string used to write. NaN and infinities come out as null.
#pragma once
#include <string>

#include <fmt/format.h>

inline double json_number(double x, const char* spec) { return std::stod(fmt::format(fmt::runtime(spec), x)); }
