// Grad mode: whether ops record history. NoGradGuard turns recording off for a scope.
#pragma once

namespace ember {

bool grad_enabled();
void set_grad_enabled(bool enabled);

// Inside its scope nothing is recorded (inference, optimiser updates, backward formulas).
class NoGradGuard {
 public:
  NoGradGuard() : previous_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace ember
