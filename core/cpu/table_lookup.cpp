// The measured choice between gathered and scalar table lookups; see table_lookup.h.
#include "core/cpu/table_lookup.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "core/bfloat16.h"
#include "core/cpu/lanes.h"
#include "core/error.h"

namespace ember::cpu {
namespace {

#if defined(__AVX512F__)
// Seconds of one sweep of the keys through the table, each way, with the loops of map_unary's forward
// (core/cpu/elementwise.h): gathers 16 at a time, or one load per element.
template <TableLookup kWay>
__attribute__((noinline)) double sweep(const std::vector<BFloat16>& table, const std::vector<BFloat16>& keys,
                                       std::vector<BFloat16>& out) {
  const auto start = std::chrono::steady_clock::now();
  if constexpr (kWay == TableLookup::Gather)
    for (size_t i = 0; i < keys.size(); i += lanes::kLanes) lanes::lookup_store(table.data(), keys.data() + i, out.data() + i);
  else
    for (size_t i = 0; i < keys.size(); ++i) out[i] = table[keys[i].bits];
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TableLookup measured() {
  // Keys as activations have them: bfloat16 values spread around 0 (a fixed sequence, roughly normal: the
  // sum of four uniform draws), in a table of 65,537 entries (the gather's one past the last).
  std::vector<BFloat16> table(65537), keys(16384), out(16384);
  for (size_t i = 0; i < table.size(); ++i) table[i] = BFloat16::from_bits(uint16_t(i * 40503u));
  uint32_t state = 12345;
  const auto uniform = [&state] { return float((state = state * 1664525u + 1013904223u) >> 8) * 0x1p-24f - 0.5f; };
  for (auto& key : keys) key = BFloat16(2.0f * (uniform() + uniform() + uniform() + uniform()));
  double best[2] = {1e30, 1e30};
  for (int run = 0; run < 8; ++run) {  // the first run of each only warms the table and the keys into cache
    const double gather = sweep<TableLookup::Gather>(table, keys, out);
    const double scalar = sweep<TableLookup::Scalar>(table, keys, out);
    if (run > 0) best[0] = std::min(best[0], gather), best[1] = std::min(best[1], scalar);
  }
  return best[0] < best[1] ? TableLookup::Gather : TableLookup::Scalar;
}
#else
TableLookup measured() { return TableLookup::Scalar; }  // no gather instruction to choose
#endif

}  // namespace

TableLookup table_lookup() {
  static const TableLookup way = [] {
    if (const char* env = std::getenv("EMBER_BF16_LOOKUP"); env != nullptr && *env != '\0') {
      if (std::string_view(env) == "scalar") return TableLookup::Scalar;
      if (std::string_view(env) == "gather") return TableLookup::Gather;
      throw Error(fmt::format("EMBER_BF16_LOOKUP={}: unknown way to read the bfloat16 tables; expected gather or scalar", env));
    }
    return measured();
  }();
  return way;
}

const char* table_lookup_name(TableLookup way) { return way == TableLookup::Gather ? "gather" : "scalar"; }

}  // namespace ember::cpu
