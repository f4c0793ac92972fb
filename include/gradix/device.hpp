#pragma once
/// \file
/// gradix's device backend (umbrella): device tensors and parameters, the grid kernels
/// (forward, fixed-bits reductions, scatter-add, backward), and the dispatch that lets
/// gx::eval, value, assign, backward, backward_only and grad run device expressions
/// (docs/cuda.md). In a CUDA translation unit (nvcc) it also brings gradix::cuda::launcher.
/// Include it after or instead of <gradix/gradix.hpp>.

#include "gradix/gradix.hpp"
#include "gradix/backend/grid/assign.hpp"
#include "gradix/backend/grid/backward.hpp"
#include "gradix/api/device_entry.hpp"
#include "gradix/backend/grid/grad.hpp"
#include "gradix/backend/grid/launch.hpp"
#include "gradix/backend/grid/memory.hpp"
#include "gradix/backend/grid/param.hpp"
#include "gradix/backend/grid/reduce.hpp"
#include "gradix/backend/grid/scatter.hpp"
#include "gradix/backend/grid/sparse.hpp"

#if defined(__CUDACC__)
#include "gradix/backend/cuda/launch.hpp"
#endif
