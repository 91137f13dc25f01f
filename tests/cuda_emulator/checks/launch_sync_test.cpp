// The synchronising debug mode (EMBER_CUDA_SYNC=1: cuda::launch_sync) on the emulator: an eager launch
// waits for its kernel, a launch inside a CUDA graph's capture does not (a wait there is refused and
// would end the capture: bench/gpu-check.sh's rerun of a failed graphed test reported "operation not
// permitted when stream is capturing" instead of the kernel), and the captured step replays as the
// eager one. A fault after a graph's replay says that the replay is where its kernels are checked.
// Built into ember_tests_emulated only (it reads the emulator's counts).
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/cuda_graph.h"
#include "core/cuda_ops.h"
#include "counters.h"
#include "cuda/check.h"
#include "optim/optimizer.h"

using namespace ember;

namespace {

const Device kGpu = Device::cuda(0);

// launch_sync on for one scope; the setting found is put back however the scope ends.
class SyncLaunches {
 public:
  SyncLaunches() : before_(cuda::launch_sync()) { cuda::set_launch_sync(true); }
  ~SyncLaunches() { cuda::set_launch_sync(before_); }
  SyncLaunches(const SyncLaunches&) = delete;
  SyncLaunches& operator=(const SyncLaunches&) = delete;

 private:
  bool before_;
};

// One SGD step of a linear layer with gelu and a squared error: element-wise kernels, row
// reductions and GEMMs, nothing read by the host.
struct Step {
  Generator gen;
  Tensor w, b, x, target;
  optim::SGD sgd;
  Tensor loss;
  explicit Step(uint64_t seed)
      : gen(seed),
        w(uniform({6, 10}, -0.5, 0.5, gen).to(kGpu).requires_grad_()),
        b(uniform({6}, -0.1, 0.1, gen).to(kGpu).requires_grad_()),
        x(uniform({4, 10}, -1, 1, gen).to(kGpu)),
        target(uniform({4, 6}, -0.5, 0.5, gen).to(kGpu)),
        sgd({{{w, b}, 0.0}}, 0.5) {}
  void operator()() {
    sgd.zero_grad();
    Tensor d = gelu(linear(x, w, b)) - target;
    loss = mean(d * d);
    loss.backward();
    sgd.step();
  }
};

int64_t device_synchronizes(const ember_emu::Counts& c) {
  int64_t n = 0;
  for (const ember_emu::HostWait& wait : c.host_waits) n += wait.call == "cudaDeviceSynchronize";
  return n;
}

std::vector<float> host(const Tensor& t) { return t.to(Device::cpu()).to_vector<float>(); }

}  // namespace

TEST_CASE("EMBER_CUDA_SYNC: an eager launch waits for its kernel, a captured one does not, and the graph replays the eager steps") {
  // Without the debug mode: the eager losses of three steps, and no device-wide wait.
  Step eager(3);
  std::vector<std::vector<float>> eager_losses;
  ember_emu::reset_counts();
  for (int s = 0; s < 3; ++s) {
    eager();
    eager_losses.push_back(host(eager.loss));
  }
  CHECK(device_synchronizes(ember_emu::counts()) == 0);

  SyncLaunches sync;
  REQUIRE(cuda::launch_sync());
  Step graphed(3);
  ember_emu::reset_counts();
  graphed();  // eager, the capture's warm-up: every kernel launch waits
  const ember_emu::Counts warm_up = ember_emu::counts();
  INFO(ember_emu::describe(warm_up));
  CHECK(warm_up.kernel_launches > 5);
  CHECK(device_synchronizes(warm_up) == warm_up.kernel_launches);  // each kernel's (not cuBLAS's) launch
  CHECK(host(graphed.loss) == eager_losses[0]);

  // The capture: the same launches, none waited for; before, the first one's wait ended the capture.
  CudaGraph graph;
  ember_emu::reset_counts();
  std::string error;
  try {
    graph.capture(kGpu, [&] { graphed(); });
  } catch (const std::exception& e) {
    error = e.what();
  }
  CHECK(error == "");
  REQUIRE(graph.captured());
  CHECK(device_synchronizes(ember_emu::counts()) == 0);

  const Tensor loss = graphed.loss;  // rewritten in place by every replay
  for (int s = 1; s < 3; ++s) {
    graph.replay();
    CHECK(host(loss) == eager_losses[size_t(s)]);
  }
  CHECK(host(graphed.w) == host(eager.w));
  CHECK(host(graphed.b) == host(eager.b));
}

TEST_CASE("EMBER_CUDA_SYNC: a kernel's fault after a graph's replay says the graph's kernels are checked there") {
  auto message_of = [](const char* last_launch) {
    cuda::note_launch(last_launch);
    try {
      cuda::raise_cuda_error(700, "an illegal memory access was encountered", "cudaStreamSynchronize(stream)",
                             "runtime.cu", 1);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error raised");
  };
  const std::string after_replay = message_of(cuda::kGraphReplayLaunch);
  CHECK(after_replay.find("a GPU kernel failed: an illegal memory access was encountered") != std::string::npos);
  CHECK(after_replay.find("rerun with EMBER_CUDA_SYNC=1") != std::string::npos);
  CHECK(after_replay.find("a captured kernel is checked at the replay") != std::string::npos);
  CHECK(after_replay.find("--cuda-graph off") != std::string::npos);
  const std::string after_kernel = message_of("gelu_kernel");
  CHECK(after_kernel.find("newest first: gelu_kernel, " + std::string(cuda::kGraphReplayLaunch)) != std::string::npos);
  CHECK(after_kernel.find("rerun with EMBER_CUDA_SYNC=1") != std::string::npos);
  CHECK(after_kernel.find("checked at the replay") == std::string::npos);
}
