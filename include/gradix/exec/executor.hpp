#pragma once
/// \file
/// The executor: what the layer between the AD transforms and the backends (`exec/`) asks of
/// a backend. The save transform (exec/save.hpp) is written once over it; each backend
/// provides one executor (`host::executor` in backend/host/executor.hpp; the grid's is
/// issue 33's next step), and api/ picks the executor from where the expression's leaves
/// live. An executor is a small object that a call passes by reference to every step (the
/// host's is empty; a device's names its launcher, so its stream); the state of a call is
/// its workspace and its plan, not the executor:
///
///   memory
///     space                          the memory space its views name (host_space, ...)
///     allocate(bytes) / deallocate(p) bytes of that space, 64-byte aligned; allocate throws
///                                    std::bad_alloc
///     workspace()                    the calling thread's call_workspace on that memory
///     in_place<T>(rows, cols, rs, cs) (static) whether gemm reads a strided matrix as it is
///     inlines_step_lets              (static constexpr bool) whether a scan step whose values
///                                    no sweep reads recomputes its lets' elementwise operands
///                                    where they are read (fewer launches) instead of keeping
///                                    them in buffers (exec/save_scan.hpp, keep_scan)
///     assigns_together               (static constexpr bool) whether a scan step kept for the
///                                    sweep has its lets' buffers and its root's value written
///                                    by one assign_together (below), each member recomputing
///                                    the lets' elementwise operands it reads, instead of one
///                                    assign after another (exec/save_scan.hpp)
///     step_gradient_rows             (static constexpr index_t) the most rows of inner extent
///                                    a scan's sweep gives one gemm of a weight's gradient
///                                    over its steps (0: every step in one; exec/elements.hpp,
///                                    sweep_deferral)
///     step_gradient_min              (static constexpr index_t) the fewest elements a weight's
///                                    gradient has for the sweep to take it over several steps
///                                    at once (a smaller one: step by step)
///     sums_rows_over_steps           (static constexpr bool, optional) whether a scan's sweep
///                                    takes a bias's gradient (the row sums of each step's
///                                    adjoint) over every step in one add_row_sums(dst, src,
///                                    rows, n) when it ends (exec/sweep.hpp, defer_row_sum)
///     adds_over_steps                (static constexpr bool, optional) whether a scan's sweep
///                                    adds a step's own adjoint added at the identity into the
///                                    scan's input adjoint over every step in one add_rows(dst,
///                                    ld, src, rows, n) when it ends (exec/sweep.hpp, defer_add)
///   forward work (every one writes only the destination it is given)
///     assign(dst, e)                 e's elements into the view dst (a fused loop / kernel)
///     assign_together(members)       (where assigns_together) a tuple of assign_member
///                                    (dst_ = e_, no member reading another's dst_) in one
///                                    launch
///     gemm(batch, m, n, k, a, b, c, ldc, bs, accumulate)
///                                    C = A B (+ C), mat_ref operands (expr/matmul.hpp)
///     rows(n, c, rstd)               a row node's rows (softmax, log_softmax, the norms;
///                                    expr/row.hpp) into row-major c, the norms' 1 / sd per row
///                                    into rstd
///     segments(n, c)                 a segment sum's bags (expr/bag.hpp) into row-major c
///     bags(n, bag, scale)            per operand position, its bag and the bag's scale
///     argmax(n, arg)                 a max reduction's first arg-max per output element
///
/// The concept below checks the members that are not templates; the others are checked
/// where the save transform calls them.

#include "gradix/config.hpp"

#include <concepts>
#include <cstddef>

namespace gradix::exec {

/// A thread's workspace on one executor's memory: one byte buffer that only grows, used as
/// a stack by the calls of that thread (a warm call allocates nothing). `free_(ctx_, p)`
/// gives the buffer back to the memory it came from (ctx_: the executor's allocator, e.g. a
/// launcher; null for the host).
struct call_workspace {
  std::byte* p_ = nullptr;
  std::size_t cap_ = 0, top_ = 0;
  void (*free_)(void*, std::byte*) noexcept = nullptr;
  void* ctx_ = nullptr;
  call_workspace() = default;
  call_workspace(void (*f)(void*, std::byte*) noexcept, void* ctx) : free_(f), ctx_(ctx) {}
  call_workspace(call_workspace const&) = delete;
  call_workspace& operator=(call_workspace const&) = delete;
  ~call_workspace() {
    if (p_ && free_) free_(ctx_, p_);
  }
};

/// An executor (see the file comment): its memory and its workspace.
template <class X>
concept executor = requires(X& x, std::size_t b, std::byte* p) {
  typename X::space;
  { x.allocate(b) } -> std::same_as<std::byte*>;
  { x.deallocate(p) } noexcept;
  { x.workspace() } -> std::same_as<call_workspace&>;
};

}  // namespace gradix::exec
