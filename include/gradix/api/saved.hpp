#pragma once
/// \file
/// The save transform: before a call (eval, assign, value, backward, grad) runs an
/// expression, every value the cost rule keeps (ad/save.hpp) is computed once, innermost
/// first, into a buffer, and the expression the call runs reads those buffers
/// (saved_node). Backward kernels read them too, so a reduction inside an expression costs
/// its own size once, not once per element that reads it.
///
/// Buffers come from a workspace owned by the calling thread: it only grows, so a warm call
/// allocates nothing; `workspace_bytes(e)` tells what a call on e needs. A call takes its
/// buffers from the top of its thread's workspace and gives them back when it returns (a
/// call made while another is running on the same thread, which gradix itself never does,
/// gets buffers of its own). In constant evaluation every kind of buffer is a separate
/// value-initialized array (new[]), freed when the call returns.

#include "gradix/ad/plan.hpp"
#include "gradix/ad/save.hpp"
#include "gradix/ad/product.hpp"
#include "gradix/backend/host/assign.hpp"
#include "gradix/backend/host/gemm.hpp"
#include "gradix/config.hpp"
#include "gradix/core/error.hpp"
#include "gradix/eval/bag.hpp"
#include "gradix/eval/let.hpp"
#include "gradix/eval/map.hpp"
#include "gradix/eval/saved.hpp"
#include "gradix/eval/row.hpp"
#include "gradix/op/math.hpp"
#include "gradix/expr/elementwise.hpp"
#include "gradix/expr/bag.hpp"
#include "gradix/expr/index.hpp"
#include "gradix/expr/let.hpp"
#include "gradix/expr/matmul.hpp"
#include "gradix/expr/param.hpp"
#include "gradix/expr/rebuild.hpp"
#include "gradix/expr/reduce.hpp"
#include "gradix/expr/saved.hpp"
#include "gradix/expr/take.hpp"
#include "gradix/expr/view.hpp"
#include "gradix/expr/visit.hpp"

#include <algorithm>
#include <cstddef>
#include <memory>
#include <new>
#include <type_traits>

namespace gradix {

namespace detail {

/// Elements of each kind a call keeps.
struct saved_sizes {
  std::size_t nf = 0;  // float
  std::size_t nd = 0;  // double
  std::size_t nl = 0;  // long double
  std::size_t ni = 0;  // index_t (arg-max coordinates of kept max reductions)
  bool argmax = false;  // a backward call: kept max reductions keep their arg-max too
  constexpr std::size_t bytes() const {
    auto up = [](std::size_t b) { return (b + 63) / 64 * 64; };
    return up(nd * sizeof(double)) + up(nf * sizeof(float)) + up(nl * sizeof(long double)) +
           up(ni * sizeof(index_t));
  }
  template <class T>
  constexpr void add(std::size_t n) {
    if constexpr (std::is_same_v<T, float>) nf += n;
    else if constexpr (std::is_same_v<T, double>) nd += n;
    else if constexpr (std::is_same_v<T, index_t>) ni += n;
    else nl += n;
  }
};

/// A thread's workspace: one byte buffer that only grows, used as a stack by the calls of
/// that thread.
struct saved_workspace {
  std::byte* p_ = nullptr;
  std::size_t cap_ = 0, top_ = 0;
  saved_workspace() = default;
  saved_workspace(saved_workspace const&) = delete;
  saved_workspace& operator=(saved_workspace const&) = delete;
  ~saved_workspace() { ::operator delete(p_, std::align_val_t{64}); }
};
[[gnu::noinline]] inline saved_workspace& thread_workspace() {  // out of line: see host::scratch()
  thread_local saved_workspace w;
  return w;
}

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

/// The buffers of one call: typed arrays carved from the thread's workspace (or, in
/// constant evaluation and for a call nested in another on the same thread, allocated for
/// this call alone), handed out in order by take<T>(n).
class saved_space {
 public:
  constexpr explicit saved_space(saved_sizes const& z) : z_(z) {
    if (std::is_constant_evaluated()) {
      // value-initialized arrays: constant evaluation (clang's, strictly) assigns only to
      // objects whose lifetime has begun, which std::allocator::allocate does not start
      own_ = true;
      if (z.nf) f_ = new float[z.nf]{};
      if (z.nd) d_ = new double[z.nd]{};
      if (z.nl) l_ = new long double[z.nl]{};
      if (z.ni) i_ = new index_t[z.ni]{};
      return;
    }
    take_from_workspace(z);
  }
  // (run time only: the thread's workspace, or a buffer of this call when nested)
  void take_from_workspace(saved_sizes const& z) {
    std::size_t need = z.bytes();
    if (need == 0) return;
    saved_workspace& w = thread_workspace();
    std::byte* base = nullptr;
    if (w.top_ == 0) {
      if (need > w.cap_) {  // grow (nothing of the workspace is in use)
        std::size_t b = need > 2 * w.cap_ ? need : 2 * w.cap_;
        void* q = ::operator new(b, std::align_val_t{64});  // std::bad_alloc: nothing changed
        ::operator delete(w.p_, std::align_val_t{64});
        w.p_ = static_cast<std::byte*>(q);
        w.cap_ = b;
      }
      base = w.p_;
      w.top_ = need;
      ws_ = &w;
    } else {  // nested in another call of this thread: buffers of its own
      base = static_cast<std::byte*>(::operator new(need, std::align_val_t{64}));
      heap_ = base;
    }
    auto up = [](std::size_t b) { return (b + 63) / 64 * 64; };
    d_ = reinterpret_cast<double*>(base);
    f_ = reinterpret_cast<float*>(base + up(z.nd * sizeof(double)));
    std::byte* lp = base + up(z.nd * sizeof(double)) + up(z.nf * sizeof(float));
    l_ = reinterpret_cast<long double*>(lp);
    i_ = reinterpret_cast<index_t*>(lp + up(z.nl * sizeof(long double)));
  }
  void release() {
    if (ws_) ws_->top_ = 0;
    if (heap_) ::operator delete(heap_, std::align_val_t{64});
    if (arena_) arena_->back_to(mark_);
  }
  saved_space(saved_space const&) = delete;
  saved_space& operator=(saved_space const&) = delete;
  constexpr ~saved_space() {
    if (own_) {
      delete[] f_;
      delete[] d_;
      delete[] l_;
      delete[] i_;
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
  /// Whether kept max reductions keep their arg-max (a backward call).
  constexpr bool argmax() const { return z_.argmax; }
  /// The next n elements of T.
  template <class T>
  constexpr T* take(std::size_t n) {
    if constexpr (std::is_same_v<T, float>) return f_ + (uf_ += n) - n;
    else if constexpr (std::is_same_v<T, double>) return d_ + (ud_ += n) - n;
    else if constexpr (std::is_same_v<T, index_t>) return i_ + (ui_ += n) - n;
    else return l_ + (ul_ += n) - n;
  }

 private:
  saved_sizes z_;
  float* f_ = nullptr;
  double* d_ = nullptr;
  long double* l_ = nullptr;
  index_t* i_ = nullptr;
  std::size_t uf_ = 0, ud_ = 0, ul_ = 0, ui_ = 0;
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
  saved_workspace* ws_ = nullptr;
  std::byte* heap_ = nullptr;
};

// ---------------------------------------------------------------------------------------
// The transform, and the sizes it needs (the same recursion: counting first, so that the
// buffers are taken from one reservation and never move while they are filled).

/// The node a kept N stands for: N itself, or the operand of a save mark.
template <class N>
struct kept_node {
  using type = N;
};
template <class A>
struct kept_node<save_node<A>> {
  using type = A;
};

// ---------------------------------------------------------------------------------------
// Matrix products (expr/matmul.hpp): the operands as a gemm reads them, in place or copied.

template <class X>
struct is_unsqueeze : std::false_type {};
template <class A, std::size_t Axis>
struct is_unsqueeze<unsqueeze_node<A, Axis>> : std::true_type {
  static constexpr std::size_t axis = Axis;
};
/// The data and strides of operand x when a product can read it in place: a view, a
/// parameter, a kept value's buffer, and permutes and unsqueezes of those. false otherwise.
template <class T, class X, std::size_t R>
constexpr bool strided_of(X const& x, T const*& p, array<index_t, R>& st) {
  if constexpr (is_view_v<X>) {
    if constexpr (std::is_same_v<std::remove_const_t<typename X::value_type>, T> &&
                  std::is_same_v<typename X::space_type, host_space>) {
      p = x.data_;
      st = x.strides_;
      return true;
    } else {
      return false;
    }
  } else if constexpr (is_param_node<X>::value) {
    return strided_of<T>(x.view_, p, st);
  } else if constexpr (is_saved_node<X>::value) {
    return strided_of<T>(x.buf_, p, st);
  } else if constexpr (requires { X::perm; x.arg_; }) {
    array<index_t, R> sa{};
    if (!strided_of<T>(x.arg_, p, sa)) return false;
    for (std::size_t k = 0; k < R; ++k) st[k] = sa[X::perm[k]];
    return true;
  } else if constexpr (is_unsqueeze<X>::value) {
    array<index_t, R - 1> sa{};
    if (!strided_of<T>(x.arg_, p, sa)) return false;
    for (std::size_t j = 0, k = 0; j < R; ++j) st[j] = j == is_unsqueeze<X>::axis ? 1 : sa[k++];
    return true;
  } else {
    return false;
  }
}
/// Operand x of rank 2 or 3 as a product reads it in place; ok false when it must be copied
/// first (not a view of memory, or, for a BLAS, no unit stride along a matrix axis).
template <class T, class X>
constexpr bool in_place_operand(X const& x, mat_ref<T>& r) {
  constexpr std::size_t R = shape_of_t<X>::rank;
  array<index_t, R> st{};
  T const* p = nullptr;
  if (!strided_of<T>(x, p, st)) return false;
  r = R == 3 ? mat_ref<T>{p, st[R - 2], st[R - 1], st[0]} : mat_ref<T>{p, st[R - 2], st[R - 1], 0};
  if constexpr (host::uses_blas_v<T>) {
    if (std::is_constant_evaluated()) return true;
    auto const sh = x.shape();
    return host::blas_form_of(sh.extent(R - 2), sh.extent(R - 1), r.rs, r.cs).ok;
  } else {
    return true;
  }
}
/// Whether the save transform copies operand x (of the expression before the transform) of
/// a product: a product or a save mark becomes a kept buffer, read in place.
template <class T, class X>
constexpr bool copies_operand(X const& x) {
  if constexpr (is_matmul_node<X>::value || ad::is_save_node<X>::value) {
    return false;
  } else {
    mat_ref<T> r;
    return !in_place_operand<T>(x, r);
  }
}
/// The workspace a product N needs beyond its value: copies of its operands, and in a
/// backward call its adjoint and its operands' adjoints.
template <class N>
constexpr void count_product(N const& n, saved_sizes& z) {
  using T = value_type_t<N>;
  if (copies_operand<T>(n.lhs_)) z.template add<T>(std::size_t(n.lhs_.shape().size()));
  if (copies_operand<T>(n.rhs_)) z.template add<T>(std::size_t(n.rhs_.shape().size()));
  if (!z.argmax) return;
  z.template add<T>(std::size_t(n.shape().size()));
  if constexpr (ad::reaches_param_v<decltype(n.lhs_)>) z.template add<T>(std::size_t(n.lhs_.shape().size()));
  if constexpr (ad::reaches_param_v<decltype(n.rhs_)>) z.template add<T>(std::size_t(n.rhs_.shape().size()));
}
/// Computes product n (its operands transformed already) into c (row-major, n's shape): its
/// operands read in place or copied into buffers of s first, then one gemm (per batch
/// element, or one for all when they stack). Returns the operands as the gemm read them.
template <class N>
constexpr auto compute_product(N const& n, saved_space& s, value_type_t<N>* c) {
  using T = value_type_t<N>;
  auto operand = [&](auto const& x) {
    mat_ref<T> r;
    if (in_place_operand<T>(x, r)) return r;
    using X = std::remove_cvref_t<decltype(x)>;
    constexpr std::size_t R = shape_of_t<X>::rank;
    T* q = s.template take<T>(std::size_t(x.shape().size()));
    tensor_view<T, shape_of_t<X>, row_major, host_space> v(q, x.shape());
    host::assign(v, x);
    index_t const rows = x.shape().extent(R - 2), cols = x.shape().extent(R - 1);
    return mat_ref<T>{q, cols, 1, R == 3 ? rows * cols : 0};
  };
  struct operands {
    mat_ref<T> a, b;
  };
  operands const o{operand(n.lhs_), operand(n.rhs_)};
  host::gemm(n.batch(), n.rows(), n.cols(), n.inner(), o.a, o.b, c, n.cols(), N::rank == 3 ? n.rows() * n.cols() : 0,
             false);
  return o;
}
/// A product kept: computed into a buffer of the call (compute_product); in a backward call
/// its adjoint buffers are taken too.
template <class N>
constexpr auto keep_product(N const& n, saved_space& s) {
  using T = value_type_t<N>;
  using S = shape_of_t<N>;
  using L = saved_layout_t<N>;
  T* c = s.template take<T>(std::size_t(n.shape().size()));
  auto const o = compute_product(n, s, c);
  using R = saved_node<N, L>;
  R r{s.keep_node(n), typename R::buffer_type(tensor_view<T, S, L, host_space>(c, n.shape()))};
  r.extra_.a = o.a;
  r.extra_.b = o.b;
  if (s.argmax()) {
    r.extra_.gc = workspace_grad<T, S>(s.template take<T>(std::size_t(n.shape().size())), n.shape());
    if constexpr (ad::reaches_param_v<decltype(n.lhs_)>)
      r.extra_.ga = s.template take<T>(std::size_t(n.lhs_.shape().size()));
    if constexpr (ad::reaches_param_v<decltype(n.rhs_)>)
      r.extra_.gb = s.template take<T>(std::size_t(n.rhs_.shape().size()));
  }
  return r;
}

template <bool Under, class N>
constexpr void count_saved(N const& n, saved_sizes& z) {
  if constexpr (is_let_node<N>::value) {
    // the operand's kept values, its value (unless its root keeps it), in a backward call
    // its adjoint, then the body's
    using Z = std::remove_cvref_t<decltype(n.z_)>;
    using T = value_type_t<Z>;
    count_saved<true>(n.z_, z);
    if constexpr (!ad::keeps_value_v<Z, true>) z.template add<T>(std::size_t(n.z_.shape().size()));
    if constexpr (ad::reaches_param_v<Z>)
      if (z.argmax) z.template add<T>(std::size_t(n.z_.shape().size()));
    count_saved<Under>(n.body_, z);
    return;
  } else if constexpr (is_bound_let_node<N>::value) {
    count_saved<Under>(n.arg_, z);
    return;
  }
  if constexpr (ad::keeps_value_v<N, Under>) {
    z.template add<value_type_t<N>>(std::size_t(n.shape().size()));
    // the node kept: N, or the operand of a save mark (a gx::saved(max<...>(x)) keeps the
    // max, and its arg-max too, as keep_value does)
    using K = typename kept_node<N>::type;
    if constexpr (ad::needs_argmax<K>::value)
      if (z.argmax) z.template add<index_t>(std::size_t(n.shape().size()) * std::size_t(__builtin_popcountll(K::mask)));
  }
  if constexpr (ad::keeps_value_v<N, Under>) {
    // a kept sum or mean: its adjoint buffer, in a backward call
    using K = typename kept_node<N>::type;
    if constexpr (stages_reduction_v<K> && ad::reaches_param_v<K>)
      if (z.argmax) z.template add<value_type_t<N>>(std::size_t(n.shape().size()));
  }
  if constexpr (is_matmul_node<N>::value) count_product(n, z);
  if constexpr (is_row_node<N>::value) {
    if constexpr (N::norm) {  // r per row
      index_t const len = n.shape().extent(N::axis);
      z.template add<value_type_t<N>>(std::size_t(len > 0 ? n.shape().size() / len : 0));
    }
    if constexpr (ad::reaches_param_v<N>)
      if (z.argmax) z.template add<value_type_t<N>>(2 * std::size_t(n.shape().size()));  // gout, gin
  }
  if constexpr (is_segment_sum_node<N>::value) {
    if (z.argmax) {  // bag_of and scale per position, the adjoint of the result
      z.template add<index_t>(std::size_t(n.arg_.shape().extent(0)));
      z.template add<value_type_t<N>>(std::size_t(n.arg_.shape().extent(0)));
      z.template add<value_type_t<N>>(std::size_t(n.shape().size()));
    }
  }
  constexpr bool U = ad::operands_under_v<N>;
  if constexpr (is_saved_node<N>::value) {
  } else if constexpr (requires { n.lhs_; n.rhs_; }) {
    count_saved<U>(n.lhs_, z);
    count_saved<U>(n.rhs_, z);
  } else if constexpr (requires { n.arg_; }) {
    count_saved<U>(n.arg_, z);
  }
}

/// A node kept: its value computed into a buffer of the call, read from there.
template <class N>
constexpr auto keep_value_assigned(N const& n, saved_space& s);
/// A segment sum kept: its value, and in a backward call the bag and scale of each position
/// and a buffer for its adjoint.
/// The value of segment sum n into row-major c: per bag, its rows added one after another
/// into the bag's row of c (the contiguous axis in SIMD packs), bags in parallel; then the
/// mean's scale. The same sums, in the same order, as the evaluator's.
template <class N, class T>
constexpr void segment_values(N const& n, T* c) {
  using S = shape_of_t<N>;
  constexpr std::size_t R = S::rank;
  index_t const nb = n.shape().extent(0), width = R == 2 ? n.shape().extent(1) : 1;
  ev::evaluator<std::remove_cvref_t<decltype(n.arg_)>> const ev(n.arg_);
  auto bags = [&](index_t b0, index_t b1) {
    for (index_t b = b0; b < b1; ++b) {
      T* const row = c + b * width;
      for (index_t d = 0; d < width; ++d) row[d] = T(0);
      for (index_t j = n.begin(b), e = n.end(b); j < e; ++j) {
        if constexpr (R == 1) {
          row[0] += T(ev(coord<1>{j}));
        } else {
          auto const in = ev.template outer<1>(coord<2>{j, 0});
          index_t d = 0;
#if defined(GRADIX_HAS_VECTOR_EXT)
          if (!std::is_constant_evaluated()) {
            constexpr int W = simd::width<T>;
            for (; d + W <= width; d += W)
              simd::store<T, W>(row + d, simd::load<T, W>(row + d) + ev::pack_as<T, W>(in, d));
          }
#endif
          for (; d < width; ++d) row[d] += T(in.elem(d));
        }
      }
      if (n.mean_ && n.end(b) > n.begin(b)) {
        T const k = T(n.end(b) - n.begin(b));
        for (index_t d = 0; d < width; ++d) row[d] = T(row[d] / k);
      }
    }
  };
  if (std::is_constant_evaluated()) {
    bags(0, nb);
  } else {
    index_t const len = n.arg_.shape().extent(0);
    index_t const per_bag = nb > 0 ? (len / nb + 1) * width : 1;
    host::parallel_ranges(nb, bags, std::max<index_t>(1, host::parallel_min_elements / per_bag));
  }
}

template <class N>
constexpr auto keep_segments(N const& n, saved_space& s) {
  using T = value_type_t<N>;
  using L = saved_layout_t<N>;
  using S = shape_of_t<N>;
  static_assert(S::rank <= 2, "gradix::segment_sum: operands of rank 1 or 2");
  T* c = s.template take<T>(std::size_t(n.shape().size()));
  segment_values(n, c);
  using R = saved_node<N, L>;
  R r{s.keep_node(n), typename R::buffer_type(tensor_view<T, S, L, host_space>(c, n.shape()))};
  if (!s.argmax()) return r;
  index_t const len = n.arg_.shape().extent(0), nb = n.shape().extent(0);
  index_t* bag = s.template take<index_t>(std::size_t(len));
  T* sc = s.template take<T>(std::size_t(len));
  for (index_t b = 0; b < nb; ++b) {
    T const f = n.scale(b);
    for (index_t j = n.begin(b), e = n.end(b); j < e; ++j) {
      bag[j] = b;
      sc[j] = f;
    }
  }
  r.extra_.bag_of = bag;
  r.extra_.scale = sc;
  r.extra_.gout = workspace_grad<T, shape_of_t<N>>(s.template take<T>(std::size_t(n.shape().size())), n.shape());
  return r;
}
/// The rows of row node n (expr/row.hpp) over its axis into row-major c, rows in parallel.
/// softmax: three passes over the operand (the max, the exponentials written and summed,
/// the quotients; log_softmax: x - m - log(sum)); the norms: the mean (layer norm), the sum
/// of squared deviations, then (x - mean) / sqrt(var + eps), and 1 / sqrt(var + eps) per row
/// into rstd. Along a contiguous last axis the passes run in SIMD packs, the lanes of each
/// sum combined in a fixed order.
template <class N, class T>
constexpr void row_values(N const& n, T* c, T* rstd) {
  using S = shape_of_t<N>;
  constexpr std::size_t R = S::rank, Ax = N::axis;
  ev::evaluator<std::remove_cvref_t<decltype(n.arg_)>> const ev(n.arg_);
  auto const ext = n.shape().extents();
  index_t const len = ext[Ax];
  index_t stride = 1;  // of the axis in c
  for (std::size_t j = Ax + 1; j < R; ++j) stride *= ext[j];
  index_t const count = len > 0 ? n.shape().size() / len : 0;
  T const eps = n.eps_;
  auto rows = [&](index_t r0, index_t r1) {
    for (index_t r = r0; r < r1; ++r) {
      coord<R> o{};  // row r: the coordinates other than Ax, row-major
      index_t q = r;
      for (std::size_t j = R; j-- > 0;) {
        if (j == Ax) continue;
        o[j] = q % ext[j];
        q /= ext[j];
      }
      index_t base = 0;
      for (std::size_t j = 0; j < R; ++j) base = base * ext[j] + o[j];
      T* const out = c + base;
      auto const in = ev.template outer<int(Ax)>(o);
#if defined(GRADIX_HAS_VECTOR_EXT)
      constexpr int W = simd::width<T>;
      using X = simd::pack<T, W>;
      bool packs = !std::is_constant_evaluated() && stride == 1;
#endif
      // sum over the row of f(x), f on a T or a pack
      auto row_sum = [&](auto&& f) {
        T acc = 0;
        index_t i = 0;
#if defined(GRADIX_HAS_VECTOR_EXT)
        if (packs) {
          X a{};
          for (; i + W <= len; i += W) a += f(X(ev::pack_as<T, W>(in, i)));
          for (int w = 0; w < W; ++w) acc += a[w];
        }
#endif
        for (; i < len; ++i) acc += f(T(in.elem(i)));
        return acc;
      };
      // out[i] = f(x_i), f on a T or a pack
      auto row_write = [&](auto&& f) {
        index_t i = 0;
#if defined(GRADIX_HAS_VECTOR_EXT)
        if (packs)
          for (; i + W <= len; i += W) simd::store<T, W>(out + i, f(X(ev::pack_as<T, W>(in, i))));
#endif
        for (; i < len; ++i) out[i * stride] = f(T(in.elem(i)));
      };
      if constexpr (N::norm) {
        T mean = 0;
        if constexpr (N::kind == row_kind::layer_norm) mean = T(row_sum([](auto x) { return x; }) / T(len));
        T const var = T(row_sum([&](auto x) {
                          auto d = x - mean;
                          return d * d;
                        }) /
                        T(len));
        T const sd = op::sqrt::value(T(var + eps));
        rstd[r] = T(T(1) / sd);
        row_write([&](auto x) { return decltype(x)((x - mean) / sd); });
      } else {
        T m = op::max_of::identity<T>();
        index_t i = 0;
#if defined(GRADIX_HAS_VECTOR_EXT)
        if (packs) {
          X mp = simd::splat<T, W>(op::max_of::identity<T>());
          for (; i + W <= len; i += W) mp = op::max_of::combine(mp, X(ev::pack_as<T, W>(in, i)));
          for (int w = 0; w < W; ++w) m = op::max_of::combine(m, T(mp[w]));
        }
#endif
        for (; i < len; ++i) m = op::max_of::combine(m, T(in.elem(i)));
        T sum = 0;
        i = 0;
#if defined(GRADIX_HAS_VECTOR_EXT)
        if (packs) {
          X sp{};
          for (; i + W <= len; i += W) {
            X e = op::exp::value(X(X(ev::pack_as<T, W>(in, i)) - m));
            simd::store<T, W>(out + i, e);
            sp += e;
          }
          for (int w = 0; w < W; ++w) sum += sp[w];
        }
#endif
        for (; i < len; ++i) {
          T e = op::exp::value(T(T(in.elem(i)) - m));
          out[i * stride] = e;
          sum += e;
        }
        if constexpr (N::kind == row_kind::log_softmax) {
          T const ls = op::log::value(sum);
          for (index_t k = 0; k < len; ++k) out[k * stride] = T(T(T(in.elem(k)) - m) - ls);
        } else {
          for (index_t k = 0; k < len; ++k) out[k * stride] = T(out[k * stride] / sum);
        }
      }
    }
  };
  if (std::is_constant_evaluated()) {
    rows(0, count);
  } else {
    host::parallel_ranges(count, rows, std::max<index_t>(1, host::parallel_min_elements / std::max<index_t>(1, 4 * len)));
  }
}
/// A row node kept: its rows (row_values; the norms' factor per row too), and in a backward
/// call the buffers of its adjoint and of its operand's.
template <class N>
constexpr auto keep_row(N const& n, saved_space& s) {
  using T = value_type_t<N>;
  using S = shape_of_t<N>;
  using L = saved_layout_t<N>;
  T* c = s.template take<T>(std::size_t(n.shape().size()));
  T* rstd = nullptr;
  if constexpr (N::norm) {
    index_t const len = n.shape().extent(N::axis);
    rstd = s.template take<T>(std::size_t(len > 0 ? n.shape().size() / len : 0));
  }
  row_values(n, c, rstd);
  using R = saved_node<N, L>;
  R r{s.keep_node(n), typename R::buffer_type(tensor_view<T, S, L, host_space>(c, n.shape()))};
  r.extra_.rstd = rstd;
  if constexpr (ad::reaches_param_v<N>) {
    if (s.argmax()) {
      r.extra_.gout = workspace_grad<T, S>(s.template take<T>(std::size_t(n.shape().size())), n.shape());
      r.extra_.gin = s.template take<T>(std::size_t(n.shape().size()));
    }
  }
  return r;
}
/// A reshape kept (expr/view.hpp, is_kept_reshape): its buffer holds the operand's elements
/// in logical row-major order, which is what a reshape is. So the operand is assigned into
/// the buffer seen with the operand's own shape (walking the operand's axes, its last one
/// innermost: no coordinate remap at all), or, when the operand is a kept row-major buffer
/// already, that buffer is the reshape's (nothing copied). In a backward call, the buffer of
/// its adjoint.
template <class N>
constexpr auto keep_reshape(N const& n, saved_space& s) {
  using T = value_type_t<N>;
  using S = shape_of_t<N>;
  using L = saved_layout_t<N>;
  using A = std::remove_cvref_t<decltype(n.arg_)>;
  T const* data = nullptr;
  if constexpr (is_saved_node<A>::value && std::is_same_v<typename A::layout_type, row_major>) {
    data = n.arg_.buf_.data();
  } else {
    T* p = s.template take<T>(std::size_t(n.shape().size()));
    tensor_view<T, shape_of_t<A>, row_major, host_space> dst(p, n.arg_.shape());
    host::assign(dst, n.arg_);
    data = p;
  }
  using R = saved_node<N, L>;
  R r{s.keep_node(n), typename R::buffer_type(data, n.shape())};
  if constexpr (ad::reaches_param_v<N>) {
    if (s.argmax()) r.extra_.gout = workspace_grad<T, S>(s.template take<T>(std::size_t(n.shape().size())), n.shape());
  }
  return r;
}
template <class N>
constexpr auto keep_value(N const& n, saved_space& s) {
  if constexpr (is_matmul_node<N>::value) return keep_product(n, s);
  else if constexpr (is_kept_reshape<N>::value) return keep_reshape(n, s);
  else if constexpr (is_segment_sum_node<N>::value) return keep_segments(n, s);
  else if constexpr (is_row_node<N>::value) return keep_row(n, s);
  else return keep_value_assigned(n, s);
}
template <class N>
constexpr auto keep_value_assigned(N const& n, saved_space& s) {
  using T = value_type_t<N>;
  using L = saved_layout_t<N>;
  using S = shape_of_t<N>;
  using Sp = std::conditional_t<std::is_void_v<space_of_t<N>>, host_space, space_of_t<N>>;
  T* p = s.template take<T>(std::size_t(n.shape().size()));
  tensor_view<T, S, L, Sp> buf(p, n.shape());
  host::assign(buf, n);
  using R = saved_node<N, L>;
  R r{s.keep_node(n), typename R::buffer_type(buf)};
  if constexpr (stages_reduction_v<N> && ad::reaches_param_v<N>) {
    if (s.argmax())
      r.extra_.gout = workspace_grad<T, S>(s.template take<T>(std::size_t(n.shape().size())), n.shape());
  }
  if constexpr (ad::needs_argmax<N>::value) {
    if (!s.argmax()) return r;
    // the arg-max of each output element, for the backward (one scan per element, in
    // parallel over the elements when there is enough work)
    constexpr std::size_t RO = S::rank;
    constexpr std::size_t nred = std::size_t(__builtin_popcountll(N::mask));
    using E = ev::evaluator<N>;
    index_t const count = n.shape().size();
    index_t* arg = s.template take<index_t>(std::size_t(count) * nred);
    E const eva(n);
    auto ext = n.shape().extents();
    auto fill = [&](index_t a, index_t b) {
      for (index_t k = a; k < b; ++k) {
        coord<RO> o{};
        index_t rem = k;
        for (std::size_t j = RO; j-- > 0;) {
          o[j] = rem % ext[j];
          rem /= ext[j];
        }
        auto c = ev::argmax_coord(eva, o);
        std::size_t q = 0;
        for (std::size_t j = 0; j < E::in_rank; ++j)
          if (E::reduced(j)) arg[std::size_t(k) * nred + q++] = c[j];
      }
    };
    if (std::is_constant_evaluated()) {
      fill(0, count);
    } else {
      index_t per = eva.count() > 0 ? eva.count() : 1;
      host::parallel_ranges(count, fill, std::max<index_t>(1, host::parallel_min_elements / per));
    }
    r.argmax_ = arg;
  }
  return r;
}

template <bool Under, class N>
constexpr auto with_saved(N const& n, saved_space& s);

/// The save transform as rebuild's f.
struct saving {
  static constexpr bool drops_marks = true;  // a save mark becomes its saved_node
  saved_space& s;
  template <bool U, class C>
  constexpr auto apply(C const& c) const {
    return with_saved<U>(c, s);
  }
};

/// A let transformed: its operand with its own kept values, its value in a buffer (its
/// root's, when the root keeps one, else one of the call's), the body bound to that buffer
/// and transformed, and in a backward call the buffer of the operand's adjoint.
template <bool Under, class Nm, class Z, class B>
constexpr auto keep_let(let_node<Nm, Z, B> const& n, saved_space& s) {
  using T = value_type_t<Z>;
  using S = shape_of_t<Z>;
  auto z2 = with_saved<true>(n.z_, s);
  using Z2 = decltype(z2);
  var_node<Nm> const v{n.z_.shape()};
  // in a backward call, the buffer of the operand's adjoint: every read of the placeholder
  // adds into it (its saved node holds it as the target of those kernels)
  T* gz = nullptr;
  if constexpr (Nm::reaches_param)
    if (s.argmax()) gz = s.template take<T>(std::size_t(n.z_.shape().size()));
  auto rep = [&] {
    if constexpr (is_saved_node<Z2>::value) {
      using R = saved_node<var_node<Nm>, typename Z2::layout_type>;
      R r{s.keep_node(v), typename R::buffer_type(z2.buf_)};
      if (gz) r.extra_.g = let_grad<T, S, Nm>(gz, n.z_.shape());
      return r;
    } else {
      using L = saved_layout_t<Z>;
      using R = saved_node<var_node<Nm>, L>;
      using Sp = std::conditional_t<std::is_void_v<space_of_t<Z>>, host_space, space_of_t<Z>>;
      tensor_view<T, S, L, Sp> buf(s.template take<T>(std::size_t(n.z_.shape().size())), n.z_.shape());
      host::assign(buf, z2);
      R r{s.keep_node(v), typename R::buffer_type(buf)};
      if (gz) r.extra_.g = let_grad<T, S, Nm>(gz, n.z_.shape());
      return r;
    }
  }();
  auto b2 = with_saved<Under>(bind_var<Nm>(n.body_, rep), s);
  return bound_let_node<Nm, Z2, decltype(b2)>{z2, b2, gz};
}

/// n with every value the rule keeps replaced by a saved_node over a filled buffer.
template <bool Under, class N>
constexpr auto with_saved(N const& n, saved_space& s) {
  if constexpr (is_let_node<N>::value) {
    return keep_let<Under>(n, s);
  } else if constexpr (ad::buffer_count<N, Under>::value == 0) {
    return n;  // nothing kept below: the node as it is (leaves, saved nodes, plain subtrees)
  } else {
    auto r = rebuild<ad::operands_under_v<N>>(n, saving{s});
    if constexpr (ad::keeps_value_v<N, Under>) return keep_value(r, s);
    else return r;
  }
}

/// Sizes of the buffers a call on the (prepared) expression e keeps.
template <class E>
constexpr saved_sizes saved_sizes_of(E const& e, bool argmax) {
  saved_sizes z;
  z.argmax = argmax;
  count_saved<true>(e, z);
  return z;
}

/// The buffers of a call of these sizes; out of memory is a gradix::error naming op, raised
/// before anything is written.
constexpr saved_space make_saved_space(saved_sizes const& z, char const* op) {
  try {
    return saved_space(z);
  } catch (std::bad_alloc const&) {
    fail(op, ": out of memory for the ", z.bytes(), " bytes of saved values (nothing written)");
  }
}

/// Calls f(e2), where e2 is the prepared expression e with the values it keeps computed
/// into buffers of this call (e itself when it keeps none); Backward: the call runs backward
/// kernels (kept max reductions keep their arg-max too). Out of memory for the buffers is a
/// gradix::error naming op, raised before anything is written.
template <bool Backward, class E, class F>
constexpr decltype(auto) run_with_saved(E const& e, char const* op, F&& f) {
  if constexpr (ad::buffer_count_v<E> == 0) {
    return f(e);
  } else {
    saved_sizes const z = saved_sizes_of(e, Backward);
    saved_space s = make_saved_space(z, op);
    auto const e2 = with_saved<true>(e, s);
    return f(e2);
  }
}

/// eval / assign of a product at the root (a forward call), straight into dst (row-major,
/// contiguous, e's shape, not read by e): the operands' kept values and copies in the call's
/// buffers, the gemm writing dst.
template <class N>
constexpr void product_into(N const& n, value_type_t<N>* dst, char const* op) {
  saved_sizes z;
  count_saved<true>(n.lhs_, z);
  count_saved<true>(n.rhs_, z);
  count_product(n, z);
  saved_space s = make_saved_space(z, op);
  auto a = with_saved<true>(n.lhs_, s);
  auto b = with_saved<true>(n.rhs_, s);
  compute_product(matmul_node<decltype(a), decltype(b)>{a, b, n.shape_}, s, dst);
}

}  // namespace detail

/// Bytes of workspace a backward or grad call on e uses for the values it keeps
/// (ad::buffer_count_v; docs/ad.md, "Saved values"): the kept values, the arg-max
/// coordinates of kept max reductions, each kind rounded up to 64 bytes. 0 when nothing is
/// kept. (eval and value need no arg-max: at most this.)
template <operand E>
std::size_t workspace_bytes(E const& e) {
  return detail::saved_sizes_of(detail::as_node(e), true).bytes();
}

/// The expression a call on E runs: E with every value it keeps read from a buffer.
template <operand E>
using saved_expr_t = decltype(detail::with_saved<true>(std::declval<detail::node_t<E> const&>(),
                                                        std::declval<detail::saved_space&>()));
/// The backward plan a call on the rank-0 expression E runs (its update kernels; the buffers
/// it reads are ad::buffer_count_v<E>).
template <operand E>
using backward_plan_t = decltype(ad::plan(std::declval<saved_expr_t<E> const&>()));

/// Bytes the calling thread's workspace holds now (it only grows; a warm call reuses it).
inline std::size_t workspace_capacity() { return detail::thread_workspace().cap_; }

}  // namespace gradix
