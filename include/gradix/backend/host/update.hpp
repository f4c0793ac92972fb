#pragma once
/// \file
/// Host update kernels: run the elements of a backward plan (ad/kernel.hpp). For every d of a
/// use's domain D, add v(d) to the gradient at m(d); `prepare` (the serial pre-pass: sparse
/// slots reserved, touched slices marked), `scratch_bytes` (what backward reserves before any kernel runs),
/// `run` and `run_serial` (constant evaluation) for each kind of plan element. This header
/// includes the parts, in the order their declarations need:
///
///   scratch.hpp       the per-thread scratch arena
///   update_plain.hpp  plain uses: the loop nest, owner-computes threads (the odometer and
///                     the target addressing: core/coords.hpp, grad/storage.hpp)
///   loss_block.hpp    one block of the summation scheme, computed by a kernel as it goes
///   multi_use.hpp     several uses of one elementwise region: one reverse sweep per element
///   plan_facts.hpp    which plan elements carry the loss value (types only)
///   carrying.hpp      the loss value carried by plain uses and multi_uses (run_carrying)
///   fused.hpp         a fused pair's one loop nest, and the loss value it carries

#include "gradix/ad/plan.hpp"
#include "gradix/ad/product.hpp"
#include "gradix/backend/host/assign.hpp"
#include "gradix/backend/host/thread_pool.hpp"
#include "gradix/config.hpp"
#include "gradix/core/simd.hpp"
#include "gradix/eval/ad.hpp"
#include "gradix/eval/cost.hpp"
#include "gradix/eval/map.hpp"
#include "gradix/eval/reduce.hpp"
#include "gradix/eval/sweep.hpp"

#include "gradix/backend/host/scratch.hpp"
#include "gradix/backend/host/update_plain.hpp"
#include "gradix/backend/host/loss_block.hpp"
#include "gradix/backend/host/multi_use.hpp"
#include "gradix/backend/host/plan_facts.hpp"
#include "gradix/backend/host/carrying.hpp"
// The fused pair's kernel and its loss-carrying form (they use the helpers above, and
// complete plan_facts.hpp's detail::fused_carries).
#include "gradix/backend/host/fused.hpp"
