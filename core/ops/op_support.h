// What an op file uses, in one include: record() and Grads (autograd/node.h), every op
// (core/ops.h), the CPU's thread pool and dtype dispatch (core/parallel.h, core/dtype.h), and the
// GPU's entry points with their operand layout (core/gpu.h, core/cuda_ops.h). So an op added to a
// file of core/ops/ needs no new #include: its CPU loop and its CUDA call have what they need.
// Kernels of one op family (core/cpu/<family>.h) come on top.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "autograd/node.h"
#include "core/gpu.h"
#include "core/ops.h"
#include "core/parallel.h"
