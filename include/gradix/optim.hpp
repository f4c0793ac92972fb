#pragma once
/// \file
/// Optimizers (gx::optim), initializers (gx::init) and the gradient accessors they are
/// built on (docs/optim.md): an umbrella over the training/ headers, kept so that
/// `#include <gradix/optim.hpp>` stays the one include for them. The code lives in
/// `gradix/training/slices.hpp` (`for_each_grad_slice`, `update_touched`: the slices of a
/// parameter's gradient that backward touched), `gradix/training/optimizers.hpp` (`sgd`,
/// `adagrad`, `rowwise_adagrad`, `adam`, `adamw`, `lazy_adam`; half-width parameters widened
/// and rounded; their shared parts in `gradix/training/optim_base.hpp`),
/// `gradix/training/fused.hpp` (`gx::backward(e, optim::fused(opt))`: the step fused into
/// backward), `gradix/training/clip.hpp` (`clip_grad_norm`) and
/// `gradix/training/init.hpp` (`xavier_*`, `kaiming_*`, `uniform`, `normal`); each opens
/// with its contract.

#include "gradix/training/clip.hpp"
#include "gradix/training/fused.hpp"
#include "gradix/training/init.hpp"
#include "gradix/training/optim_base.hpp"
#include "gradix/training/optimizers.hpp"
#include "gradix/training/rowwise.hpp"
#include "gradix/training/slices.hpp"
