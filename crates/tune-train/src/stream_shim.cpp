// What the streaming data loader needs of CUDA streams and events, which tch 0.26 does not
// expose: a stream of the loader thread's own for its host-to-device copies, an event that
// says when a batch's copy is done, and `Tensor::record_stream`, which tells the caching
// allocator that a batch copied on the loader's stream is used on the training stream (without
// it, the allocator could hand the batch's memory to the next copy while a training kernel
// still reads it).
//
// Everything goes through c10's device-generic interfaces (DeviceGuardImplInterface,
// c10::Event), so this compiles against the headers of any libtorch, CPU or CUDA, without the
// CUDA toolkit. Without CUDA the guard lookup throws; every function catches C++ exceptions
// and writes the message into `err`: one must never unwind into Rust.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstring>
#include <memory>

#include "shim_error.h"

namespace {
using tune_shim::guarded;
using tune_shim::set_error;


// Throws "PyTorch is not linked with support for cuda devices" without CUDA.
const c10::impl::DeviceGuardImplInterface* cuda_impl() {
  return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
}

c10::Device cuda(int index) {
  return c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index));
}
}  // namespace

extern "C" {

// Makes a stream from libtorch's pool the calling thread's current stream on CUDA device
// `device` (the current stream is per thread), so the copies this thread starts run beside
// the kernels of the training thread, which stays on the default stream. 0 on success.
int tune_cuda_use_side_stream(int device, char* err, int err_len) {
  return guarded(err, err_len, [&] {
    auto* impl = cuda_impl();
    auto stream = impl->getStreamFromGlobalPool(cuda(device), /*isHighPriority=*/false);
    impl->exchangeStream(stream);
  });
}

// Records an event on the calling thread's current stream of `device`: it happens when the
// work queued there so far (a batch's copies) is done. A handle for the functions below, or
// null with the reason in `err`.
void* tune_cuda_event_record(int device, char* err, int err_len) {
  c10::Event* out = nullptr;
  guarded(err, err_len, [&] {
    auto stream = cuda_impl()->getStream(cuda(device));
    auto event = std::make_unique<c10::Event>(c10::DeviceType::CUDA);
    event->record(stream);
    out = event.release();
  });
  return out;
}

// Waits on the host until the event has happened. 0 on success.
int tune_cuda_event_synchronize(void* event, char* err, int err_len) {
  return guarded(err, err_len, [&] { static_cast<c10::Event*>(event)->synchronize(); });
}

void tune_cuda_event_free(void* event) {
  try {
    delete static_cast<c10::Event*>(event);
  } catch (...) {
  }
}

// `tensor` (tch's handle, a `torch::Tensor*`) is used on the calling thread's current stream
// of its device: the caching allocator reuses its memory only once that stream has finished
// the work queued so far. 0 on success.
int tune_cuda_record_stream(const void* tensor, char* err, int err_len) {
  return guarded(err, err_len, [&] {
    const auto& t = *static_cast<const at::Tensor*>(tensor);
    t.record_stream(cuda_impl()->getStream(t.device()));
  });
}

// `tensor.pin_memory()`: a copy of a host tensor in page-locked memory, as a new heap-allocated
// at::Tensor that tch takes over. tch's binding passes a device argument, which libtorch
// deprecates with a warning on every call (every streamed batch); this one passes none.
void* tune_pin_memory(const void* tensor, char* err, int err_len) {
  at::Tensor* out = nullptr;
  guarded(err, err_len, [&] {
    const auto& t = *static_cast<const at::Tensor*>(tensor);
    out = new at::Tensor(t.pin_memory());
  });
  return out;
}
}
