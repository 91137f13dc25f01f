// The world: reading the launcher's environment, MPI when launched, else a group of one.
#include "core/distributed/world.h"

#include <cstdlib>
#include <functional>
#include <memory>
#include <string>

#include "core/distributed/mpi.h"
#include "core/error.h"

namespace ember::distributed {
namespace {

bool env_int(const char* name, int* value) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return false;
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (*end != '\0' || v < 0 || v > 1 << 24) return false;
  *value = int(v);
  return true;
}

// One process: every collective leaves its tensors as they are (a sum or average over one rank).
class SingleProcessGroup final : public ProcessGroup {
 public:
  explicit SingleProcessGroup(Device device) : device_(device) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "single"; }
  Device device() const override { return device_; }
  void start_all_reduce(Tensor, ReduceOp, std::function<void()> then) override {
    if (then) then();
  }
  void wait_all() override {}

 protected:
  void do_all_reduce(Tensor&, ReduceOp) override {}
  void do_broadcast(Tensor&, int) override {}
  void do_all_gather(const Tensor& in, Tensor& out) override { out.copy_(in.view(out.shape())); }
  void do_reduce_scatter(const Tensor& in, Tensor& out, ReduceOp) override { out.copy_(in.view(out.shape())); }
  void do_barrier() override {}

 private:
  Device device_;
};

}  // namespace

LaunchInfo launch_info() {
  LaunchInfo info;
  int value = 0;
  if (env_int("OMPI_COMM_WORLD_SIZE", &value)) {
    info = {true, 0, value, 0, 1, "mpirun"};
    env_int("OMPI_COMM_WORLD_RANK", &info.rank);
    env_int("OMPI_COMM_WORLD_LOCAL_RANK", &info.local_rank);
    env_int("OMPI_COMM_WORLD_LOCAL_SIZE", &info.local_size);
  } else if (env_int("PMIX_RANK", &value) || env_int("PMI_RANK", &value)) {
    info = {true, value, 0, 0, 1, "pmi"};  // size 0: not told
    env_int("PMI_SIZE", &info.size);
    env_int("MPI_LOCALRANKID", &info.local_rank);
    env_int("MPI_LOCALNRANKS", &info.local_size);
  } else if (env_int("SLURM_PROCID", &value) && env_int("SLURM_STEP_NUM_TASKS", &info.size) && info.size > 1) {
    // An srun step of several tasks without an MPI plugin: MPI would see each process alone (and
    // each would train alone); init_world() says so. (A batch script itself is no such step.)
    info.launched = true;
    info.rank = value;
    info.launcher = "srun";
    env_int("SLURM_LOCALID", &info.local_rank);
    env_int("SLURM_NTASKS_PER_NODE", &info.local_size);
  }
  return info;
}

double default_timeout_seconds() {
  if (const char* text = std::getenv("EMBER_DIST_TIMEOUT")) {
    char* end = nullptr;
    double value = std::strtod(text, &end);
    EMBER_CHECK(end != text && *end == '\0' && value >= 0, "EMBER_DIST_TIMEOUT='{}': expected seconds (>= 0)", text);
    return value;
  }
  return 300;
}

std::unique_ptr<ProcessGroup> make_single_process_group(Device device) {
  return std::make_unique<SingleProcessGroup>(device);
}

std::unique_ptr<ProcessGroup> init_world(double timeout_seconds) {
  LaunchInfo info = launch_info();
  if (!info.launched) return make_single_process_group();
  if (!built_with_mpi())
    fail("this process was started by {} as rank {} of {}, but this Ember was built without MPI: install Open MPI "
         "(apt-get install libopenmpi-dev openmpi-bin, or scripts/setup.sh) and configure the build again (README, "
         "'Training on several processes')", info.launcher, info.rank, info.size);
  std::unique_ptr<ProcessGroup> world = make_mpi_world(timeout_seconds);
  if (info.size > 0 && world->size() != info.size)
    world->abort_job(fmt::format("ember: {} started {} processes, but MPI sees {} in this job (rank {}): MPI cannot "
                                 "reach the launcher (with Slurm: srun --mpi=pmix)", info.launcher, info.size,
                                 world->size(), world->rank()));
  return world;
}

}  // namespace ember::distributed
