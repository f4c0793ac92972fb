#pragma once
/// \file
/// The grid's executor (exec/executor.hpp): device memory from a launcher, the grid's
/// kernels (grid::assign, backend/grid/kept.hpp, the update kernels of backend/grid/update.hpp)
/// and the launcher's gemm (cuBLAS in gradix::cuda::launcher; the tests' emulator runs the
/// same calls through the host's gemm). The save transform (exec/save.hpp) and the plan
/// runner (exec/run.hpp, exec/elements.hpp) run over it for device calls whose plans need
/// buffers (products, softmax and the norms, lets, embedding_bag, staged values).
///
/// Its workspace is its own: a device call takes its buffers from the launcher when it
/// starts and gives them back when it ends, in the launcher's order (cudaMallocAsync's pool
/// on a GPU), so calls on different streams never share memory.

#include "gradix/backend/grid/assign.hpp"
#include "gradix/backend/grid/block_sum.hpp"
#include "gradix/backend/grid/kept.hpp"
#include "gradix/backend/grid/launch.hpp"
#include "gradix/backend/grid/plain_plan.hpp"
#include "gradix/backend/grid/reduce.hpp"
#include "gradix/backend/grid/reserve.hpp"
#include "gradix/backend/grid/scatter.hpp"
#include "gradix/backend/grid/update.hpp"
#include "gradix/config.hpp"
#include "gradix/core/layout.hpp"
#include "gradix/core/view.hpp"
#include "gradix/exec/checks.hpp"
#include "gradix/exec/elements.hpp"
#include "gradix/exec/executor.hpp"
#include "gradix/expr/matmul.hpp"

#include <cstddef>
#include <type_traits>
#include <utility>

namespace gradix::grid {

/// Whether launcher L multiplies matrices (l.gemm, as host::gemm's arguments).
template <class L, class T>
concept gemm_launcher = requires(L& l, mat_ref<T> a, T* c) { l.gemm(index_t(1), index_t(1), index_t(1), index_t(1), a, a, c, index_t(1), index_t(0), false); };

template <class L>
class executor {
 public:
  using space = cuda_space;
  /// A step whose values no sweep reads (a forward call's, gx::recompute_steps) reads its
  /// lets' elementwise operands where it uses them: fewer launches (an LSTM step: the
  /// product and one kernel), the elementwise work recomputed.
  static constexpr bool inlines_step_lets = true;
  /// A step kept for the sweep writes its lets' buffers and its root's value in one launch
  /// (exec/save_scan.hpp, with_saved_together: an LSTM step is its product and one launch),
  /// each member recomputing the lets' elementwise operands it reads.
  static constexpr bool assigns_together = true;
  /// A scan's reverse sweep takes a weight's gradient in one gemm over every step
  /// (exec/sweep.hpp, sweep_deferral; 0: no bound on its rows): one launch, not one
  /// per step.
  static constexpr index_t step_gradient_rows = 0;
  static constexpr index_t step_gradient_min = 0;  // (any weight)
  /// A bias that a step's body adds inside the loop (`h Wh + bh`: its gradient the sum of
  /// the rows of a step's adjoint) has its gradient taken over every step in one launch when
  /// the sweep ends (exec/sweep.hpp, defer_row_sum; add_row_sums): a GRU step's sweep is
  /// then its elementwise adjoint and the carry's gemm.
  static constexpr bool sums_rows_over_steps = true;
  template <class T>
  void add_row_sums(T* dst, T const* src, index_t rows, index_t n) {
    // (dst[j] += the rows' sum at column j, one thread per column adding them in order)
    if (n > 0) l_->launch(shape_for(n, o_.launch, l_->max_threads()), ordered_block_sum_kernel<T>{src, dst, rows, n, n, true});
  }
  /// A step's own adjoint added at the identity into the scan's input adjoint (the input
  /// x'_t of a body whose product was taken apart: api/scan_hoist.hpp) is added over every
  /// step in one launch when the sweep ends (exec/sweep.hpp, defer_add; add_rows): an
  /// LSTM step's sweep is then its elementwise adjoint and the carry's gemm.
  static constexpr bool adds_over_steps = true;
  template <class T>
  void add_rows(T* dst, index_t ld, T const* src, index_t rows, index_t n) {
    // (dst[r, j] += src[r, j]: dst's rows ld apart, src's n)
    using S = shape<dyn, dyn>;
    auto const d = strided_view<cuda_space>(dst, dims(rows, n), array<index_t, 2>{ld, 1});
    tensor_view<T const, S, row_major, cuda_space> const a(src, dims(rows, n));
    assign(d, d + a);
  }
  /// Storage guard of a plan on this executor: device storages' busy flags (no rollback: a
  /// device call that fails part way leaves what it wrote, docs/cuda.md).
  template <std::size_t N>
  using guard = ::gradix::detail::busy_lock<N>;

  executor(L& l, backward_options o) : l_(&l), o_(o), ws_(&release, &l) {}
  executor(executor const&) = delete;
  executor& operator=(executor const&) = delete;

  L& launcher() const { return *l_; }
  backward_options const& options() const { return o_; }

  /// Whether a plan runs whole here rather than element by element (exec/run.hpp): plans
  /// of plain uses only, whose update kernels share launches (plain_plan.hpp).
  template <class Plan>
  static constexpr bool runs_whole = detail::device_plan<Plan>::value;
  /// Runs such a plan: its own busy lock over the targets, the reservations, the launches.
  template <class Plan>
  void run_whole(Plan const& p, char const* op) {
    detail::run_device_plan(*l_, p, o_, op);
  }

  std::byte* allocate(std::size_t bytes) { return static_cast<std::byte*>(l_->allocate(bytes)); }
  void deallocate(std::byte* p) noexcept { release(l_, p); }
  exec::call_workspace& workspace() { return ws_; }

  /// dst (a buffer of the call: nothing else reads it) = e, one kernel.
  template <class V, class E>
  void assign(V const& dst, E const& e) {
    if (dst.size() > 0) detail::assign_direct(*l_, dst, e, o_.launch);
  }
  /// Every member m (exec/save_scan.hpp, assign_member: m.dst_ = m.e_; buffers of the call,
  /// no member reading another's) in one launch, each on its own blocks (fused_kernel);
  /// member by member where a member is a reduction (assign_direct's kernels) or the
  /// launch's parameters would not fit (kernel_param_bytes; an LSTM step's three members
  /// take 4.5 KB: each recomputes the gates it reads).
  template <class... M>
  void assign_together(tuple<M...> const& ms) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      using K = fused_kernel<assign_kernel<decltype(get<I>(ms).dst_), decltype(get<I>(ms).e_)>...>;
      if constexpr ((is_reduce_node<decltype(get<I>(ms).e_)>::value || ...) || sizeof(K) > kernel_param_bytes - 1024) {
        (assign(get<I>(ms).dst_, get<I>(ms).e_), ...);
      } else {
        K k{::gradix::make_tuple(assign_kernel<decltype(get<I>(ms).dst_), decltype(get<I>(ms).e_)>{get<I>(ms).dst_, get<I>(ms).e_}...),
            {}, {}};
        static_assert(std::is_trivially_copyable_v<K>, "gradix::grid: a fused launch must be trivially copyable");
        index_t const t = shape_for(1, o_.launch, l_->max_threads()).threads;
        index_t next = 0;
        ((k.begin_[I] = next,
          next += get<I>(ms).dst_.size() > 0 ? shape_for(get<I>(ms).dst_.size(), o_.launch, l_->max_threads()).blocks : 0,
          k.end_[I] = next),
         ...);
        if (next > 0) l_->launch(launch_shape{next, t, 0}, k);
      }
    }(std::index_sequence_for<M...>{});
  }
  /// Whether gemm reads a strided matrix in place: a unit stride along one of its axes (as
  /// a BLAS; blas_form_of).
  template <class T>
  static constexpr bool in_place(index_t rows, index_t cols, index_t rs, index_t cs) {
    return blas_form_of(rows, cols, rs, cs).ok;
  }
  template <class T>
  void gemm(index_t batch, index_t m, index_t n, index_t k, mat_ref<T> a, mat_ref<T> b, T* c, index_t ldc,
            index_t bs, bool accumulate) {
    static_assert(gemm_launcher<L, T>,
                  "gradix::grid: this launcher has no gemm (matrix products on the device need one: "
                  "gradix::cuda::launcher through cuBLAS, the tests' emulator through the host's gemm)");
    if constexpr (gemm_launcher<L, T>) l_->gemm(batch, m, n, k, a, b, c, ldc, bs, accumulate);
  }
  template <class N, class T>
  void rows(N const& n, T* c, T* rstd) {
    index_t const len = n.shape().extent(N::axis);
    index_t const count = len > 0 ? n.shape().size() / len : 0;
    if (count > 0) l_->launch(shape_for(count, o_.launch, l_->max_threads()), rows_kernel<N, T>{n, c, rstd});
  }
  template <class N, class T>
  void segments(N const& n, T* c) {
    index_t const total = n.shape().size();
    if (total > 0) l_->launch(shape_for(total, o_.launch, l_->max_threads()), segments_kernel<N, T>{n, c});
  }
  template <class N, class T>
  void bags(N const& n, index_t* bag, T* scale) {
    index_t const nb = n.shape().extent(0);
    if (nb > 0) l_->launch(shape_for(nb, o_.launch, l_->max_threads()), bags_kernel<N, T>{n, bag, scale});
  }
  template <class N>
  void argmax(N const& n, index_t* arg) {
    index_t const count = n.shape().size();
    if (count > 0) l_->launch(shape_for(count, o_.launch, l_->max_threads()), argmax_kernel<N>{n, arg});
  }

  // plan elements (exec/run.hpp, exec/elements.hpp)
  template <class U>
  void prepare(U const& u) {
    grid::prepare(*l_, u, o_.launch);
  }
  template <class U>
  static constexpr std::size_t scratch_bytes(U const&) {
    return 0;  // (a device kernel's temporaries come from the launcher where it runs)
  }
  static constexpr void reserve_scratch(std::size_t) {}
  template <class U>
  void run(U const& u) {
    grid::run(*l_, u, o_.mode, o_.launch);
  }
  template <class U>
  void run_serial(U const& u) {
    run(u);
  }
  /// Consecutive kernel elements of one plan (exec/elements.hpp, run_elements) share
  /// launches: their uses run as run_whole's do (plain_plan.hpp, run_fused_uses: in atomic
  /// mode one launch, uses that write one storage adding atomically; in deterministic mode a
  /// new launch at a storage written already), when every target is dense (their sparse
  /// slots were reserved by the plan's pre-pass, which a fused launch would do again) and the
  /// launch's parameters stay small; else use after use. A scan step's elementwise adjoint
  /// is one or two launches this way, not one per use (tests/cuda/model_test.cpp).
  static constexpr bool runs_kernels_together = true;
  /// A pointwise let (exec/fusion.hpp, pointwise_let: its buffer written and read element
  /// by element) runs its body's and its operand's uses in one launch, every use on the
  /// same blocks, each thread's elements the same in all (plain_plan.hpp,
  /// run_pointwise_uses): an LSTM cell's elementwise adjoint is one launch
  /// (tests/cuda/model_test.cpp). Returns false, having run nothing, where the shapes or the
  /// scatter mode do not allow it.
  static constexpr bool runs_pointwise_lets = true;
  template <class PB, class PZ, class G>
  bool run_pointwise_let(PB const& pb, PZ const& pz, G const& gz) {
    auto const us = ::gradix::tuple_cat(detail::plan_uses(pb), detail::plan_uses(pz));
    return detail::run_pointwise_uses(*l_, us, detail::span_of(&gz), gz.shape().extents(), o_);
  }
  template <class... E>
  void run_kernels(tuple<E...> const& es) {
    auto const us = detail::plan_uses(es);
    using US = std::remove_cvref_t<decltype(us)>;
    if constexpr (runs_fusable<0>(static_cast<US const*>(nullptr))) {
      run_use_runs<0>(us);  // (more than fuse_uses_max: a GRU step's adjoint through a trained input, 13 uses)
    } else {
      for_each_element(es, [&](auto const& u) { run(u); });
    }
  }
  /// The run of n uses of a plan's uses (a tuple) from its I-th on.
  template <std::size_t I, std::size_t n, class... U>
  static auto use_run(tuple<U...> const& us) {
    return [&]<std::size_t... J>(std::index_sequence<J...>) { return ::gradix::make_tuple(get<I + J>(us)...); }(
        std::make_index_sequence<n>{});
  }
  template <std::size_t I, std::size_t N>
  static constexpr std::size_t run_length = N - I < detail::fuse_uses_max ? N - I : detail::fuse_uses_max;
  /// Whether uses U..., from I on, fuse_uses_max at a time, each run as one fused launch here
  /// (dense targets: fuse_uses_v); else the plan runs element by element.
  template <std::size_t I, class... U>
  static constexpr bool runs_fusable(tuple<U...> const*) {
    constexpr std::size_t N = sizeof...(U);
    if constexpr (I >= N) {
      return I > 0;
    } else {
      using R = decltype(use_run<I, run_length<I, N>>(std::declval<tuple<U...> const&>()));
      return [&]<class... V>(tuple<V...> const*) {
        return detail::fuse_uses_v<V...> && (!V::storage_type::sparse && ...);
      }(static_cast<R const*>(nullptr)) && runs_fusable<I + run_length<I, N>>(static_cast<tuple<U...> const*>(nullptr));
    }
  }
  /// The uses us from I on, fuse_uses_max at a time, a fused launch each (runs_fusable).
  template <std::size_t I, class... U>
  void run_use_runs(tuple<U...> const& us) {
    constexpr std::size_t N = sizeof...(U);
    if constexpr (I < N) {
      detail::run_fused_uses(*l_, use_run<I, run_length<I, N>>(us), o_);
      run_use_runs<I + run_length<I, N>>(us);
    }
  }
  template <bool Serial, class U>
  void row_adjoint(U const& u) {
    // the saved node lives in the call's host memory: its buffers' pointers go to the kernel
    auto const& sn = *u.node_;
    using SN = std::remove_cvref_t<decltype(sn)>;
    using N = typename SN::node_type;
    using T = value_type_t<N>;
    using S = shape_of_t<N>;
    index_t const len = sn.shape().extent(N::axis);
    index_t const count = len > 0 ? sn.shape().size() / len : 0;
    using K = row_adjoint_kernel<N::kind, N::axis, std::remove_cvref_t<decltype(u.g_)>, typename SN::buffer_type, T, S>;
    if (count > 0) l_->launch(shape_for(count, o_.launch, l_->max_threads()), K{u.g_, sn.buf_, sn.extra_.rstd, sn.extra_.gin, sn.shape()});
  }
  template <class T>
  void clear(T* p, index_t n) {
    if (n > 0) l_->fill_zero(p, std::size_t(n) * sizeof(T));
  }
  template <class E>
  value_type_t<E> value(E const& e) {
    return detail::read_scalar(*l_, e, o_.launch);
  }
  // no plan element carries the loss value on the device
  template <class Root, class U>
  static constexpr bool carries_loss = false;
  template <class Root, class U>
  static constexpr bool carries_row_maxima = false;

 private:
  static void release(void* l, std::byte* p) noexcept {
    try {
      static_cast<L*>(l)->deallocate(p);
    } catch (...) {  // (a failed free leaks rather than throws out of a destructor)
    }
  }
  L* l_;
  backward_options o_;
  exec::call_workspace ws_;
};

}  // namespace gradix::grid
