// Fibers (see fiber.h): stacks, and the context switch.
#include "fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace ember_emu {

namespace {
// 256 KiB each: a kernel's frames are small, but an exception thrown inside one (the emulator's
// own checks) unwinds on this stack too. Pages are only backed once touched.
constexpr size_t kStackSize = 256 * 1024;

struct StackPool {
  std::vector<Stack*> free;
  ~StackPool() {
    for (Stack* s : free) {
      munmap(static_cast<char*>(s->base) - sysconf(_SC_PAGESIZE), s->size + size_t(sysconf(_SC_PAGESIZE)));
      delete s;
    }
  }
};
thread_local StackPool pool;
}  // namespace

Stack* acquire_stack() {
  if (!pool.free.empty()) {
    Stack* s = pool.free.back();
    pool.free.pop_back();
    return s;
  }
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  void* mem = mmap(nullptr, kStackSize + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) {
    std::fprintf(stderr, "CUDA emulator: cannot map a fiber stack\n");
    std::abort();
  }
  mprotect(mem, page, PROT_NONE);  // the guard page
  // Stacks of the same size and alignment would put every fiber's top frame in the same cache
  // sets; starting each one a different number of cache lines below its top spreads them out.
  static thread_local size_t serial = 0;
  const size_t color = (serial % 61) * 64 + (serial % 7) * 4096;
  ++serial;
  return new Stack{static_cast<char*>(mem) + page, kStackSize, color};
}

void release_stack(Stack* stack) { pool.free.push_back(stack); }

#ifdef EMBER_EMU_USE_UCONTEXT

namespace {
// makecontext passes int arguments only: the pointers travel split in two halves.
void ucontext_entry(unsigned fn_hi, unsigned fn_lo, unsigned arg_hi, unsigned arg_lo) {
  auto fn = reinterpret_cast<void (*)(void*)>((uintptr_t(fn_hi) << 32) | fn_lo);
  void* arg = reinterpret_cast<void*>((uintptr_t(arg_hi) << 32) | arg_lo);
  fn(arg);
}
}  // namespace

void Fiber::start(void (*fn)(void*), void* arg, Stack* stack) {
  getcontext(&context_);
  context_.uc_stack.ss_sp = stack->base;
  context_.uc_stack.ss_size = stack->size - stack->color;
  context_.uc_link = nullptr;
  const uintptr_t f = reinterpret_cast<uintptr_t>(fn), a = reinterpret_cast<uintptr_t>(arg);
  makecontext(&context_, reinterpret_cast<void (*)()>(ucontext_entry), 4, unsigned(f >> 32), unsigned(f),
              unsigned(a >> 32), unsigned(a));
}
void Fiber::jump(Fiber& from, Fiber& to) { swapcontext(&from.context_, &to.context_); }

#else  // x86-64, System V ABI

// ember_emu_switch(save, to): pushes the callee-saved registers on the current stack, stores the
// stack pointer in *save, loads `to` as the stack pointer and pops the same from there, then pops
// the other context's return address and jumps there.
// NOTE: `pop; jmp`, not `ret`: a `ret` here never returns where the CPU's return-stack predictor
// expects (the call came from the other stack), a misprediction at every switch; the indirect jump
// is predicted from its history instead (the warp kernels of the recipe's step ran 35% faster). (The floating-point control words are not switched: no
// kernel changes them.)
// A new fiber's stack is laid out (fiber_frame below) as if it had been switched away from just
// before ember_emu_fiber_start, with the function in r12 and its argument in rbx.
asm(R"(
  .text
  .globl ember_emu_switch
  .type ember_emu_switch, @function
ember_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  popq %rax
  jmp *%rax
  .size ember_emu_switch, .-ember_emu_switch

  .globl ember_emu_fiber_start
  .type ember_emu_fiber_start, @function
ember_emu_fiber_start:
  movq %rbx, %rdi
  callq *%r12
  ud2
  .size ember_emu_fiber_start, .-ember_emu_fiber_start
)");
extern "C" void ember_emu_switch(void** save, void* to);
extern "C" void ember_emu_fiber_start();

void Fiber::start(void (*fn)(void*), void* arg, Stack* stack) {
  // The top of the stack, 16-byte aligned; ember_emu_fiber_start begins with rsp = top - 16 (so
  // that its call leaves the callee the alignment the ABI promises).
  uintptr_t top = (reinterpret_cast<uintptr_t>(stack->base) + stack->size) & ~uintptr_t(15);
  top -= stack->color;
  auto* frame = reinterpret_cast<uint64_t*>(top - 16 - 7 * 8);
  frame[0] = 0;                                    // r15
  frame[1] = 0;                                    // r14
  frame[2] = 0;                                    // r13
  frame[3] = reinterpret_cast<uint64_t>(fn);       // r12
  frame[4] = reinterpret_cast<uint64_t>(arg);      // rbx
  frame[5] = 0;                                    // rbp
  frame[6] = reinterpret_cast<uint64_t>(&ember_emu_fiber_start);  // where the first switch "returns"
  sp_ = frame;
}
void Fiber::jump(Fiber& from, Fiber& to) { ember_emu_switch(&from.sp_, to.sp_); }

#endif

}  // namespace ember_emu
