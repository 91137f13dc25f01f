// The fused attention's entry points on the GPU (core/kernels.h: attention_plan, attention_forward,
// attention_probs, attention_backward) and its settings (core/cuda_ops.h: fused or composed, tensor cores or
// CUDA cores). The kernels: cuda/attention_simt.cu (CUDA cores: float32, float64, and mixed precision where
// tensor cores are off or missing) and cuda/attention_tensor_cores.cu (bfloat16 WMMA), their shared building
// blocks and launch arguments in cuda/attention_tiles.cuh.
// The GPU keeps out and the float64 log-sum-exps [B, H, T], and recomputes the probabilities in the
// backward; delta [B, H, T] is its scratch. The weights asked for are the operands' dtype (float32 for
// bfloat16), from the CUDA-core probabilities kernel.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/cuda_ops.h"
#include "core/kernels.h"
#include "cuda/attention_tiles.cuh"
#include "cuda/dispatch.h"

namespace ember::cuda {
namespace {

std::atomic<int> use_tensor_cores{-1};  // -1: not decided yet (read EMBER_ATTENTION_TENSOR_CORES on first use)
std::atomic<int> use_fused{-1};         // -1: not decided yet (read EMBER_ATTENTION on first use)

// Whether this device runs the mixed-precision attention on the tensor-core kernels: asked for (the
// default) and bfloat16 WMMA there (compute capability 8.0 or more).
bool tensor_cores_usable(int device) {
  if (!attention_tensor_cores()) return false;
  int major = 0;
  EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major >= 8;
}

// Mixed precision: bfloat16 operands, or bf16 with float32 ones.
bool mixed(const On& on, const AttentionDims& d) { return on.dtype == kBFloat16 || (d.bf16 && on.dtype == kFloat32); }

// The launch's arguments from the op's; the mixed-precision flag set for bfloat16 operands too.
attention::Args launch_args(const On& on, const AttentionArgs& args) {
  attention::Args a;
  a.d = args.dims;
  a.d.bf16 = mixed(on, args.dims);
  a.q = args.q, a.k = args.k, a.v = args.v, a.mask = args.mask;
  a.general_mask = args.mask.on() && !args.mask.per_key();
  return a;
}

// The old host wrapper's check (the op never asks: attention_plan sends a larger head to the composed version).
void check_head_size(const AttentionDims& d) {
  const int64_t head = attention::head_size(d);
  if (head <= attention::kMaxHeadDim) return;
  char message[200];
  std::snprintf(message, sizeof message, "%s: head size %lld exceeds the fused CUDA kernels' %d (use EMBER_ATTENTION=composed)",
                d.window >= 0 ? "window_attention" : "attention", static_cast<long long>(head), attention::kMaxHeadDim);
  raise_message(message);
}

}  // namespace

void set_attention_fused(bool on) { use_fused = on ? 1 : 0; }

bool attention_fused() {
  int value = use_fused.load();
  if (value < 0) {
    // Fused unless EMBER_ATTENTION=composed: on the H200 the fused step took 2.77 ms, the composed 3.58
    // (b49dd40:docs/results/gpu-h200-65c2eb4/ in git history), with every fused-kernel test green there.
    const char* env = std::getenv("EMBER_ATTENTION");
    value = env != nullptr && std::strcmp(env, "composed") == 0 ? 0 : 1;
    use_fused = value;
  }
  return value == 1;
}

int64_t attention_max_head_dim() { return attention::kMaxHeadDim; }

void set_attention_tensor_cores(bool on) { use_tensor_cores = on ? 1 : 0; }

bool attention_tensor_cores() {
  int value = use_tensor_cores.load();
  if (value < 0) {
    const char* env = std::getenv("EMBER_ATTENTION_TENSOR_CORES");
    value = env != nullptr && (std::strcmp(env, "off") == 0 || std::strcmp(env, "0") == 0) ? 0 : 1;
    use_tensor_cores = value;
  }
  return value == 1;
}

AttentionPlan attention_plan(const On& on, const AttentionArgs& args) {
  const AttentionDims& d = args.dims;
  AttentionPlan plan;
  plan.fused = attention_fused() && attention::head_size(d) <= attention_max_head_dim();
  plan.probs_dtype = on.dtype == kBFloat16 ? kFloat32 : on.dtype;
  plan.stats_dtype = kFloat64;
  plan.scratch = d.B * d.H * d.T;
  return plan;
}

void attention_forward(const On& on, const AttentionArgs& args, const AttentionOut& out, void* stats, void* probs) {
  check_head_size(args.dims);
  if (args.dims.B * args.dims.H * args.dims.T == 0) return;
  attention::Args a = launch_args(on, args);
  a.out = out;
  a.lse_out = static_cast<double*>(stats);
  a.lse = a.lse_out;  // the probabilities kernel reads what the forward wrote
  // The weights, when asked for, come from the CUDA-core kernels' probabilities kernel.
  if (a.d.bf16 && probs == nullptr && tensor_cores_usable(on.device))
    attention::tensor_core_forward(on.device, on.dtype, a);
  else
    attention::simt_forward(on.device, on.dtype, a, probs);
}

void attention_probs(const On&, const AttentionArgs&, const void*, void*) {
  raise_message("attention_probs: the GPU's attention keeps no probabilities for its backward (attention_plan)");
}

void attention_backward(const On& on, const AttentionArgs& args, const AttentionIn& out, const void* stats,
                        const void* /*probs*/, const AttentionIn& grad_out, double* scratch, const AttentionOut& dq,
                        const AttentionOut& dk, const AttentionOut& dv) {
  if (args.dims.B * args.dims.H * (args.dims.T + args.dims.S) == 0) return;
  attention::Args a = launch_args(on, args);
  a.o = out, a.dout = grad_out, a.dq = dq, a.dk = dk, a.dv = dv;
  a.lse = static_cast<const double*>(stats);
  a.delta = scratch;
  if (a.d.bf16 && tensor_cores_usable(on.device))
    attention::tensor_core_backward(on.device, on.dtype, a);
  else
    attention::simt_backward(on.device, on.dtype, a);
}

}  // namespace ember::cuda
