// How the bfloat16 unary ops read their tables (core/cpu/elementwise.h): 16 keys by one AVX-512 gather, or
// by 16 scalar loads. The same entries either way, so the same bits; only the speed differs, and which is
// faster depends on the core. On an AMD Zen 5 a 16-lane vpgatherdd takes about 32 cycles: GELU over a
// [8192, 512] bfloat16 tensor ran in 1.1 ms with scalar loads against 1.8 ms gathered, its backward 1.25
// against 1.75 ms (one thread; docs/performance.md); cores with fast gathers may go the other way.
// So it is measured, once per process, as the bfloat16 GEMM's kernel is (core/cpu/gemm.h).
#pragma once

namespace ember::cpu {

enum class TableLookup { Gather, Scalar };

// The way this process reads the tables: the one EMBER_BF16_LOOKUP names (gather or scalar; another value is
// an ember::Error naming it), else the faster of the two on a sweep of 16,384 keys (the fastest of 7
// alternated runs of each, about half a millisecond, the first time). Scalar without AVX-512.
TableLookup table_lookup();
const char* table_lookup_name(TableLookup way);

}  // namespace ember::cpu
