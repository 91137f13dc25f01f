// Optimiser base: parameter groups (each with its own weight decay), a learning rate, a step count,
// and per-parameter state tensors that a checkpoint can save and restore.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "core/update_rules.h"

namespace ember::optim {

struct ParamGroup {
  std::vector<Tensor> params;
  double weight_decay = 0.0;
  // The group learns at lr() x lr_scale: e.g. a pretrained encoder fine-tuned more gently than the new
  // head on top of it (ULMFiT's discriminative rates). >= 0; 1 = the optimiser's rate.
  double lr_scale = 1.0;
};

class Optimizer {
 public:
  explicit Optimizer(std::vector<ParamGroup> groups, double lr);
  virtual ~Optimizer() = default;

  // One update of every parameter that has a gradient (runs under no-grad).
  virtual void step() = 0;
  void zero_grad();

  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  int64_t step_count() const { return steps_; }
  // For a CUDA graph of step(), whose host side (this count among it) runs once, when the graph is
  // captured: a replay of that graph is one more step, counted here.
  void count_replayed_step() { count_step(); }
  // The capture of a step() that has just run eagerly (the capture's warm-up) runs step()'s host side
  // once more, for that same step: while a RetakeLastStep lives, step() counts the last step again
  // (its staged numbers, Adam::stage_step, are that step's), and when it ends the count is what it
  // was, whether or not the capture succeeded. There must have been a step.
  class RetakeLastStep {
   public:
    explicit RetakeLastStep(Optimizer& optimizer);
    ~RetakeLastStep() { optimizer_.steps_ = steps_; }
    RetakeLastStep(const RetakeLastStep&) = delete;
    RetakeLastStep& operator=(const RetakeLastStep&) = delete;

   private:
    Optimizer& optimizer_;
    int64_t steps_;
  };
  const std::vector<ParamGroup>& groups() const { return groups_; }

  // Optimiser state by name ("step", "<i>.exp_avg", ...), for checkpoints. Loading checks
  // everything first and changes nothing on error: "step" a single int64 in [0, 2^62]; every
  // other name "<i>.<kind>" with i a parameter's number (decimal digits only) and kind one of
  // state_kinds(), no parameter with some of its kinds but not all, each tensor of its
  // parameter's shape and dtype and valid for its kind (check_state_entry).
  virtual std::map<std::string, Tensor> state_dict() const;
  virtual void load_state_dict(const std::map<std::string, Tensor>& state);
  // The per-parameter buffers this optimiser keeps ("exp_avg", "exp_avg_sq"; "momentum"; none).
  virtual std::vector<std::string> state_kinds() const = 0;
  // The "<i>.<kind>" buffers a parameter lacks (a parameter gets them at its first update): for a
  // caller that knows every parameter has been updated, e.g. a trainer checking a checkpoint.
  virtual std::vector<std::string> missing_state() const;
  // Makes every parameter's missing state buffers now (zeros, as its first update would), so that
  // the first step() allocates none: a CUDA graph's warm-up step must leave the allocator's cache
  // holding what the captured step needs, not lend it to buffers kept for good.
  void create_state();
  static constexpr int64_t max_steps = int64_t(1) << 62;  // far beyond any run; step() refuses to go past it

 protected:
  // Every parameter of every group, numbered in order, with its group's weight decay.
  template <typename Fn>
  void for_each_param(Fn&& fn) {
    size_t index = 0;
    for (auto& group : groups_)
      for (auto& p : group.params) fn(index++, p, group.weight_decay);
  }
  // The groups' distinct learning-rate scales, in the order they first appear (one update call each).
  std::vector<double> lr_scales() const;
  // for_each_param over the groups whose lr_scale is `scale` (the numbering stays the global one).
  template <typename Fn>
  void for_each_param_at(double scale, Fn&& fn) {
    size_t index = 0;
    for (auto& group : groups_)
      for (auto& p : group.params) {
        if (group.lr_scale == scale) fn(index, p, group.weight_decay);
        ++index;
      }
  }
  // Named state buffers, one per parameter and kind; created (zeros) on first use.
  Tensor& buffer(const std::string& kind, size_t index, const Tensor& like);
  // Counts one more step; an ember::Error (rather than an overflow) past max_steps.
  void count_step();
  // Checks a loaded buffer's values for its kind (e.g. a second moment must be >= 0).
  virtual void check_state_entry(const std::string& name, const std::string& kind, const Tensor& value) const;

  std::vector<ParamGroup> groups_;
  double lr_;
  int64_t steps_ = 0;
  std::map<std::string, Tensor> buffers_;  // "<index>.<kind>"
};

// SGD with optional momentum and (L2) weight decay: v = mu v + (g + wd p); p -= lr v.
class SGD : public Optimizer {
 public:
  SGD(std::vector<ParamGroup> groups, double lr, double momentum = 0.0);
  void step() override;
  std::vector<std::string> state_kinds() const override;
  double momentum;
};

// Adam (weight decay added to the gradient, L2) or AdamW (decoupled: p -= lr wd p),
// with bias-corrected moments: m = b1 m + (1-b1) g, v = b2 v + (1-b2) g^2,
// p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps).
class Adam : public Optimizer {
 public:
  Adam(std::vector<ParamGroup> groups, double lr, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8,
       bool decoupled_weight_decay = false);
  void step() override;
  std::vector<std::string> state_kinds() const override;
  double beta1, beta2, eps;
  bool decoupled;

  // For a CUDA graph's step: the GPU kernel reads the step's numbers (learning rate, bias
  // corrections; one set per learning-rate scale) from a small buffer on `device` instead of its
  // arguments, so that a replay of a captured step() uses that replay's numbers. stage_step() writes the numbers of the next step()
  // (step_count() + 1, at lr()) there, an asynchronous upload; each step() checks that it was called
  // for it, and that lr() has not changed since.
  void keep_numbers_on_device(Device device);
  void stage_step();

 protected:
  void check_state_entry(const std::string& name, const std::string& kind, const Tensor& value) const override;

 private:
  AdamHyper hyper_for(int64_t step, double lr_scale) const;
  Tensor device_numbers_;    // int64 on the GPU: an AdamHyper's bytes for each of lr_scales(), in order
  int64_t staged_step_ = -1;  // the step whose numbers device_numbers_ holds
  double staged_lr_ = 0;      // and the learning rate they were staged with
};

// Adam's check of a loaded buffer: a second moment ("exp_avg_sq") must be >= 0 (else sqrt(v) is NaN).
void check_adam_state_entry(const std::string& name, const std::string& kind, const Tensor& value);

class AdamW : public Adam {
 public:
  AdamW(std::vector<ParamGroup> groups, double lr, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8)
      : Adam(std::move(groups), lr, beta1, beta2, eps, /*decoupled_weight_decay=*/true) {}
};

}  // namespace ember::optim
