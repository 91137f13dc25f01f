// Which of a GPU's two streams a piece of work goes to: the compute stream, where every op runs, or
// the copy stream, whose uploads run while the compute stream works (core/copy_stream.h orders the
// two with events). Its own header so that autograd/ops.h can name a stream without pulling the events
// (GPU plumbing) into every file that uses the ops.
#pragma once

namespace ember {

enum class GpuStream { Compute, Copy };

}  // namespace ember
