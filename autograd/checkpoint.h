// Activation checkpointing: checkpoint(fn, inputs) runs fn without keeping its intermediate tensors
// and runs it again during backward to get them, trading one more forward for their memory.
//
//   Tensor y = checkpoint([&](const std::vector<Tensor>& in) { return block.forward(in[0], mask); }, {x});
//
// Forward: fn runs under no-grad on the inputs (detached), so none of its ops records a node or saves a
// tensor; only the inputs are kept (checked for in-place changes, autograd/saved_tensor.h), with the state
// of the random generators fn draws from and the mixed-precision scope (core/precision.h). y gets one node,
// "checkpoint".
// Backward: the generators are set back to the state they had at the forward (dropout draws the same
// masks), fn runs again with grad on and in the forward's precision, from leaves holding the inputs' values, and the output's gradient
// is sent through that fresh graph: parameters inside fn collect their gradients there, the inputs'
// gradients are what the node returns. The generators then go back to where they were, so a run with
// checkpoints draws the same numbers afterwards as one without: the gradients are bit-identical on the CPU.
// Selective recomputation (autograd/recompute_cache.h): ops that take part keep a few small results at the
// forward (attention: its output and its rows' softmax statistics), and the first recompute takes them
// instead of computing them again; the same bits either way.
// Nesting works (a checkpoint inside fn runs plainly in the no-grad forward and records itself in the
// recompute); under no-grad, or when no input requires grad, fn just runs (nothing to save).
// NOTE: fn must compute the same thing twice: the same ops on the same shapes, randomness only from the
// generators listed (by default the default generator). A recompute of another shape is an error.
#pragma once
#include <functional>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"

namespace ember {

using CheckpointFn = std::function<Tensor(const std::vector<Tensor>& inputs)>;

// fn(inputs), without keeping fn's intermediates for backward; `generators`: the random generators fn
// draws from (saved at the forward, replayed in the recompute).
Tensor checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                  const std::vector<Generator*>& generators = {&default_generator()});

}  // namespace ember
