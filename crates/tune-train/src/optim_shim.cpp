// The multi-tensor optimizer kernels that tch does not expose (its generator skips every
// `_foreach_*`, `_amp_foreach_*` and `_fused_*` op): one Adam or AdamW step over all the
// parameters in one fused kernel, as `torch.optim.Adam(fused=True)`; the gradients' unscaling
// and inf check for fp16 in one multi-tensor kernel, as `torch.amp.GradScaler`; clipping by the
// global norm without reading the norm back to the host, as
// `torch.nn.utils.clip_grad_norm_(foreach=True)`; and gradients set to none or zeroed in place.
//
// Tensors come as tch's handles (`torch::Tensor*`). Every function catches C++ exceptions and
// writes the message into `err`: one must never unwind into Rust.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include "shim_error.h"

namespace {
using tune_shim::guarded;
using tune_shim::set_error;


// The defined gradients of `params`, grouped by dtype (the multi-tensor kernels want one).
std::map<at::ScalarType, std::vector<at::Tensor>> grads_by_dtype(at::Tensor** params, int n) {
  std::map<at::ScalarType, std::vector<at::Tensor>> out;
  for (int i = 0; i < n; i++) {
    const at::Tensor& g = params[i]->grad();
    if (g.defined()) out[g.scalar_type()].push_back(g);
  }
  return out;
}
}  // namespace

extern "C" {

// One Adam (`decoupled` 0: L2 weight decay added to the gradient) or AdamW (`decoupled` 1)
// step over the parameters that have a gradient. `exp_avgs`, `exp_avg_sqs` and `steps` (f32
// scalars) are the state of each parameter, in the same order. With `found_inf` (a one-element
// f32 tensor, nonzero when the fp16 gradients overflowed) the kernel leaves the parameters and
// their moments as they were and the step counts are taken back, all on the device.
// With `lr_t` (a one-element f32 tensor on the parameters' device) the learning rate is read
// from it on the device instead of `lr`: a CUDA graph captures the tensor's address, so a
// schedule changes the rate between replays by writing the tensor.
// 0 on success, -1 on error (message in `err`).
int tune_fused_adam(at::Tensor** params, at::Tensor** exp_avgs, at::Tensor** exp_avg_sqs,
                    at::Tensor** steps, int n, double lr, at::Tensor* lr_t, double beta1,
                    double beta2,
                    double weight_decay, double eps, int decoupled, at::Tensor* found_inf,
                    char* err, int err_len) {
  return guarded(err, err_len, [&] {
    c10::NoGradGuard no_grad;
    std::map<at::ScalarType, std::vector<std::vector<at::Tensor>>> groups;
    for (int i = 0; i < n; i++) {
      const at::Tensor& g = params[i]->grad();
      if (!g.defined()) continue;
      auto& grp = groups[params[i]->scalar_type()];
      if (grp.empty()) grp.resize(5);
      grp[0].push_back(*params[i]);
      grp[1].push_back(g);
      grp[2].push_back(*exp_avgs[i]);
      grp[3].push_back(*exp_avg_sqs[i]);
      grp[4].push_back(*steps[i]);
    }
    std::optional<at::Tensor> inf;
    if (found_inf != nullptr) inf = *found_inf;
    for (auto& [dtype, g] : groups) {
      at::_foreach_add_(g[4], 1);
      if (lr_t != nullptr && decoupled != 0) {
        at::_fused_adamw_(g[0], g[1], g[2], g[3], {}, g[4], *lr_t, beta1, beta2, weight_decay,
                          eps, false, false, std::nullopt, inf);
      } else if (lr_t != nullptr) {
        at::_fused_adam_(g[0], g[1], g[2], g[3], {}, g[4], *lr_t, beta1, beta2, weight_decay,
                         eps, false, false, std::nullopt, inf);
      } else if (decoupled != 0) {
        at::_fused_adamw_(g[0], g[1], g[2], g[3], {}, g[4], lr, beta1, beta2, weight_decay, eps,
                          false, false, std::nullopt, inf);
      } else {
        at::_fused_adam_(g[0], g[1], g[2], g[3], {}, g[4], lr, beta1, beta2, weight_decay, eps,
                         false, false, std::nullopt, inf);
      }
      if (inf.has_value()) {
        std::vector<at::Tensor> back(g[4].size(), inf->reshape({}));
        at::_foreach_sub_(g[4], back);
      }
    }
  });
}

// Multiplies every defined gradient by `inv_scale` and sets `found_inf` to 1 where one holds an
// inf or NaN, in one multi-tensor kernel per dtype; nothing is read back to the host.
int tune_amp_unscale(at::Tensor** params, int n, at::Tensor* found_inf, at::Tensor* inv_scale,
                     char* err, int err_len) {
  return guarded(err, err_len, [&] {
    c10::NoGradGuard no_grad;
    for (auto& [dtype, g] : grads_by_dtype(params, n)) {
      at::_amp_foreach_non_finite_check_and_unscale_(g, *found_inf, *inv_scale);
    }
  });
}

// Scales the gradients so that their global 2-norm is at most `max_norm` (coefficient
// max_norm / (norm + 1e-6), capped at 1), computed and applied on the device.
int tune_clip_grad_norm(at::Tensor** params, int n, double max_norm, char* err, int err_len) {
  return guarded(err, err_len, [&] {
    c10::NoGradGuard no_grad;
    auto groups = grads_by_dtype(params, n);
    std::vector<at::Tensor> norms;
    for (auto& [dtype, g] : groups) {
      for (auto& x : at::_foreach_norm(g, 2)) norms.push_back(x.to(at::kFloat));
    }
    if (norms.empty()) return;
    at::Tensor total = at::linalg_vector_norm(at::stack(norms), 2);
    at::Tensor coef = (max_norm / (total + 1e-6)).clamp_max(1.0);
    for (auto& [dtype, g] : groups) {
      at::_foreach_mul_(g, coef.to(g.front().scalar_type()));
    }
  });
}

// Zeroes the defined gradients in place (`zero_grad(set_to_none=False)`), one multi-tensor
// kernel per dtype: a replayed CUDA graph writes the gradients into the tensors it captured, so
// once a graph exists they must stay where they are.
int tune_grads_zero(at::Tensor** params, int n, char* err, int err_len) {
  return guarded(err, err_len, [&] {
    c10::NoGradGuard no_grad;
    for (auto& [dtype, g] : grads_by_dtype(params, n)) at::_foreach_zero_(g);
  });
}

// Drops the gradients (`zero_grad(set_to_none=True)`): the next backward writes them afresh
// instead of adding to zeros, and no memset runs per parameter.
void tune_grads_to_none(at::Tensor** params, int n) {
  for (int i = 0; i < n; i++) {
    params[i]->mutable_grad().reset();
  }
}
}
