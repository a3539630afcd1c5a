// Gradient checkpointing as a libtorch autograd Function (`torch::autograd::Function`, which
// tch does not expose), for `src/checkpoint.rs`. The block itself is Rust: a callback that
// `tune_checkpoint` receives as (state, call, drop) and the autograd node owns until it is
// destroyed.
//
// Forward: the block runs with autograd off (Function::apply does that), so none of its
// activations are kept; the node saves only the block's input and parameters, the autocast
// state and, when asked, the CPU and device RNG states. Backward: the block runs again from a
// detached copy of its input, under the saved autocast state and RNG states (so dropout draws
// the same masks, and the RNG streams are put back afterwards, as torch.utils.checkpoint
// does), with the callback told it is a recomputation (so BatchNorm does not update its
// running statistics twice); then `torch::autograd::grad` gives the gradients of the input
// and of the parameters for the upstream gradient, which the node returns to the engine. No
// `.grad` is written here: the engine accumulates what the node returns, as for any op.
//
// Tensors come as tch's handles (`torch::Tensor*`). Every entry point catches C++ exceptions
// and writes the message into `err`: one must never unwind into Rust. The Rust callback
// catches its panics in the same way and reports them through its return code.
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/Generator.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cstring>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "shim_error.h"

extern "C" {
// Runs the block on `x`; `recompute` is 1 in the backward pass. On success writes a new
// handle (owned by the caller, freed with `delete`) to `out` and returns 0; on failure
// returns nonzero with the message in `err`.
typedef int (*tune_ckpt_call)(void* state, at::Tensor* x, int recompute, at::Tensor** out,
                              char* err, int err_len);
// Frees the block's state; called once, from whichever thread destroys the node.
typedef void (*tune_ckpt_drop)(void* state);
}

namespace {
using tune_shim::set_error;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;


// The Rust block, owned by the autograd node (a capsule in its saved data).
struct Block : torch::CustomClassHolder {
  void* state;
  tune_ckpt_call call;
  tune_ckpt_drop drop;
  Block(void* s, tune_ckpt_call c, tune_ckpt_drop d) : state(s), call(c), drop(d) {}
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;
  ~Block() override { drop(state); }

  at::Tensor run(const at::Tensor& x, bool recompute) {
    char err[2048] = {0};
    at::Tensor in = x;
    at::Tensor* out = nullptr;
    int rc = call(state, &in, recompute ? 1 : 0, &out, err, sizeof err);
    if (rc != 0 || out == nullptr) {
      delete out;
      throw std::runtime_error(err[0] != '\0' ? err : "the checkpointed block failed");
    }
    at::Tensor result = std::move(*out);
    delete out;
    return result;
  }
};

// Autocast on the CPU and on CUDA, as the forward pass saw it.
struct AutocastState {
  bool cpu = false;
  at::ScalarType cpu_dtype = at::kBFloat16;
  bool cuda = false;
  at::ScalarType cuda_dtype = at::kHalf;

  static AutocastState now() {
    AutocastState s;
    s.cpu = at::autocast::is_autocast_enabled(at::kCPU);
    s.cpu_dtype = at::autocast::get_autocast_dtype(at::kCPU);
    s.cuda = at::autocast::is_autocast_enabled(at::kCUDA);
    s.cuda_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
    return s;
  }
  void set() const {
    at::autocast::set_autocast_enabled(at::kCPU, cpu);
    at::autocast::set_autocast_dtype(at::kCPU, cpu_dtype);
    at::autocast::set_autocast_enabled(at::kCUDA, cuda);
    at::autocast::set_autocast_dtype(at::kCUDA, cuda_dtype);
  }
  void save(AutogradContext* ctx) const {
    ctx->saved_data["ac_cpu"] = cpu;
    ctx->saved_data["ac_cpu_dtype"] = static_cast<int64_t>(cpu_dtype);
    ctx->saved_data["ac_cuda"] = cuda;
    ctx->saved_data["ac_cuda_dtype"] = static_cast<int64_t>(cuda_dtype);
  }
  static AutocastState load(AutogradContext* ctx) {
    AutocastState s;
    s.cpu = ctx->saved_data["ac_cpu"].toBool();
    s.cpu_dtype = static_cast<at::ScalarType>(ctx->saved_data["ac_cpu_dtype"].toInt());
    s.cuda = ctx->saved_data["ac_cuda"].toBool();
    s.cuda_dtype = static_cast<at::ScalarType>(ctx->saved_data["ac_cuda_dtype"].toInt());
    return s;
  }
};

// Puts an autocast state in place for a scope and the previous one back after it (also on an
// exception), with the nesting count and cast cache handled as torch.autocast does.
class AutocastScope {
 public:
  explicit AutocastScope(const AutocastState& s) : prev_(AutocastState::now()) {
    s.set();
    if (s.cpu || s.cuda) {
      at::autocast::increment_nesting();
      nested_ = true;
    }
  }
  ~AutocastScope() {
    if (nested_ && at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    prev_.set();
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  AutocastState prev_;
  bool nested_ = false;
};

at::Tensor generator_state(at::Generator gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_generator_state(at::Generator gen, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

// The CPU generator's state and, for an input on an accelerator, that device's.
struct RngState {
  at::Tensor cpu;
  std::optional<c10::Device> device;
  at::Tensor device_state;

  static RngState now(const c10::Device& input_device) {
    RngState s;
    s.cpu = generator_state(at::globalContext().defaultGenerator(c10::Device(at::kCPU)));
    if (!input_device.is_cpu()) {
      s.device = input_device;
      s.device_state = generator_state(at::globalContext().defaultGenerator(input_device));
    }
    return s;
  }
  void set() const {
    set_generator_state(at::globalContext().defaultGenerator(c10::Device(at::kCPU)), cpu);
    if (device) set_generator_state(at::globalContext().defaultGenerator(*device), device_state);
  }
};

// Restores the RNG states current at its creation when it goes out of scope.
class RngFork {
 public:
  explicit RngFork(const c10::Device& d) : saved_(RngState::now(d)) {}
  ~RngFork() {
    try {
      saved_.set();
    } catch (...) {
      // A destructor must not throw; the states were readable a moment ago.
    }
  }
  RngFork(const RngFork&) = delete;
  RngFork& operator=(const RngFork&) = delete;

 private:
  RngState saved_;
};

struct Checkpoint : public torch::autograd::Function<Checkpoint> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, at::TensorList params,
                            c10::intrusive_ptr<Block> block, bool preserve_rng) {
    ctx->saved_data["block"] = c10::IValue::make_capsule(block);
    ctx->saved_data["rng"] = preserve_rng;
    AutocastState::now().save(ctx);
    if (preserve_rng) {
      RngState s = RngState::now(x.device());
      ctx->saved_data["rng_cpu"] = s.cpu;
      if (s.device) ctx->saved_data["rng_device"] = s.device_state;
    }
    variable_list saved{x};
    saved.insert(saved.end(), params.begin(), params.end());
    ctx->save_for_backward(saved);
    return block->run(x, false);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list saved = ctx->get_saved_variables();
    auto block = c10::static_intrusive_pointer_cast<Block>(ctx->saved_data["block"].toCapsule());
    const at::Tensor& x = saved[0];
    at::Tensor input = x.detach();
    input.set_requires_grad(x.requires_grad());
    at::Tensor out;
    {
      std::optional<RngFork> fork;
      if (ctx->saved_data["rng"].toBool()) {
        fork.emplace(x.device());
        RngState s;
        s.cpu = ctx->saved_data["rng_cpu"].toTensor();
        if (ctx->saved_data.find("rng_device") != ctx->saved_data.end()) {
          s.device = x.device();
          s.device_state = ctx->saved_data["rng_device"].toTensor();
        }
        s.set();
      }
      at::AutoGradMode grad_on(true);
      AutocastScope autocast(AutocastState::load(ctx));
      out = block->run(input, true);
    }
    // The gradients asked for: the input's (when it needs one) and the parameters' that do.
    variable_list wrt;
    std::vector<size_t> where;  // index in `saved` of each entry of `wrt`
    for (size_t i = 0; i < saved.size(); i++) {
      const at::Tensor& t = i == 0 ? input : saved[i];
      if (t.requires_grad()) {
        wrt.push_back(t);
        where.push_back(i);
      }
    }
    // One gradient per forward input: x, each parameter, then the block and the flag
    // (not tensors: undefined).
    variable_list result(saved.size() + 2);
    if (!wrt.empty() && out.requires_grad()) {
      variable_list g = torch::autograd::grad({out}, wrt, {grads[0]}, /*retain_graph=*/false,
                                              /*create_graph=*/false, /*allow_unused=*/true);
      for (size_t j = 0; j < g.size(); j++) result[where[j]] = g[j];
    }
    return result;
  }
};
}  // namespace

extern "C" {

// The block `call` run on `x` without keeping its activations, recomputed in the backward
// pass; `params` are the `n` parameters the block uses (those that need a gradient get it).
// The node takes `state` (freed through `drop`, also on failure). With autograd off, or with
// nothing that needs a gradient, the block just runs. On success writes a new handle to
// `out` and returns 0; -1 on error (message in `err`).
int tune_checkpoint(at::Tensor* x, at::Tensor** params, int n, int preserve_rng, void* state,
                    tune_ckpt_call call, tune_ckpt_drop drop, at::Tensor** out, char* err,
                    int err_len) {
  c10::intrusive_ptr<Block> block;
  try {
    block = c10::make_intrusive<Block>(state, call, drop);
  } catch (const std::exception& e) {
    drop(state);
    set_error(err, err_len, e.what());
    return -1;
  }
  try {
    std::vector<at::Tensor> ps;
    ps.reserve(static_cast<size_t>(n));
    bool needs_grad = x->requires_grad();
    for (int i = 0; i < n; i++) {
      ps.push_back(*params[i]);
      needs_grad = needs_grad || params[i]->requires_grad();
    }
    at::Tensor y;
    if (c10::GradMode::is_enabled() && needs_grad) {
      y = Checkpoint::apply(*x, at::TensorList(ps), block, preserve_rng != 0);
    } else {
      y = block->run(*x, false);
    }
    *out = new at::Tensor(std::move(y));
    return 0;
  } catch (const std::exception& e) {
    set_error(err, err_len, e.what());
    return -1;
  } catch (...) {
    set_error(err, err_len, "unknown C++ exception");
    return -1;
  }
}
}
