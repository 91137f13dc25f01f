// Random numbers: a seeded, counter-based generator, so the same seed gives the same numbers
// whatever the thread count (and, later, on any device).
#pragma once
#include <cmath>
#include <cstdint>

#include "core/hd.h"

namespace ember {

// The i-th 64 random bits of the stream `seed`: splitmix64 of (seed, i). Pure, so any thread
// (or GPU lane) can compute any element without a shared state.
EMBER_HD inline uint64_t random_bits(uint64_t seed, uint64_t index) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + index * 0xD1B54A32D192ED03ull + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z = (z ^ (z >> 31));
  // A second round decorrelates neighbouring indices of nearby seeds.
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, 1) with 53 random bits.
EMBER_HD inline double random_uniform(uint64_t seed, uint64_t index) {
  return double(random_bits(seed, index) >> 11) * 0x1.0p-53;
}

// Element i of a draw whose range starts at `first`: uniform in [low, high), and normal (Box-Muller
// on the two uniforms 2i and 2i + 1 of the range; 1 - u keeps the log finite). The CPU's
// uniform_ / normal_ and the GPU's fill kernel (cuda/random_kernels.cu) compute these same numbers.
EMBER_HD inline double uniform_element(uint64_t seed, uint64_t first, uint64_t i, double low, double high) {
  return low + (high - low) * random_uniform(seed, first + i);
}
EMBER_HD inline double normal_element(uint64_t seed, uint64_t first, uint64_t i, double mean, double std) {
  const double u1 = 1.0 - random_uniform(seed, first + 2 * i);  // (0, 1]
  const double u2 = random_uniform(seed, first + 2 * i + 1);
  return mean + std * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

// Data parallelism: this process computes rows [first_row, first_row + rows) of a batch of
// batch_rows (nn/data_parallel.h). An op that draws per example (dropout) then takes the range of
// the whole batch from the generator, as one process would, and uses its own rows' part of it:
// every draw depends on the example, not on the rank, and every rank's generator stays in step.
struct BatchSlice {
  int64_t batch_rows = 0;  // 0: the whole batch is here (no slicing)
  int64_t first_row = 0;
  int64_t rows = 0;
};

// A generator is a seed plus a counter of numbers handed out; each op takes a fresh range.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) { seed_ = seed; offset_ = offset; }
  // Reserves `count` numbers: returns the first index of the range.
  uint64_t take(uint64_t count) { uint64_t first = offset_; offset_ += count; return first; }

  const BatchSlice& batch_slice() const { return slice_; }
  void set_batch_slice(const BatchSlice& slice) { slice_ = slice; }

  // A CUDA graph's step (optim/train/graph_step.h): dropout's GPU kernels read the seed and the
  // offset the step starts at from `state` (device memory, 2 numbers), which the caller rewrites
  // before each replay; `step_offset` is the offset() that state holds for the step being recorded.
  // The numbers drawn are the same as without it. Null: the seed and offsets are kernel arguments.
  void set_device_state(const uint64_t* state, uint64_t step_offset) {
    device_state_ = state;
    step_offset_ = step_offset;
  }
  const uint64_t* device_state() const { return device_state_; }
  uint64_t device_step_offset() const { return step_offset_; }

  // A CUDA graph's capture of a step that has just run eagerly (its warm-up) runs the step's host side
  // once more, and that must draw the numbers the step drew, not new ones: while a Redraw lives the
  // generator hands out numbers from `first` (the offset the step started at) again, and when it
  // ends the generator is back where it was (the step's numbers taken once), whether or not the
  // capture succeeded.
  class Redraw {
   public:
    Redraw(Generator& gen, uint64_t first) : gen_(gen), end_(gen.offset_) { gen.offset_ = first; }
    ~Redraw() { gen_.offset_ = end_; }
    Redraw(const Redraw&) = delete;
    Redraw& operator=(const Redraw&) = delete;

   private:
    Generator& gen_;
    uint64_t end_;
  };

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
  BatchSlice slice_;
  const uint64_t* device_state_ = nullptr;
  uint64_t step_offset_ = 0;
};

// The generator used when none is passed (seed 0 until manual_seed).
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace ember
