// The CUDA caching allocator's few calls that tch 0.26 does not expose, through c10's
// device-generic allocator interface (c10/core/CachingDeviceAllocator.h), so this compiles
// against the headers of any libtorch, CPU or CUDA, without the CUDA toolkit's headers. Every
// function catches C++ exceptions (a build without CUDA has no CUDA allocator and throws):
// one must never unwind into Rust.
#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/DeviceType.h>

namespace {
c10::DeviceAllocator* cuda_allocator() {
  auto* a = c10::getDeviceAllocator(c10::DeviceType::CUDA);
  if (a == nullptr || !a->initialized()) return nullptr;
  return a;
}
constexpr size_t kAggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
}  // namespace

extern "C" {

// Returns the cached, unused blocks of the CUDA caching allocator to the driver
// (torch.cuda.empty_cache). 0 on success, 1 when there is no CUDA allocator, -1 on error.
int tune_cuda_empty_cache() {
  try {
    auto* a = cuda_allocator();
    if (a == nullptr) return 1;
    a->emptyCache();
    return 0;
  } catch (...) {
    return -1;
  }
}

// The most bytes allocated at once on `device` since the last reset
// (torch.cuda.max_memory_allocated); -1 when unknown.
long long tune_cuda_peak_allocated(int device) {
  try {
    auto* a = cuda_allocator();
    if (a == nullptr) return -1;
    auto stats = a->getDeviceStats(static_cast<c10::DeviceIndex>(device));
    return static_cast<long long>(stats.allocated_bytes[kAggregate].peak);
  } catch (...) {
    return -1;
  }
}

// Starts a new peak on `device` (torch.cuda.reset_peak_memory_stats). 0 on success.
int tune_cuda_reset_peak(int device) {
  try {
    auto* a = cuda_allocator();
    if (a == nullptr) return 1;
    a->resetPeakStats(static_cast<c10::DeviceIndex>(device));
    return 0;
  } catch (...) {
    return -1;
  }
}
}
