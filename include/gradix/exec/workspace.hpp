#pragma once
/// \file
/// The buffers of one call (exec/save.hpp fills them): how many elements of each kind a
/// call keeps (saved_sizes), the thread's store for the nodes the save transform keeps
/// (node_arena, host memory: nodes are plain data that kernels take by value), and the
/// call's typed arrays carved from its executor's workspace (saved_space).

#include "gradix/config.hpp"
#include "gradix/core/error.hpp"
#include "gradix/exec/executor.hpp"
#include "gradix/expr/scan.hpp"

#include <cstddef>
#include <new>
#include <type_traits>

namespace gradix::detail {

/// Elements of each kind a call keeps: values (computed before the expression runs: kept
/// values, copies, arg-maxes, bags) and, in a backward call, adjoint buffers (written by the
/// backward's plan elements). A scan keeps each step's values and shares one set of adjoint
/// buffers between its steps (exec/save_scan.hpp, keep_scan).
struct saved_sizes {
  std::size_t nf = 0;  // float
  std::size_t nd = 0;  // double
  std::size_t nl = 0;  // long double
  std::size_t ni = 0;  // index_t (arg-max coordinates of kept max reductions, bags)
  std::size_t af = 0, ad = 0, al = 0;  // adjoint buffers: float, double, long double
  bool argmax = false;  // a backward call: kept max reductions keep their arg-max too
  // one step of a scan whose steps' values are all kept (a backward call without
  // gx::recompute_steps): its products' and lets' adjoints are among the step's own values,
  // so that each step's stay after it (a product's weight gradient then takes one gemm over
  // every step: exec/sweep.hpp, sweep_deferral)
  bool step_adjoints = false;
  constexpr std::size_t bytes() const {
    auto up = [](std::size_t b) { return (b + 63) / 64 * 64; };
    return up(nd * sizeof(double)) + up(nf * sizeof(float)) + up(nl * sizeof(long double)) +
           up(ni * sizeof(index_t)) + up(ad * sizeof(double)) + up(af * sizeof(float)) +
           up(al * sizeof(long double));
  }
  template <class T>
  constexpr void add(std::size_t n) {
    if constexpr (std::is_same_v<T, float>) nf += n;
    else if constexpr (std::is_same_v<T, double>) nd += n;
    else if constexpr (std::is_same_v<T, index_t>) ni += n;
    else nl += n;
  }
  template <class T>
  constexpr void add_adjoint(std::size_t n) {
    if constexpr (std::is_same_v<T, float>) af += n;
    else if constexpr (std::is_same_v<T, double>) ad += n;
    else al += n;
  }
  constexpr void add_all(saved_sizes const& o) {
    nf += o.nf;
    nd += o.nd;
    nl += o.nl;
    ni += o.ni;
    af += o.af;
    ad += o.ad;
    al += o.al;
  }
};

/// A thread's store for the nodes the save transform keeps (saved_node::node_ points at
/// them): chunks that only grow and never move, used as a stack by the calls of that thread
/// (a call takes from its mark and gives back to it when it ends), so that a warm call
/// allocates nothing. Its size is not known before the transform runs (a kept node's type
/// is the transformed one), hence chunks rather than the workspace's one reservation.
struct node_arena {
  struct chunk {
    std::byte* p;
    std::size_t cap;
  };
  struct mark {
    std::size_t ci, off;
  };
  chunk* chunks_ = nullptr;
  std::size_t n_ = 0, cap_ = 0;  // chunks held, and room for that many
  std::size_t ci_ = 0, off_ = 0;  // where the next node goes
  node_arena() = default;
  node_arena(node_arena const&) = delete;
  node_arena& operator=(node_arena const&) = delete;
  ~node_arena() {
    for (std::size_t k = 0; k < n_; ++k) ::operator delete(chunks_[k].p, std::align_val_t{64});
    ::operator delete(chunks_);
  }
  mark here() const { return {ci_, off_}; }
  void back_to(mark m) {
    ci_ = m.ci;
    off_ = m.off;
  }
  /// b bytes (a multiple of 16) that stay put until the mark before them is given back;
  /// std::bad_alloc when a chunk cannot be had.
  void* take(std::size_t b) {
    // the current chunk, then the chunks after it (held from earlier calls), then a new one
    while (ci_ < n_) {
      if (off_ + b <= chunks_[ci_].cap) {
        void* p = chunks_[ci_].p + off_;
        off_ += b;
        return p;
      }
      if (ci_ + 1 >= n_) break;
      ++ci_;
      off_ = 0;
    }
    std::size_t want = n_ ? 2 * chunks_[n_ - 1].cap : std::size_t(64) << 10;  // at least 64 KiB
    if (want < b) want = b;
    if (n_ == cap_) {
      std::size_t const nc = cap_ ? 2 * cap_ : 8;
      auto* q = static_cast<chunk*>(::operator new(nc * sizeof(chunk)));
      for (std::size_t k = 0; k < n_; ++k) q[k] = chunks_[k];
      ::operator delete(chunks_);
      chunks_ = q;
      cap_ = nc;
    }
    chunks_[n_] = chunk{static_cast<std::byte*>(::operator new(want, std::align_val_t{64})), want};
    ci_ = n_++;
    off_ = b;
    return chunks_[ci_].p;
  }
};
[[gnu::noinline]] inline node_arena& thread_node_arena() {
  thread_local node_arena a;
  return a;
}

/// The buffers of one call on executor X: typed arrays carved from the thread's workspace
/// on X's memory (or, in constant evaluation and for a call nested in another on the same
/// thread, allocated for this call alone), handed out in order by take<T>(n).
template <exec::executor X>
class saved_space {
 public:
  constexpr saved_space(saved_sizes const& z, X& ex) : z_(z), ex_(&ex) {
    if (std::is_constant_evaluated()) {
      // value-initialized arrays: constant evaluation (clang's, strictly) assigns only to
      // objects whose lifetime has begun, which std::allocator::allocate does not start
      own_ = true;
      if (z.nf) f_ = new float[z.nf]{};
      if (z.nd) d_ = new double[z.nd]{};
      if (z.nl) l_ = new long double[z.nl]{};
      if (z.ni) i_ = new index_t[z.ni]{};
      if (z.af) fa_ = new float[z.af]{};
      if (z.ad) da_ = new double[z.ad]{};
      if (z.al) la_ = new long double[z.al]{};
      return;
    }
    take_from_workspace(z);
  }
  /// (run time only) A scan step's buffers: carved from region r of the call's workspace
  /// (expr/scan.hpp), nothing taken from the workspace itself: its values are copy `step`
  /// of the region's r.copies, buffer by buffer (take), its adjoint buffers the region's; the
  /// nodes it keeps are given back when it ends, unless keep_nodes (the last step's, which
  /// the call keeps).
  saved_space(saved_sizes const& z, X& ex, scan_region const& r, std::size_t step, bool keep_nodes)
      : z_(z),
        ex_(&ex),
        f_(r.f),
        d_(r.d),
        l_(r.l),
        i_(r.i),
        fa_(r.fa),
        da_(r.da),
        la_(r.la),
        copies_(r.copies),
        step_(step),
        keep_nodes_(keep_nodes) {}
  /// Marks the thread's node arena now (run time), so that the nodes kept from here on, by
  /// this space or by spaces made after it, are given back when this one ends.
  void hold_arena() {
    if (!arena_) {
      arena_ = &thread_node_arena();
      mark_ = arena_->here();
    }
  }
  /// The sizes this space was made for.
  constexpr saved_sizes const& sizes() const { return z_; }
  // (run time only: the thread's workspace, or a buffer of this call when nested)
  void take_from_workspace(saved_sizes const& z) {
    std::size_t need = z.bytes();
    if (need == 0) return;
    exec::call_workspace& w = ex_->workspace();
    std::byte* base = nullptr;
    if (w.top_ == 0) {
      if (need > w.cap_) {  // grow (nothing of the workspace is in use)
        std::size_t b = need > 2 * w.cap_ ? need : 2 * w.cap_;
        std::byte* q = ex_->allocate(b);  // std::bad_alloc: nothing changed
        if (w.p_) ex_->deallocate(w.p_);
        w.p_ = q;
        w.cap_ = b;
      }
      base = w.p_;
      w.top_ = need;
      ws_ = &w;
    } else {  // nested in another call of this thread: buffers of its own
      base = ex_->allocate(need);
      heap_ = base;
    }
    auto up = [](std::size_t b) { return (b + 63) / 64 * 64; };
    d_ = reinterpret_cast<double*>(base);
    f_ = reinterpret_cast<float*>(base + up(z.nd * sizeof(double)));
    std::byte* lp = base + up(z.nd * sizeof(double)) + up(z.nf * sizeof(float));
    l_ = reinterpret_cast<long double*>(lp);
    i_ = reinterpret_cast<index_t*>(lp + up(z.nl * sizeof(long double)));
    std::byte* ap = lp + up(z.nl * sizeof(long double)) + up(z.ni * sizeof(index_t));
    da_ = reinterpret_cast<double*>(ap);
    fa_ = reinterpret_cast<float*>(ap + up(z.ad * sizeof(double)));
    la_ = reinterpret_cast<long double*>(ap + up(z.ad * sizeof(double)) + up(z.af * sizeof(float)));
  }
  void release() {
    if (ws_) ws_->top_ = 0;
    if (heap_) ex_->deallocate(heap_);
    if (arena_ && !keep_nodes_) arena_->back_to(mark_);
  }
  saved_space(saved_space const&) = delete;
  saved_space& operator=(saved_space const&) = delete;
  constexpr ~saved_space() {
    if (own_) {
      delete[] f_;
      delete[] d_;
      delete[] l_;
      delete[] i_;
      delete[] fa_;
      delete[] da_;
      delete[] la_;
      while (nodes_) {
        node_holder_base* next = nodes_->next;
        delete nodes_;
        nodes_ = next;
      }
      return;
    }
    release();
  }
  /// A copy of node r kept for the call (a saved node points at it): in the thread's node
  /// arena at run time (nodes are plain data, trivially destructible; given back when the
  /// call ends), in a holder of its own in constant evaluation.
  template <class R>
  constexpr R const* keep_node(R const& r) {
    if (std::is_constant_evaluated()) {
      auto* h = new node_holder<R>(r);
      h->next = nodes_;
      nodes_ = h;
      return &h->value;
    } else {
      static_assert(std::is_trivially_destructible_v<R> && alignof(R) <= 16, "gradix internal: a kept node is plain data");
      if (!arena_) {
        arena_ = &thread_node_arena();
        mark_ = arena_->here();
      }
      void* p = arena_->take((sizeof(R) + 15) / 16 * 16);
      return ::new (p) R(r);
    }
  }
  /// The executor that fills the buffers.
  constexpr X& ex() const { return *ex_; }
  /// Whether kept max reductions keep their arg-max (a backward call).
  constexpr bool argmax() const { return z_.argmax; }
  /// The next n elements of T (values): in a scan step's space, copy step_ of the next
  /// copies_ consecutive buffers of n (one per step).
  template <class T>
  constexpr T* take(std::size_t n) {
    auto at = [&](auto* base, std::size_t& used) {
      std::size_t const u = used;
      used += n;
      return base + copies_ * u + step_ * n;
    };
    if constexpr (std::is_same_v<T, float>) return at(f_, uf_);
    else if constexpr (std::is_same_v<T, double>) return at(d_, ud_);
    else if constexpr (std::is_same_v<T, index_t>) return at(i_, ui_);
    else return at(l_, ul_);
  }
  /// The next n elements of T among the adjoint buffers (a backward call's).
  template <class T>
  constexpr T* take_adjoint(std::size_t n) {
    if constexpr (std::is_same_v<T, float>) return fa_ + (ufa_ += n) - n;
    else if constexpr (std::is_same_v<T, double>) return da_ + (uda_ += n) - n;
    else return la_ + (ula_ += n) - n;
  }
  /// The next n elements of T for a product's or a let's adjoint: among the step's own
  /// values in a scan step that keeps its adjoints (saved_sizes::step_adjoints), else among
  /// the adjoint buffers.
  template <class T>
  constexpr T* take_step_adjoint(std::size_t n) {
    return z_.step_adjoints ? take<T>(n) : take_adjoint<T>(n);
  }
  /// (run time) Room for n objects of trivially destructible R in the thread's node arena,
  /// uninitialized, kept until this space ends (a scan's steps).
  template <class R>
  R* keep_array(std::size_t n) {
    static_assert(std::is_trivially_destructible_v<R> && alignof(R) <= 16);
    hold_arena();
    return static_cast<R*>(arena_->take((n * sizeof(R) + 15) / 16 * 16));
  }

 private:
  saved_sizes z_;
  X* ex_;
  float* f_ = nullptr;
  double* d_ = nullptr;
  long double* l_ = nullptr;
  index_t* i_ = nullptr;
  float* fa_ = nullptr;
  double* da_ = nullptr;
  long double* la_ = nullptr;
  std::size_t uf_ = 0, ud_ = 0, ul_ = 0, ui_ = 0;
  std::size_t ufa_ = 0, uda_ = 0, ula_ = 0;
  std::size_t copies_ = 1, step_ = 0;  // (a scan step's: see take)
  bool keep_nodes_ = false;
  node_arena* arena_ = nullptr;  // (run time) the thread's, from mark_ on
  node_arena::mark mark_{};
  // constant evaluation: the kept nodes, each in a holder of its own
  struct node_holder_base {
    node_holder_base* next = nullptr;
    constexpr virtual ~node_holder_base() = default;
  };
  template <class R>
  struct node_holder : node_holder_base {
    R value;
    constexpr explicit node_holder(R const& r) : value(r) {}
    constexpr ~node_holder() override {}  // (declared: g++ 12 rejects the implicit one in constant evaluation)
  };
  node_holder_base* nodes_ = nullptr;
  bool own_ = false;
  exec::call_workspace* ws_ = nullptr;
  std::byte* heap_ = nullptr;
};

}  // namespace gradix::detail
