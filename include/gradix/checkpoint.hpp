#pragma once
/// \file
/// Checkpoints (gx::checkpoint, docs/checkpoint.md): an umbrella kept so that
/// `#include <gradix/checkpoint.hpp>` stays the one include for them. The code, and the
/// file format with its guarantees, live in `gradix/training/checkpoint.hpp`; this header
/// also includes `gradix/optim.hpp` (the optimizers of `gradix/training/optimizers.hpp`,
/// whose state a checkpoint saves), as it always has.

#include "gradix/optim.hpp"
#include "gradix/training/checkpoint.hpp"
