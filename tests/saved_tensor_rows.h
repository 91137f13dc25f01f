// The rows of the saved-tensor walk (tests/autograd/test_saved_tensors.cpp): for each differentiable
// op, what its backward reads. Most rows are in the walk's own list; an op's test file may write its
// op's rows next to its other tests instead, so that adding the op touches one test file:
//     SAVED_TENSOR_ROWS(my_norm) {  // its backward reads x and weight (saved), not bias
//       rows.expect("my_norm", {x, w, b}, [](In in) { return my_norm(in[0], in[1], in[2]); }, {Read::Yes, Read::Yes, Read::No});
//     }
// A file with SAVED_TENSOR_ROWS( at the start of a line is built into the emulated test program too
// (CMakeLists.txt, like a file with a DEVICE_TEST_CASE), so the walk finds its rows in both programs.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"

namespace ember::testing {

// Whether an op's backward reads a tensor (one of its inputs, or its output), on each device.
enum class Read {
  No,     // never: a change in place is free
  Yes,    // saved: a change in place is an error naming the op
  OnCpu,  // saved on the CPU; on a GPU the op reads a copy made in the forward (a change is free)
  OnGpu,  // saved on a GPU (its fused kernels' backward reads the output); not read on the CPU
};

using In = const std::vector<Tensor>&;

struct SavedCase {
  std::string op;              // the node's name, which the error gives: "backward of <op>"
  std::vector<Tensor> inputs;  // CPU tensors; the floating ones require grad (copied to the device first)
  std::function<Tensor(const std::vector<Tensor>&)> f;
  std::vector<Read> reads;    // per input
  Read output = Read::No;     // whether the backward reads the op's output
  std::vector<size_t> frozen;  // floating inputs that do not require grad (the others do)
};

// The rows for one device: expect(op, inputs, f, what the backward reads of each input[, of the output,
// the frozen inputs]).
struct SavedRows {
  Device device;
  std::vector<SavedCase> cases;
  void expect(std::string op, std::vector<Tensor> inputs, std::function<Tensor(In)> f, std::vector<Read> reads,
              Read output = Read::No, std::vector<size_t> frozen = {}) {
    cases.push_back({std::move(op), std::move(inputs), std::move(f), std::move(reads), output, std::move(frozen)});
  }
};

// The functions that SAVED_TENSOR_ROWS registers, called by the walk for each device.
using SavedRowsFunction = void (*)(SavedRows&);
inline std::vector<SavedRowsFunction>& registered_saved_rows() {
  static std::vector<SavedRowsFunction> functions;
  return functions;
}
struct SavedRowsRegistration {
  explicit SavedRowsRegistration(SavedRowsFunction f) { registered_saved_rows().push_back(f); }
};

}  // namespace ember::testing

// SAVED_TENSOR_ROWS(name) { rows.expect(...); }: rows of the walk, written in an op's test file.
#define SAVED_TENSOR_ROWS(name)                                                                                    \
  static void ember_saved_rows_##name(::ember::testing::SavedRows& rows);                                         \
  static const ::ember::testing::SavedRowsRegistration ember_saved_rows_registration_##name(ember_saved_rows_##name); \
  static void ember_saved_rows_##name(::ember::testing::SavedRows& rows)
