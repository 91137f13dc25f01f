// Activation checkpointing (autograd/checkpoint.h): a no-grad forward, a recompute in backward.
#include "autograd/checkpoint.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "autograd/node.h"
#include "autograd/recompute_cache.h"
#include "core/error.h"
#include "core/precision.h"

namespace ember {
namespace {

struct GeneratorState {
  Generator* generator;
  uint64_t seed, offset;
};

std::vector<GeneratorState> states_of(const std::vector<Generator*>& generators) {
  std::vector<GeneratorState> states;
  for (Generator* g : generators) states.push_back({g, g->seed(), g->offset()});
  return states;
}

void restore(const std::vector<GeneratorState>& states) {
  for (const GeneratorState& s : states) s.generator->set_state(s.seed, s.offset);
}

// Sets grad mode for a scope (the engine runs backward formulas with it off; the recompute needs it on).
class GradModeScope {
 public:
  explicit GradModeScope(bool enabled) : previous_(grad_enabled()) { set_grad_enabled(enabled); }
  ~GradModeScope() { set_grad_enabled(previous_); }
  GradModeScope(const GradModeScope&) = delete;
  GradModeScope& operator=(const GradModeScope&) = delete;

 private:
  bool previous_;
};

// Puts the generators back to `states` for a scope, and to where they were before it at its end.
class ReplayGenerators {
 public:
  ReplayGenerators(const std::vector<Generator*>& generators, const std::vector<GeneratorState>& states)
      : after_(states_of(generators)) { restore(states); }
  ~ReplayGenerators() { restore(after_); }
  ReplayGenerators(const ReplayGenerators&) = delete;
  ReplayGenerators& operator=(const ReplayGenerators&) = delete;

 private:
  std::vector<GeneratorState> after_;
};

Tensor checked_output(const Tensor& out, const char* when) {
  EMBER_CHECK(out.defined(), "checkpoint: the function returned an undefined tensor ({})", when);
  return out;
}

}  // namespace

Tensor checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs, const std::vector<Generator*>& generators) {
  EMBER_CHECK(fn != nullptr, "checkpoint: no function given");
  for (size_t i = 0; i < generators.size(); ++i)
    EMBER_CHECK(generators[i] != nullptr, "checkpoint: generator {} is null", i);
  // NOTE: with nothing to differentiate there is nothing to save: fn runs as it is. That includes an
  // fn whose inputs need no gradient but whose parameters do; checkpointing it would lose their gradient.
  if (!any_requires_grad(inputs.data(), inputs.size())) return checked_output(fn(inputs), "forward");
  const std::vector<GeneratorState> at_forward = states_of(generators);
  // The recompute runs in the forward's mixed-precision scope (core/precision.h), wherever backward runs:
  // the same ops, the same dtypes, the same numbers.
  const Precision precision = product_precision();
  // What the ops that take part keep for the recompute (attention's output and softmax statistics).
  auto kept = std::make_shared<RecomputeCache>();
  Tensor out;
  {
    GradModeScope no_grad(false);
    KeepResultsScope keep(kept.get());
    std::vector<Tensor> detached;
    for (const Tensor& t : inputs) detached.push_back(t.defined() ? t.detach() : Tensor());
    out = checked_output(fn(detached), "forward");
  }
  out = out.detach();  // NOTE: fn may return one of its inputs: a fresh handle gets the node, not the input
  std::vector<SavedTensor> saved;
  for (const Tensor& t : inputs) saved.push_back(save(t));
  std::vector<bool> wants_grad;
  for (const Tensor& t : inputs) wants_grad.push_back(t.defined() && t.requires_grad());
  const Shape shape = out.shape();
  const Dtype dtype = out.dtype();
  record("checkpoint", out, inputs,
         [fn, generators, at_forward, precision, kept, saved = std::move(saved), wants_grad, shape,
          dtype](const Tensor& g) -> Grads {
           std::vector<Tensor> leaves;
           for (size_t i = 0; i < saved.size(); ++i) {
             Tensor value = saved[i].get();  // an in-place change since the forward is an error here
             if (value.defined()) {
               value = value.detach();
               if (wants_grad[i]) value.requires_grad_(true);
             }
             leaves.push_back(value);
           }
           Tensor again;
           {
             ReplayGenerators replay(generators, at_forward);
             GradModeScope grad_on(true);
             MixedPrecisionGuard same_precision(precision);
             ReplayResultsScope replay_kept(kept->replayed() ? nullptr : kept.get());  // the first recompute only
             again = checked_output(fn(leaves), "recompute in backward");
           }
           EMBER_CHECK(again.shape() == shape && again.dtype() == dtype,
                       "checkpoint: the recompute in backward returned {} {}, the forward {} {}; the function must "
                       "compute the same thing twice", dtype_name(again.dtype()), shape_str(again.shape()),
                       dtype_name(dtype), shape_str(shape));
           if (again.requires_grad()) again.backward(g);
           Grads grads;
           for (size_t i = 0; i < leaves.size(); ++i) grads.push_back(wants_grad[i] ? leaves[i].grad() : Tensor());
           return grads;
         });
  return out;
}

}  // namespace ember
