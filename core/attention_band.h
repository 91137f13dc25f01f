// Sliding-window attention's band (Longformer, Beltagy et al. 2020), the one optional mask of attention()
// that is neither padding nor causal: query i sees key j iff |i - j| <= window, or i < global, or
// j < global (the first `global` tokens attend to, and are attended by, every token). The default,
// window < 0, is no band: full attention. Padding and causal masks combine with it (autograd/ops.h).
// As PyTorch's scaled_dot_product_attention takes its attn_mask, attention() takes this; the CPU kernels
// (core/cpu/attention.cpp) and the GPU's (cuda/attention_kernels.cu, attn::outside_window) read the same rule.
#pragma once
#include <cstdint>

namespace ember {

struct AttentionBand {
  int64_t window = -1;  // keys within `window` positions on either side of a query; < 0: no band
  int64_t global = 0;   // the first `global` tokens see, and are seen by, all (with a band)
  bool on() const { return window >= 0; }
};

}  // namespace ember
