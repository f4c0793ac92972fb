#pragma once
/// \file
/// Evaluators of saved values (expr/saved.hpp): a saved_node reads its buffer like a view; a
/// save_mark_node that was not transformed (constant evaluation of a plan type, a device
/// expression) evaluates its operand.

#include "gradix/config.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/expr/saved.hpp"

namespace gradix::ev {

template <class Arg>
struct evaluator<save_mark_node<Arg>> : evaluator<Arg> {
  GRADIX_HOST_DEVICE constexpr explicit evaluator(save_mark_node<Arg> const& n) : evaluator<Arg>(n.arg_) {}
};

template <class N, class L>
struct evaluator<saved_node<N, L>> : evaluator<typename saved_node<N, L>::buffer_type> {
  using base = evaluator<typename saved_node<N, L>::buffer_type>;
  GRADIX_HOST_DEVICE constexpr explicit evaluator(saved_node<N, L> const& n) : base(n.buf_) {}
};

}  // namespace gradix::ev
