// Sliding-window attention's band (Longformer, Beltagy et al. 2020), the one optional mask of attention()
// that is neither padding nor causal: query i sees key j iff |i - j| <= window, or i < global, or
// j < global (the first `global` tokens attend to, and are attended by, every token). The default,
// window < 0, is no band: full attention. Padding and causal masks combine with it (autograd/ops.h).
// As PyTorch's scaled_dot_product_attention takes its attn_mask, attention() takes this; the CPU kernels
// (core/cpu/attention.cpp) and the GPU's (cuda/attention_kernels.cu, attn::outside_window) read the same rule.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace ember {

struct AttentionBand {
  int64_t window = -1;  // keys within `window` positions on either side of a query; < 0: no band
  int64_t global = 0;   // the first `global` tokens see, and are seen by, all (with a band)
  bool on() const { return window >= 0; }
};

// The band as text, the form of imdb's --attention flag and of its files: "full" (no band), "window:W" or
// "window:W,global:G". parse_attention_band reads it back (W and G integers in [0, max], nothing else around
// them); nullopt for any other text.
std::string attention_band_text(const AttentionBand& band);
std::optional<AttentionBand> parse_attention_band(const std::string& text, int64_t max);

}  // namespace ember
