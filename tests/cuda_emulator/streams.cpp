// Streams, events and graphs for the CPU emulator, with a GPU's ordering rules.
//
// A created stream is a queue. Work asked of it (a kernel launch, a copy, a memset, a cuBLAS or
// cuDNN call: launch.cpp, memory.cpp, ...) is checked and made into a function at the call, then
// queued; it runs only when something needs it done:
//   - a synchronising call: cudaStreamSynchronize, cudaEventSynchronize, cudaDeviceSynchronize, a
//     synchronous cudaMemcpy, cudaFree, cudaFreeHost (these run the queues up to what they wait for);
//   - another stream reaching a cudaStreamWaitEvent on an event recorded after it (that stream's
//     queue runs first up to the event's place);
//   - cudaEventQuery on a pending event: it answers cudaErrorNotReady and the GPU makes progress
//     (the event's stream runs up to it), so a host that polls does not spin forever;
//   - a queue longer than kMaxQueued items (the GPU catches up).
// Running work early is always one of a GPU's possible orders; running it late is what shows
// mistakes: host code that reads a copy's result before the call that completes it reads the old
// bytes (or, with EMBER_EMULATOR_PROTECT=1, faults: pinned.cpp), and a stream that reads another's
// result without waiting on an event reads it before it is written.
// The legacy default stream (null) runs its work at the call, after the pending work of every
// blocking stream (cudaStreamDefault; cudaStreamNonBlocking streams do not synchronise with it),
// so code that uses no stream of its own sees work done at once, and its errors at the launch.
// Errors of queued work are reported by the call that runs it (a synchronisation returns it), as a
// GPU's asynchronous errors are.
//
// Capture (cudaStreamBeginCapture): the stream's work is appended to a graph instead of queued;
// another stream that waits on an event recorded in the capture joins it. Refused while any stream
// captures, as in cudaStreamCaptureModeGlobal: host waits, cudaMalloc / cudaFree / pinned
// allocations (cudaErrorStreamCaptureUnsupported), work on the legacy stream
// (cudaErrorStreamCaptureImplicit), a wait on an event recorded outside the capture
// (cudaErrorStreamCaptureIsolation); each also invalidates the capture, so cudaStreamEndCapture
// returns cudaErrorStreamCaptureInvalidated. A graph's nodes run in capture order (a valid order:
// every dependency was made before the work that needs it); a graph launch is one queued item.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "counters.h"
#include "state.h"

struct CUgraph_st {
  std::vector<ember_emu::Work> nodes;  // in capture order
  bool invalid = false;
  std::string why;  // what invalidated it
};

struct CUgraphExec_st {
  std::shared_ptr<const std::vector<ember_emu::Work>> nodes;
};

struct CUstream_st {
  struct Item {
    uint64_t seq;
    ember_emu::Work work;
  };
  bool blocking = true;  // synchronises with the legacy stream
  bool destroyed = false;
  std::deque<Item> queue;
  uint64_t queued = 0;  // seq of the last item queued
  uint64_t done = 0;    // seq of the last item run
  CUgraph_st* capture = nullptr;
  bool capture_origin = false;  // cudaStreamBeginCapture was called on it
};

struct CUevent_st {
  CUstream_st* stream = nullptr;  // where it was last recorded (null: never)
  uint64_t seq = 0;               // complete once stream->done >= seq
  CUgraph_st* captured = nullptr; // recorded inside this capture
  bool destroyed = false;
};

namespace ember_emu {
namespace {

constexpr size_t kMaxQueued = 4096;

// One lock for every queue; work runs under it (a kernel never queues work, so it is not taken twice
// by the work itself; recursive for the waits that run other streams).
std::recursive_mutex mutex;
CUstream_st legacy;                 // the null stream: runs at the call
std::set<CUstream_st*> streams;     // live created streams
std::set<CUevent_st*> events;       // live events
std::set<CUgraph_st*> graphs;
std::set<CUgraphExec_st*> execs;
int captures = 0;                   // streams capturing (origins)
// The first error of queued work that ran after its call (a kernel that failed, say), kept until a
// synchronising call or cudaEventQuery returns it, as a GPU reports an asynchronous error.
cudaError_t deferred = cudaSuccess;
std::string deferred_text;

CUstream_st* resolve(cudaStream_t stream) { return stream == nullptr ? &legacy : stream; }

bool live_stream(cudaStream_t stream) { return stream == nullptr || streams.count(stream) > 0; }
bool live_event(cudaEvent_t event) { return events.count(event) > 0; }

// Runs the stream's queue up to `seq` (inclusive). The first error.
cudaError_t run_until(CUstream_st* s, uint64_t seq) {
  cudaError_t first = cudaSuccess;
  while (!s->queue.empty() && s->queue.front().seq <= seq) {
    CUstream_st::Item item = std::move(s->queue.front());
    s->queue.pop_front();
    const cudaError_t e = item.work();
    s->done = item.seq;
    if (e != cudaSuccess && first == cudaSuccess) first = e;
    if (e != cudaSuccess && deferred == cudaSuccess) deferred = e, deferred_text = cudaGetErrorString(e);
  }
  return first;
}

// What a synchronising call returns: the deferred error (reported once, and the last error again),
// else cudaSuccess.
cudaError_t report(cudaError_t) {
  if (deferred == cudaSuccess) return cudaSuccess;
  const cudaError_t e = deferred;
  deferred = cudaSuccess;
  return restore_error(e, deferred_text);
}

cudaError_t run_all(CUstream_st* s) { return run_until(s, s->queued); }

// Every created stream (only the blocking ones: what the legacy stream waits for).
cudaError_t run_streams(bool blocking_only) {
  cudaError_t first = cudaSuccess;
  for (CUstream_st* s : streams) {
    if (blocking_only && !s->blocking) continue;
    const cudaError_t e = run_all(s);
    if (e != cudaSuccess && first == cudaSuccess) first = e;
  }
  return first;
}

void invalidate_captures(const std::string& why) {
  for (CUgraph_st* g : graphs)
    if (!g->invalid) {
      bool active = false;
      for (CUstream_st* s : streams) active = active || s->capture == g;
      if (active) g->invalid = true, g->why = why;
    }
}

cudaError_t capture_error(cudaError_t code, const std::string& what) {
  invalidate_captures(what);
  return set_error(code, what + " while a stream is capturing (the capture is invalidated)");
}

// A graph's nodes, one after another; the first error.
cudaError_t run_nodes(const std::vector<Work>& nodes) {
  cudaError_t first = cudaSuccess;
  for (const Work& w : nodes) {
    const cudaError_t e = w();
    if (e != cudaSuccess && first == cudaSuccess) first = e;
  }
  return first;
}

}  // namespace

bool stream_is_valid(cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(mutex);
  return live_stream(stream);
}

bool stream_capturing(cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(mutex);
  return live_stream(stream) && resolve(stream)->capture != nullptr;
}

cudaError_t refuse_in_capture(const char* call) {
  std::lock_guard<std::recursive_mutex> lock(mutex);
  if (captures == 0) return cudaSuccess;
  return capture_error(cudaErrorStreamCaptureUnsupported, std::string(call) + " (it may make the host wait)");
}

cudaError_t enqueue(cudaStream_t stream, Work work) {
  std::lock_guard<std::recursive_mutex> lock(mutex);
  if (!live_stream(stream)) return set_error(cudaErrorInvalidResourceHandle, "the stream is not one cudaStreamCreate made (or it was destroyed)");
  CUstream_st* s = resolve(stream);
  if (s->capture != nullptr) {
    s->capture->nodes.push_back(std::move(work));
    return cudaSuccess;
  }
  if (s == &legacy) {  // at the call: its error is the call's (a kernel's, at its launch)
    if (captures > 0) return capture_error(cudaErrorStreamCaptureImplicit, "work on the legacy default stream");
    run_streams(true);
    return work();
  }
  s->queue.push_back(CUstream_st::Item{++s->queued, std::move(work)});
  if (s->queue.size() > kMaxQueued) return run_all(s);
  return cudaSuccess;
}

cudaError_t catch_up(cudaStream_t stream, bool whole_device) {
  std::lock_guard<std::recursive_mutex> lock(mutex);
  if (!live_stream(stream)) return cudaErrorInvalidResourceHandle;
  if (whole_device) return report(run_streams(false));
  if (stream == nullptr) return report(run_streams(true));
  return report(run_all(stream));
}

}  // namespace ember_emu

using namespace ember_emu;

cudaError_t cudaDeviceSynchronize() {
  if (const cudaError_t broken = device_broken()) return broken;  // after a kernel fault (state.h)
  std::lock_guard<std::recursive_mutex> lock(mutex);
  if (refuse_in_capture("cudaDeviceSynchronize") != cudaSuccess) return cudaErrorStreamCaptureUnsupported;
  return report(run_streams(false));
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  if (stream == nullptr || flags > cudaStreamNonBlocking)
    return set_error(cudaErrorInvalidValue, "cudaStreamCreateWithFlags: bad arguments");
  if (device_count() == 0) return set_error(cudaErrorNoDevice, "EMBER_EMULATED_DEVICES=0");
  auto* s = new CUstream_st;
  s->blocking = (flags & cudaStreamNonBlocking) == 0;
  std::lock_guard<std::recursive_mutex> lock(mutex);
  streams.insert(s);
  *stream = s;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(mutex);
  if (stream == nullptr || streams.count(stream) == 0)
    return set_error(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: unknown stream");
  // Its queued work still runs, as on a GPU: now (early is a valid order).
  run_all(stream);
  streams.erase(stream);
  stream->destroyed = true;  // NOTE: kept, not freed: a queued wait of another stream may name it
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (const cudaError_t broken = device_broken()) return broken;  // after a kernel fault (state.h)
  std::lock_guard<std::recursive_mutex> lock(mutex);
  if (!live_stream(stream)) return set_error(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize: unknown stream");
  if (refuse_in_capture("cudaStreamSynchronize") != cudaSuccess) return cudaErrorStreamCaptureUnsupported;
  if (stream == nullptr) return report(run_streams(true));
  return report(run_all(stream));
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(mutex);
  if (!live_stream(stream)) return set_error(cudaErrorInvalidResourceHandle, "cudaStreamQuery: unknown stream");
  CUstream_st* s = resolve(stream);
  if (s->queue.empty()) return report(cudaSuccess);
  run_all(s);  // progress, as in cudaEventQuery
  if (deferred != cudaSuccess) return report(cudaSuccess);
  return set_error(cudaErrorNotReady, "cudaStreamQuery: work is queued on the stream");
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  if (event == nullptr || (flags & ~cudaEventDisableTiming) != 0)
    return set_error(cudaErrorInvalidValue, "cudaEventCreateWithFlags: bad arguments");
  if (device_count() == 0) return set_error(cudaErrorNoDevice, "EMBER_EMULATED_DEVICES=0");
  std::lock_guard<std::recursive_mutex> lock(mutex);
  *event = new CUevent_st;
  events.insert(*event);
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (const cudaError_t broken = device_broken()) return broken;  // after a kernel fault (state.h)
  std::lock_guard<std::recursive_mutex> lock(mutex);
  if (events.erase(event) == 0) return set_error(cudaErrorInvalidResourceHandle, "cudaEventDestroy: unknown event");
  delete event;  // waits queued on it hold its stream and place, not the event
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (const cudaError_t broken = device_broken()) return broken;  // after a kernel fault (state.h)
  std::lock_guard<std::recursive_mutex> lock(mutex);
  if (!live_event(event)) return set_error(cudaErrorInvalidResourceHandle, "cudaEventRecord: unknown event");
  if (!live_stream(stream)) return set_error(cudaErrorInvalidResourceHandle, "cudaEventRecord: unknown stream");
  CUstream_st* s = resolve(stream);
  if (s == &legacy && captures > 0) return capture_error(cudaErrorStreamCaptureImplicit, "cudaEventRecord on the legacy default stream");
  if (s == &legacy) run_streams(true);
  if (s->capture == nullptr) note_call(Call::kEventRecord);
  event->stream = s;
  event->seq = s->queued;  // after everything queued so far
  event->captured = s->capture;
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (const cudaError_t broken = device_broken()) return broken;  // after a kernel fault (state.h)
  std::lock_guard<std::recursive_mutex> lock(mutex);
  if (!live_event(event)) return set_error(cudaErrorInvalidResourceHandle, "cudaEventQuery: unknown event");
  if (event->captured != nullptr)
    return set_error(cudaErrorStreamCaptureUnsupported, "cudaEventQuery: the event was recorded inside a capture");
  if (event->stream == nullptr || event->stream->done >= event->seq) return report(cudaSuccess);
  run_until(event->stream, event->seq);  // the GPU makes progress while the host polls
  if (deferred != cudaSuccess) return report(cudaSuccess);
  return set_error(cudaErrorNotReady, "cudaEventQuery: the work before the event has not run yet");
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (const cudaError_t broken = device_broken()) return broken;  // after a kernel fault (state.h)
  std::lock_guard<std::recursive_mutex> lock(mutex);
  if (!live_event(event)) return set_error(cudaErrorInvalidResourceHandle, "cudaEventSynchronize: unknown event");
  if (refuse_in_capture("cudaEventSynchronize") != cudaSuccess) return cudaErrorStreamCaptureUnsupported;
  if (event->stream == nullptr) return report(cudaSuccess);
  return report(run_until(event->stream, event->seq));
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags) {
  if (const cudaError_t broken = device_broken()) return broken;  // after a kernel fault (state.h)
  std::lock_guard<std::recursive_mutex> lock(mutex);
  if (!live_event(event) || !live_stream(stream) || flags != 0)
    return set_error(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: unknown stream or event, or flags");
  CUstream_st* s = resolve(stream);
  if (event->captured != nullptr) {  // a fork into the capture: the stream joins it
    if (s == &legacy) return capture_error(cudaErrorStreamCaptureImplicit, "cudaStreamWaitEvent on the legacy default stream");
    if (s->capture != nullptr && s->capture != event->captured)
      return capture_error(cudaErrorStreamCaptureIsolation, "cudaStreamWaitEvent across two captures");
    s->capture = event->captured;
    return cudaSuccess;
  }
  if (s->capture != nullptr)
    return capture_error(cudaErrorStreamCaptureIsolation,
                         "cudaStreamWaitEvent in a capture on an event recorded outside it");
  note_call(Call::kStreamWait);
  if (event->stream == nullptr || event->stream->done >= event->seq) return cudaSuccess;
  CUstream_st* other = event->stream;
  const uint64_t seq = event->seq;
  if (s == &legacy) {
    if (captures > 0) return capture_error(cudaErrorStreamCaptureImplicit, "cudaStreamWaitEvent on the legacy default stream");
    run_until(other, seq);  // an error of that work is reported by the next synchronisation
    return cudaSuccess;
  }
  s->queue.push_back(CUstream_st::Item{++s->queued, [other, seq] { return run_until(other, seq); }});
  return cudaSuccess;
}

// ---- Graphs.

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  std::lock_guard<std::recursive_mutex> lock(mutex);
  if (stream == nullptr) return set_error(cudaErrorStreamCaptureUnsupported, "cudaStreamBeginCapture on the legacy default stream");
  if (!live_stream(stream)) return set_error(cudaErrorInvalidResourceHandle, "cudaStreamBeginCapture: unknown stream");
  if (mode != cudaStreamCaptureModeGlobal)
    return set_error(cudaErrorInvalidValue, "cudaStreamBeginCapture: only cudaStreamCaptureModeGlobal is emulated");
  if (stream->capture != nullptr) return set_error(cudaErrorIllegalState, "cudaStreamBeginCapture: the stream already captures");
  auto* g = new CUgraph_st;
  graphs.insert(g);
  stream->capture = g;
  stream->capture_origin = true;
  ++captures;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  std::lock_guard<std::recursive_mutex> lock(mutex);
  if (graph == nullptr || !live_stream(stream) || stream == nullptr)
    return set_error(cudaErrorInvalidValue, "cudaStreamEndCapture: bad arguments");
  *graph = nullptr;
  if (stream->capture == nullptr) return set_error(cudaErrorIllegalState, "cudaStreamEndCapture: the stream does not capture");
  if (!stream->capture_origin)
    return set_error(cudaErrorStreamCaptureUnmatched, "cudaStreamEndCapture on a stream that joined the capture, not the one that began it");
  CUgraph_st* g = stream->capture;
  for (CUstream_st* s : streams)
    if (s->capture == g) s->capture = nullptr, s->capture_origin = false;
  for (CUevent_st* e : events)
    if (e->captured == g) e->captured = nullptr, e->stream = nullptr;  // as if never recorded
  --captures;
  if (g->invalid) {
    const std::string why = g->why;
    graphs.erase(g);
    delete g;
    return set_error(cudaErrorStreamCaptureInvalidated, "cudaStreamEndCapture: the capture was invalidated by " + why);
  }
  *graph = g;
  note_call(Call::kCapture);
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  std::lock_guard<std::recursive_mutex> lock(mutex);
  if (status == nullptr || !live_stream(stream)) return set_error(cudaErrorInvalidValue, "cudaStreamIsCapturing: bad arguments");
  CUstream_st* s = resolve(stream);
  if (s == &legacy && captures > 0) return capture_error(cudaErrorStreamCaptureImplicit, "cudaStreamIsCapturing on the legacy default stream");
  *status = s->capture == nullptr ? cudaStreamCaptureStatusNone
            : s->capture->invalid ? cudaStreamCaptureStatusInvalidated
                                  : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  std::lock_guard<std::recursive_mutex> lock(mutex);
  if (exec == nullptr || graphs.count(graph) == 0 || flags != 0)
    return set_error(cudaErrorInvalidValue, "cudaGraphInstantiate: unknown graph, or flags");
  auto* e = new CUgraphExec_st;
  e->nodes = std::make_shared<const std::vector<Work>>(graph->nodes);  // independent of the graph from now on
  execs.insert(e);
  *exec = e;
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (const cudaError_t broken = device_broken()) return broken;  // after a kernel fault (state.h)
  std::shared_ptr<const std::vector<Work>> nodes;
  {
    std::lock_guard<std::recursive_mutex> lock(mutex);
    if (execs.count(exec) == 0) return set_error(cudaErrorInvalidValue, "cudaGraphLaunch: unknown graph exec");
    nodes = exec->nodes;
  }
  if (!stream_capturing(stream)) note_graph_launch(nodes->size());
  return enqueue(stream, [nodes] { return run_nodes(*nodes); });
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  std::lock_guard<std::recursive_mutex> lock(mutex);
  if (execs.erase(exec) == 0) return set_error(cudaErrorInvalidValue, "cudaGraphExecDestroy: unknown graph exec");
  delete exec;  // a queued launch of it holds its nodes
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  std::lock_guard<std::recursive_mutex> lock(mutex);
  if (graphs.count(graph) == 0) return set_error(cudaErrorInvalidValue, "cudaGraphDestroy: unknown graph");
  for (CUstream_st* s : streams)
    if (s->capture == graph) return set_error(cudaErrorIllegalState, "cudaGraphDestroy: the graph is being captured");
  graphs.erase(graph);
  delete graph;
  return cudaSuccess;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  std::lock_guard<std::recursive_mutex> lock(mutex);
  if (graphs.count(graph) == 0 || count == nullptr || nodes != nullptr)
    return set_error(cudaErrorInvalidValue, "cudaGraphGetNodes: unknown graph (the emulator gives only the count)");
  *count = graph->nodes.size();
  return cudaSuccess;
}
