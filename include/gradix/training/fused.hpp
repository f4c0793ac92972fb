#pragma once
/// \file
/// A backward with the optimizer's step fused into it: `gx::backward(e, gx::optim::fused(opt))`
/// evaluates the rank-0 expression e, computes d e / d p for the optimizer's parameters into
/// the optimizer's own call buffers (one gradient storage per parameter, made on the first
/// call and kept), applies one step of the optimizer to every slice the call touched, empties
/// the buffers, and returns e's value. The parameters' own gradients (`p.grad()`) are neither
/// read nor written; parameters that e reads and the optimizer does not manage get their
/// gradients added as by `gx::backward(e)`.
///
/// The result is, to the bit, that of `zero_grad(p...); backward(e); opt.step();
/// zero_grad(p...)` for every optimizer (sgd, adagrad, rowwise_adagrad, adam, adamw,
/// lazy_adam; dense and sparse storage; duplicate indices summed first), because the step
/// reads the same gradient storage kind filled by the same kernels (tests/ad/fused_step_test.cpp).
/// Host parameters only (a device parameter is a compile-time error naming the call).
///
/// Part of `<gradix/optim.hpp>` (docs/optim.md, "The step fused into backward").

#include "gradix/api/backward.hpp"
#include "gradix/training/optimizers.hpp"
#include "gradix/training/rowwise.hpp"

#include <type_traits>

namespace gradix {

namespace optim {

/// An optimizer to fuse into a backward call (`gx::backward(e, optim::fused(opt))`).
template <class Opt>
struct fused_t {
  Opt* opt;
};
/// An optimizer of gx::optim that a backward can fuse: it has a step and call buffers
/// (every optimizer of training/optimizers.hpp and training/rowwise.hpp). Checked without
/// instantiating the fused step.
template <class Opt>
concept fusable_optimizer = requires(Opt& o) {
  o.step();
  o.fused_rows_applied();
};
/// Marks opt for gx::backward(e, optim::fused(opt)).
template <fusable_optimizer Opt>
fused_t<Opt> fused(Opt& opt) {
  return {&opt};
}

}  // namespace optim

/// Evaluates the rank-0 expression e, runs one step of the optimizer with the gradient of
/// this call (never stored in the parameters' gradients) and returns e's value (file comment).
template <operand E, class Opt>
auto backward(E const& e, optim::fused_t<Opt> f) {
  return f.opt->fused_step([&] { return gradix::backward(e); });
}

}  // namespace gradix
