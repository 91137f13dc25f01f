// Fibers: the CUDA threads of one block, each a function running on its own small stack, switched
// in user space (no OS threads, no locks). The emulator's scheduler (launch.cpp) runs the fibers in
// turn; a fiber runs until it reaches __syncthreads() or a warp collective (it switches to the next
// fiber of the round, or back to the scheduler) or ends. That is all a barrier needs: the waiting
// fibers are resumed only once every thread of the block has arrived.
//
// The switch saves and restores only what the C++ ABI says a called function must preserve (on
// x86-64: rsp, rbp, rbx, r12-r15; not the x87 / SSE control words, which no kernel changes), in a
// dozen instructions of assembly (fiber.cpp). Elsewhere, or with -DEMBER_EMU_UCONTEXT, POSIX ucontext
// (makecontext / swapcontext) does the same, more slowly: glibc's swapcontext also saves the
// signal mask, a system call per switch (measured: docs/results.md, "The emulator's speed").
#pragma once
#include <cstddef>

#if !defined(__x86_64__) || defined(EMBER_EMU_UCONTEXT)
#define EMBER_EMU_USE_UCONTEXT 1
#include <ucontext.h>
#endif

namespace ember_emu {

// A stack with a guard page below it (an overflow faults instead of corrupting another stack).
struct Stack {
  void* base = nullptr;  // the lowest usable byte
  size_t size = 0;
  size_t color = 0;      // bytes left unused at the top (see acquire_stack)
};
Stack* acquire_stack();          // from a per-thread pool, or freshly mapped
void release_stack(Stack* stack);

class Fiber {
 public:
  // Prepares fn(arg) to run on `stack` at the first switch to this fiber. fn must never return:
  // it ends by switching away for good.
  void start(void (*fn)(void*), void* arg, Stack* stack);
  // Saves the running context into `from` (the fiber running now, or a Fiber that stands for the
  // scheduler's own stack, never started) and continues `to` where it last switched away (or from
  // its start). Returns when something switches back to `from`.
  static void jump(Fiber& from, Fiber& to);

 private:
#ifdef EMBER_EMU_USE_UCONTEXT
  ucontext_t context_;
#else
  void* sp_ = nullptr;  // the saved stack pointer
#endif
};

}  // namespace ember_emu
