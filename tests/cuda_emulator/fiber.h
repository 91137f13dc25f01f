// Fibers: the CUDA threads of one block, each a function running on its own small stack, switched
// in user space (no OS threads, no locks). The emulator's scheduler (launch.cpp) resumes each
// fiber in turn; a fiber runs until it reaches __syncthreads() (it yields back to the scheduler)
// or ends. That is all a barrier needs: the scheduler resumes the waiting fibers only once every
// thread of the block has arrived.
//
// The switch saves and restores only what the C++ ABI says a called function must preserve (on
// x86-64: rsp, rbp, rbx, r12-r15; not the x87 / SSE control words, which no kernel changes), in a
// dozen instructions of assembly (fiber.cpp). Elsewhere, or with -DEMBER_EMU_UCONTEXT, POSIX ucontext
// (makecontext / swapcontext) does the same, more slowly: glibc's swapcontext also saves the
// signal mask, a system call per switch (measured in docs/cuda.md).
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
  // Prepares fn(arg) to run on `stack` at the next resume(). fn must end by calling finish().
  void start(void (*fn)(void*), void* arg, Stack* stack);
  // From the scheduler: runs the fiber until it calls yield() or finish().
  void resume();
  // From inside the fiber: back to the scheduler; resume() continues after this call.
  void yield();
  // From inside the fiber, last: back to the scheduler for good.
  [[noreturn]] void finish();

 private:
#ifdef EMBER_EMU_USE_UCONTEXT
  ucontext_t context_;
  ucontext_t scheduler_;
#else
  void* sp_ = nullptr;         // the fiber's saved stack pointer
  void* scheduler_sp_ = nullptr;
#endif
};

}  // namespace ember_emu
