// The one way every C++ shim of tune-train (autocast aside) reports a failure to Rust: a C++
// exception must never unwind into Rust, so each entry point catches it and writes its message
// into the caller's buffer `err` of `len` bytes, NUL-terminated, and returns -1.
#pragma once

#include <cstring>
#include <exception>

namespace tune_shim {

inline void set_error(char* err, int len, const char* msg) {
  if (err == nullptr || len <= 0) return;
  std::strncpy(err, msg, static_cast<size_t>(len) - 1);
  err[len - 1] = '\0';
}

// Runs `f`, turning a C++ exception into -1 and its message in `err` (0 when `f` returns).
template <typename F>
int guarded(char* err, int err_len, F&& f) {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    set_error(err, err_len, e.what());
    return -1;
  } catch (...) {
    set_error(err, err_len, "unknown C++ exception");
    return -1;
  }
}

}  // namespace tune_shim
