// What a checkpoint (trial snapshot, `snapshot.rs`) needs from libtorch that tch does not
// expose: the state of libtorch's C++ optimizers (SGD's momentum buffers, Adam's moments and
// step counts, RMSprop's averages) as the bytes of a libtorch archive, and back; and the state
// of a device's default random generator (dropout's masks, the loader's `randperm`), and back.
//
// Optimizers come as torch-sys's handles (`torch::optim::Optimizer*`), tensors as tch's
// (`torch::Tensor*`). Every function catches C++ exceptions and writes the message into `err`.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <torch/optim.h>
#include <torch/serialize/archive.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>

#include "shim_error.h"

namespace {
using tune_shim::guarded;

// The default generator of the CPU (`device` < 0) or of CUDA device `device`.
at::Generator generator(int device) {
  if (device < 0) return at::globalContext().defaultGenerator(c10::Device(c10::kCPU));
  return at::globalContext().defaultGenerator(
      c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(device)));
}
}  // namespace

extern "C" {

// Writes the optimizer's state (param groups and per-parameter state, parameters by their
// position) into a fresh malloc'd buffer `*out` of `*len` bytes; the caller frees it with
// `tune_free_bytes`.
int tune_optimizer_save(torch::optim::Optimizer* opt, char** out, size_t* len, char* err,
                        int err_len) {
  return guarded(err, err_len, [&] {
    torch::serialize::OutputArchive archive;
    opt->save(archive);
    std::ostringstream os;
    archive.save_to(os);
    std::string bytes = os.str();
    char* buf = static_cast<char*>(std::malloc(bytes.size() == 0 ? 1 : bytes.size()));
    if (buf == nullptr) throw std::bad_alloc();
    std::memcpy(buf, bytes.data(), bytes.size());
    *out = buf;
    *len = bytes.size();
  });
}

// Replaces the optimizer's state with the one `tune_optimizer_save` wrote, its tensors put on
// the device of the optimizer's parameters (`device` as in `generator`).
int tune_optimizer_load(torch::optim::Optimizer* opt, const char* data, size_t len, int device,
                        char* err, int err_len) {
  return guarded(err, err_len, [&] {
    torch::serialize::InputArchive archive;
    c10::Device d = device < 0 ? c10::Device(c10::kCPU)
                               : c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(device));
    archive.load_from(data, len, d);
    opt->load(archive);
  });
}

void tune_free_bytes(char* p) { std::free(p); }

// The state of the default generator of `device` (a CPU byte tensor), as a new tch handle.
int tune_rng_get_state(int device, at::Tensor** out, char* err, int err_len) {
  return guarded(err, err_len, [&] {
    at::Generator gen = generator(device);
    std::lock_guard<std::mutex> lock(gen.mutex());
    *out = new at::Tensor(gen.get_state());
  });
}

// Sets the default generator of `device` to `state` (what `tune_rng_get_state` returned).
int tune_rng_set_state(int device, at::Tensor* state, char* err, int err_len) {
  return guarded(err, err_len, [&] {
    at::Generator gen = generator(device);
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(*state);
  });
}
}
