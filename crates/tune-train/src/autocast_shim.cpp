// The few calls of libtorch's autocast API that tch 0.26 does not expose: `tch::autocast` is
// CUDA-only, and on CUDA it uses a deprecated form. The state is thread-local in libtorch, so
// these must be called on the thread that trains. Every function catches C++ exceptions:
// one must never unwind into Rust.
#include <ATen/autocast_mode.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

namespace {
c10::DeviceType device_type(int device) { return device == 1 ? c10::DeviceType::CUDA : c10::DeviceType::CPU; }
c10::ScalarType scalar_type(int dtype) { return dtype == 1 ? c10::ScalarType::Half : c10::ScalarType::BFloat16; }
int dtype_code(c10::ScalarType t) {
  if (t == c10::ScalarType::Half) return 1;
  if (t == c10::ScalarType::BFloat16) return 0;
  return 2;
}
}  // namespace

extern "C" {

// Enters an autocast region on `device` (0 = CPU, 1 = CUDA) computing in `dtype`
// (0 = bfloat16, 1 = float16). Writes the previous state to `prev_enabled` / `prev_dtype`
// for `tune_autocast_exit`. Returns 0 on success.
int tune_autocast_enter(int device, int dtype, int* prev_enabled, int* prev_dtype) {
  try {
    auto dev = device_type(device);
    *prev_enabled = at::autocast::is_autocast_enabled(dev) ? 1 : 0;
    *prev_dtype = dtype_code(at::autocast::get_autocast_dtype(dev));
    at::autocast::set_autocast_enabled(dev, true);
    at::autocast::set_autocast_dtype(dev, scalar_type(dtype));
    at::autocast::increment_nesting();
    return 0;
  } catch (...) {
    return 1;
  }
}

// Leaves the region entered last, restoring the previous state; the cast-weight cache is
// cleared when the outermost region ends, as torch.autocast does.
int tune_autocast_exit(int device, int prev_enabled, int prev_dtype) {
  try {
    auto dev = device_type(device);
    if (at::autocast::decrement_nesting() == 0) {
      at::autocast::clear_cache();
    }
    at::autocast::set_autocast_enabled(dev, prev_enabled != 0);
    if (prev_dtype == 0 || prev_dtype == 1) {
      at::autocast::set_autocast_dtype(dev, scalar_type(prev_dtype));
    }
    return 0;
  } catch (...) {
    return 1;
  }
}

// 1 when autocast is on for `device`, 0 when off, -1 on error.
int tune_autocast_is_enabled(int device) {
  try {
    return at::autocast::is_autocast_enabled(device_type(device)) ? 1 : 0;
  } catch (...) {
    return -1;
  }
}
}
