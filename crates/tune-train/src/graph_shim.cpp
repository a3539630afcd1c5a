// CUDA graphs of a whole training step, which tch does not bind: a thin C API over
// `at::cuda::CUDAGraph` (ATen/cuda/CUDAGraph.h), used as `torch.cuda.graph` does:
//   - warm-up steps run on a side stream from the pool (`tune_graph_enter_stream` /
//     `tune_graph_exit_stream`), so that lazy per-stream set-up (cuBLAS workspaces, the
//     optimizer's state, the autograd engine's buffers) happens before capture;
//   - the capture runs on that same non-default stream, in thread-local capture mode (a
//     loader thread that copies batches while this one captures is not refused);
//   - the step's body is a callback into Rust, run between `capture_begin` and `capture_end`.
// Only what both torch 2.11 and 2.13 declare is used: `CUDAGraph()`, `capture_begin(pool,
// mode)`, `capture_end()`, `replay()`; CUDAGraph is neither copied nor moved (2.13 deletes both).
//
// Compiled only with the crate's `cuda` feature (it needs libtorch_cuda, libc10_cuda and the
// CUDA runtime's headers). The stream guard is c10's device-generic one, which reaches the
// CUDA runtime through libc10_cuda: `c10::cuda::CUDAStreamGuard` is inline code that would
// call libcudart itself, which a wheel's torch links by a versioned name only. Every function catches C++ exceptions and writes the message into
// `err`: one must never unwind into Rust.
#include <ATen/cuda/CUDAGraph.h>
#include <c10/core/StreamGuard.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "shim_error.h"

namespace {
using tune_shim::guarded;
using tune_shim::set_error;

}  // namespace

// One captured training step and the side stream it was warmed up and captured on.
struct TuneGraph {
  c10::DeviceIndex device;
  c10::Stream stream;
  std::optional<c10::StreamGuard> on_side;
  std::unique_ptr<at::cuda::CUDAGraph> graph;
};

extern "C" {

// A graph holder for `device` with a side stream from the pool; nothing captured yet. Null on
// error (message in `err`), e.g. when this libtorch has no CUDA device.
TuneGraph* tune_graph_new(int device, char* err, int err_len) {
  TuneGraph* out = nullptr;
  guarded(err, err_len, [&] {
    auto d = static_cast<c10::DeviceIndex>(device);
    c10::Stream stream = c10::cuda::getStreamFromPool(false, d).unwrap();
    out = new TuneGraph{d, stream, std::nullopt, nullptr};
  });
  return out;
}

// Makes the side stream current on this thread, after the work queued so far on the device.
int tune_graph_enter_stream(TuneGraph* g, char* err, int err_len) {
  return guarded(err, err_len, [&] {
    if (g->on_side.has_value()) return;
    c10::cuda::device_synchronize();
    g->on_side.emplace(g->stream);
  });
}

// Restores the stream that was current before `tune_graph_enter_stream`, once the side stream's
// work has finished (the default stream must see what the warm-up steps wrote).
int tune_graph_exit_stream(TuneGraph* g, char* err, int err_len) {
  return guarded(err, err_len, [&] {
    if (!g->on_side.has_value()) return;
    c10::cuda::device_synchronize();
    g->on_side.reset();
  });
}

// Captures `body(ctx)` (0 on success; anything else abandons the capture) into the graph, on
// the side stream. Nothing runs: the captured kernels run at each `tune_graph_replay`.
// 0 on success, -1 on error (message in `err`), -2 when `body` failed (its own message is the
// caller's; the capture was ended and thrown away).
int tune_graph_capture(TuneGraph* g, int (*body)(void*), void* ctx, char* err, int err_len) {
  int body_rc = 0;
  int rc = guarded(err, err_len, [&] {
    c10::cuda::device_synchronize();
    g->on_side.reset();
    c10::StreamGuard guard(g->stream);
    auto graph = std::make_unique<at::cuda::CUDAGraph>();
    graph->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
    body_rc = body(ctx);
    if (body_rc != 0) {
      // End the capture so the stream leaves capture mode; the broken graph is dropped.
      try {
        graph->capture_end();
      } catch (...) {
      }
      return;
    }
    graph->capture_end();
    c10::cuda::device_synchronize();
    g->graph = std::move(graph);
  });
  if (rc == 0 && body_rc != 0) return -2;
  return rc;
}

// Launches the captured step on the current stream.
int tune_graph_replay(TuneGraph* g, char* err, int err_len) {
  return guarded(err, err_len, [&] {
    if (!g->graph) throw std::runtime_error("no graph was captured");
    g->graph->replay();
  });
}

void tune_graph_free(TuneGraph* g) {
  try {
    delete g;
  } catch (...) {
  }
}
}
