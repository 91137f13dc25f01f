// EMBER_HD marks math that compiles for both the CPU and CUDA (host + device), so CPU tests cover it.
#pragma once

#if defined(__CUDACC__)
#define EMBER_HD __host__ __device__
#else
#define EMBER_HD
#endif
