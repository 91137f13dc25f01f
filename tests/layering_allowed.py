"""What the layering allows beyond its rules (tests/layering_test.py), each entry with its reason;
docs/architecture.md ("What the layering allows, and why") says the same. A new exception is added
here and there, or not at all.

TENSOR_METHODS_ABOVE_CORE: Tensor is declared in core/tensor.h, and its members are defined in
core/ but for these, {file: method names}. Any layer may call them: they are Tensor's interface.

ALLOWED_CALLS: (calling file, file defining what it calls, the names called (a regular expression
matched against the whole demangled name), reason). Files may be fnmatch patterns."""

TENSOR_METHODS_ABOVE_CORE = {
    # Views and copies are ops: each view records its backward (autograd/node.h) and every copy
    # reaches the CPU loops or the CUDA copies. They are Tensor's members so that x.view(...)
    # reads as in PyTorch, and are defined with the other ops.
    "autograd/ops/views.cpp": {"view", "reshape", "permute", "transpose", "narrow", "slice", "select", "expand",
                               "squeeze", "unsqueeze", "contiguous", "clone", "to", "copy_", "fill_", "add_", "mul_"},
    # Autograd's entry points: backward() walks the graph, requires_grad_() and detach() set the
    # autograd fields that the engine reads.
    "autograd/engine.cpp": {"backward", "requires_grad_", "detach"},
}

ALLOWED_CALLS = [
    ("autograd/engine.cpp", "autograd/ops/*", r"ember::operator\+\(.*",
     "the engine sums a node's incoming gradients (operator+): autograd calls an op through autograd/ops.h "
     "while the ops record with autograd/node.h, the one cycle"),
    ("autograd/gradcheck.cpp", "autograd/ops/*", r"ember::(operator\*|uniform|sum)\(.*",
     "gradcheck builds its random probe and the scalar it differentiates from ops"),
    ("optim/train/graph_*.cpp", "core/cuda_graph.cpp", r"ember::CudaGraph::.*",
     "the training layer's CUDA-graph step and evaluation: which work to capture and replay is the loop's "
     "choice (one graph per batch shape), not an op"),
    ("optim/train/graph_step.cpp", "*", r"ember::copy_bytes_across_devices\(.*",
     "the graph step copies a batch into the captured inputs on the GPU, one cudaMemcpyAsync and no "
     "kernel, which a replayed graph reads (core/device_copy.h)"),
    ("optim/train/prefetch.cpp", "core/copy_stream.cpp", r"ember::GpuEvent::.*",
     "the prefetcher uploads the next batch on the copy stream while the step runs, ordered by events"),
    ("optim/train/loop.cpp", "*", r"ember::(memory_stats|reset_peak_memory)\(.*",
     "the run reports the peak memory of the CPU and the GPU (core/allocator.h)"),
    ("*", "cuda/nccl_process_group.cpp", r"ember::distributed::(make_nccl_group|device_for_local_rank)\(.*",
     "the NCCL process group implements core/distributed/nccl.h, the process groups' interface, in a "
     "build with NCCL (core/distributed/nccl_stub.cpp otherwise): whoever may use the groups may use it"),
    ("core/cpu/cpu_allocator.cpp", "cuda/runtime.cu", r"ember::cuda_allocator\(int\)",
     "allocator_for(device) (core/allocator.h) hands out each device's allocator: a GPU's is cuda/runtime.cu's "
     "in a CUDA build (this file's stub otherwise); not a kernel calling the GPU's side"),
    ("examples/imdb/trainer.cpp", "*", r"ember::cuda_device_count\(\)",
     "the trainer checks that the GPU asked for exists before it builds anything; declared in "
     "core/device.h, it is defined with the allocator (core/cpu/cpu_allocator.cpp's stubs, cuda/runtime.cu)"),
]

# (including file, GPU plumbing header, reason): the trainer's files above that reach the plumbing.
ALLOWED_PLUMBING_INCLUDES = [
    ("optim/train/graph_step.h", "core/cuda_graph.h", "the graph step holds a CudaGraph per batch shape"),
    ("optim/train/graph_step.cpp", "core/device_copy.h", "the captured inputs' copy on the GPU"),
    ("optim/train/prefetch.h", "core/copy_stream.h", "the prefetcher holds its GpuEvents"),
    ("optim/train/loop.cpp", "core/allocator.h", "each epoch's peak memory of the CPU and the GPU (metrics.jsonl, the report)"),
    ("examples/seed_attention.cpp", "core/allocator.h",
     "the seed's train_step prints the memory allocated (memory_stats, its torch.cuda.memory_allocated())"),
]
