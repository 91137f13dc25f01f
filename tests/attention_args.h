// The fused attention kernels' arguments (core/attention_args.h) for a fused projection qkv [B, T, 3 D] of
// `heads` heads, as the attention op hands them over: q, k and v read in place (rows 3 D apart), a key
// padding mask [B, T] (true = padding) read once per key, and an output [B, T, D] written in place.
#pragma once
#include <cstdint>

#include "core/kernels.h"
#include "core/tensor.h"

namespace ember::testing {

inline AttentionArgs fused_qkv_args(const Tensor& qkv, int64_t heads, const Tensor& key_padding_mask, bool causal,
                                    int64_t window = -1, int64_t global = 0, bool bf16 = false) {
  const int64_t B = qkv.size(0), T = qkv.size(1), D = qkv.size(2) / 3, Dh = D / heads;
  const int64_t element = qkv.numel() > 0 ? int64_t(dtype_size(qkv.dtype())) : 0;
  const char* base = static_cast<const char*>(qkv.raw_data());
  AttentionArgs a;
  a.dims.B = B, a.dims.H = heads, a.dims.T = a.dims.S = T, a.dims.Dh = a.dims.Dv = Dh;
  a.dims.causal = causal, a.dims.window = window, a.dims.global = global, a.dims.bf16 = bf16;
  for (int part = 0; part < 3; ++part) {
    AttentionIn& x = part == 0 ? a.q : part == 1 ? a.k : a.v;
    x = {base + part * D * element, T * 3 * D, Dh, 3 * D};
  }
  if (key_padding_mask.defined()) a.mask = {key_padding_mask.raw_data(), MaskKind::Hides, T, 0, 0, 1};
  return a;
}

// out [B, T, D] as the kernels' [B, H, T, Dh] output.
inline AttentionOut merged_out(const Tensor& out, int64_t heads) {
  const int64_t T = out.size(1), D = out.size(2);
  return {out.raw_data(), T * D, D / heads, D};
}

}  // namespace ember::testing
