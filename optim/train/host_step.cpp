// The step kind of a run from host arrays: one process or several ranks (optim/train/host_step.h).
#include "optim/train/host_step.h"

#include <csignal>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/ops.h"
#include "core/error.h"
#include "optim/schedule.h"
#include "optim/train/run_folder.h"

namespace ember::train {

HostStep::HostStep(nn::Module& model, optim::Optimizer& optimizer, Device device, HostDataFn data, LossFn loss_of,
                   HostStepSettings settings)
    : model_(model), optimizer_(optimizer), device_(device), data_(std::move(data)), loss_of_(std::move(loss_of)),
      settings_(std::move(settings)) {
  EMBER_CHECK(!several() || (settings_.ranks != nullptr && settings_.generator != nullptr),
              "train::HostStep: several ranks need the gradients' exchange (nn::DataParallel) and the run's generator");
}

StepResult HostStep::run(const Tensor&) {
  EMBER_CHECK(staged_.has_value(), "train step: no batch was staged");
  const HostStepData batch = data_(*staged_);
  staged_.reset();
  const int64_t ranks = several() ? settings_.world->size() : 1;
  if (ranks > 1) settings_.generator->set_batch_slice({batch.batch_rows, batch.first_row, batch.rows});
  Batch on_device;
  for (const auto& [name, array] : batch.arrays) {
    const bool ids = settings_.layout.count(name) != 0 && settings_.layout.at(name).id_bound > 0;
    on_device.emplace(name, ids || array.device() == device_ ? array : array.to(device_));
  }
  optimizer_.zero_grad();
  const Tensor loss = loss_of_(on_device);
  EMBER_CHECK(loss.defined() && loss.numel() == 1 && loss.requires_grad(), "train step: the loss must be a scalar "
              "that requires grad (the model's output, reduced), not a tensor of shape {}",
              loss.defined() ? shape_str(loss.shape()) : std::string("(undefined)"));
  // Each rank's mean weighs rows / batch_rows of the whole batch's; DataParallel averages (/ ranks).
  if (ranks > 1) (loss * (double(batch.rows) * double(ranks) / double(batch.batch_rows))).backward();
  else loss.backward();
  if (settings_.ranks != nullptr) settings_.ranks->synchronize_gradients();
  if (settings_.clip > 0) optim::clip_grad_norm_(model_.parameters(), settings_.clip);  // the norm stays on the device
  optimizer_.step();
  StepResult result{loss.detach(), std::nullopt, batch.real_tokens, batch.padded_tokens};
  if (ranks > 1) {  // the whole batch's loss and tokens, for the log; and any rank's signal
    Tensor sums = from_vector(std::vector<double>{loss.item<double>() * double(batch.rows),
                                                  double(batch.real_tokens), double(StopSignals::received())});
    settings_.world->all_reduce(sums, distributed::ReduceOp::Sum);
    const std::vector<double> totals = sums.to_vector<double>();
    result.whole_batch_loss = totals[0] / double(batch.batch_rows);
    result.real_tokens = int64_t(totals[1]);
    if (totals[2] > 0) agreed_signal_ = StopSignals::received() != 0 ? StopSignals::received() : SIGTERM;
  }
  return result;
}

int HostStep::stop_signal() const { return several() ? agreed_signal_ : StopSignals::received(); }

}  // namespace ember::train
