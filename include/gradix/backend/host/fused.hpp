#pragma once
/// \file
/// The host kernel of a fused pair of uses (ad::fused_use, ad/kernel.hpp), and the loss value
/// carried by it.
///
/// A fused pair is two uses of one `+` node with the same domain and value expression: A
/// projects the fastest non-inner axes (possibly none), B all the others. One loop nest walks
/// the domain once in row-major order (B's projected axes outside, A's inside, the inner
/// axis innermost in SIMD packs), computes v once per element, adds it into A's register
/// tile (or straight into A's target when A projects nothing) and into B's row for the
/// current coordinate of A's projected axes; A's tile is added to its target once per outer
/// coordinate, B's rows once at the end. Every target element receives the same additions in
/// the same order as when the two uses run apart (as they do with several threads, where the
/// pair is split), so the bits are the same either way.
///
/// With the loss value (backward(sum(F)) or mean(F) where the pair's domain is F's): the
/// kernel's row-major walk is the order of gradix's summation scheme over F (eval/reduce.hpp:
/// runs along the inner axis, rows in row-major order), so the kernel adds F's values into
/// the scheme's lanes and blocks as it goes (`loss_lanes`): the value has the bits of
/// value(e), and costs no pass of its own. Where v is the path derivative of a region whose
/// top F contains once (sum(square(...)): F is the top), F comes from the top's value, which
/// the derivative computes anyway (`top_in_f_v`).
///
/// Included at the end of backend/host/update.hpp. It uses the plain kernels and their helpers
/// (update_plain.hpp, scratch.hpp), and completes plan_facts.hpp's detail::fused_carries.

#include "gradix/ad/kernel.hpp"
#include "gradix/backend/host/carrying.hpp"
#include "gradix/backend/host/plan_facts.hpp"
#include "gradix/backend/host/scratch.hpp"
#include "gradix/backend/host/thread_pool.hpp"
#include "gradix/backend/host/update_plain.hpp"
#include "gradix/config.hpp"
#include "gradix/core/coords.hpp"
#include "gradix/core/simd.hpp"
#include "gradix/eval/cost.hpp"
#include "gradix/eval/reduce.hpp"
#include "gradix/grad/storage.hpp"

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace gradix::host {

namespace detail {

/// The two uses of a fused pair as A and B (ad::fused_pair_v), with their facts.
template <class U1, class U2>
struct fused_roles {
  static constexpr bool first_is_a = ad::fused_pair_v<ad::kernel_traits<U1>, ad::kernel_traits<U2>>;
  using UA = std::conditional_t<first_is_a, U1, U2>;
  using UB = std::conditional_t<first_is_a, U2, U1>;
  using KA = ad::kernel_traits<UA>;
  using KB = ad::kernel_traits<UB>;
  static constexpr std::size_t RD = KA::domain_rank;
  static constexpr int I = KA::inner_axis;
  static constexpr std::uint64_t PA = KA::projected_mask;
  static constexpr std::uint64_t PB = KB::projected_mask;
  static UA const& a(ad::fused_use<U1, U2> const& f) {
    if constexpr (first_is_a) return f.first_;
    else return f.second_;
  }
  static UB const& b(ad::fused_use<U1, U2> const& f) {
    if constexpr (first_is_a) return f.second_;
    else return f.first_;
  }
};

/// Longest inner extent of a fused loop nest (A's tile and B's rows hold that many elements).
inline constexpr index_t fused_max_row = 1024;
/// Most elements B's rows may hold (in the thread's scratch buffer when more than one row).
inline constexpr index_t fused_max_rows_elements = index_t(1) << 18;

/// Number of B rows of a fused pair: the product of A's projected extents (1 without any).
template <class U1, class U2>
index_t fused_rows(ad::fused_use<U1, U2> const& f) {
  using R = fused_roles<U1, U2>;
  auto const ext = R::a(f).dom_.extents();
  index_t n = 1;
  for (std::size_t j = 0; j < R::RD; ++j)
    if ((R::PA >> j) & 1) n *= ext[j];
  return n;
}

/// Whether run(f) runs the pair in one loop nest (else its two uses run apart): both targets
/// wanted and distinct, A's target contiguous along the inner axis, an inner extent of at most
/// fused_max_row, B's rows within fused_max_rows_elements, and one thread or too little work
/// to split (with several threads, the uses run apart, each split over the pool).
template <class U1, class U2>
bool fused_in_one_nest(ad::fused_use<U1, U2> const& f) {
  using R = fused_roles<U1, U2>;
  auto const& ua = R::a(f);
  auto const& ub = R::b(f);
  if (!ua.target_ || !ub.target_) return false;
  // two uses of one parameter: apart, in plan order (the nest adds B's rows after A's
  // elements, which is plan order only when A comes first)
  if (static_cast<void const*>(ua.target_) == static_cast<void const*>(ub.target_)) return false;
  auto const ext = ua.dom_.extents();
  index_t n = 1;
  for (std::size_t j = 0; j < R::RD; ++j) n *= ext[j];
  index_t const n_in = ext[std::size_t(R::I)];
  index_t const tsa = ua.target_->strides()[std::size_t(R::KA::target_unit_axis)] *
                      get<std::size_t(R::KA::target_unit_axis)>(ua.map_).scale_;
  if (n_in > fused_max_row || tsa != 1) return false;
  if (fused_rows(f) * n_in > fused_max_rows_elements) return false;
  return !(pool().size() > 1 && n >= 2 * parallel_min_elements);
}

#if defined(GRADIX_HAS_VECTOR_EXT)
/// The blocks of gradix's summation scheme over a full reduction of F (n elements; Root is
/// sum(F) or mean(F)), filled run by run by a kernel that walks F in the scheme's order:
/// each run (a stretch along the inner axis) is cut at block ends; within a block a run's
/// element j goes to lane j mod L, a run's partial lane group is padded (the reduction's
/// add_full / add_tail); a block's lanes are combined by the reduction's tree into parts[b].
template <class Root>
struct loss_lanes {
  using RE = ev::evaluator<Root>;
  using T = typename RE::acc_type;
  static constexpr int W = RE::pack_w;
  static constexpr int NP = RE::pack_n;
  static constexpr index_t L = RE::pack_l;
  using P = simd::pack<T, W>;
  // The lanes themselves are the caller's local array (P acc[NP]), passed to these members:
  // kept out of this object, they stay in registers in the kernel's loop (a copy goes to
  // the out-of-line run()).
  T* parts_;
  index_t n_, bsize_, f_ = 0, bend_, b_ = 0;
  loss_lanes(T* parts, index_t n) : parts_(parts), n_(n), bsize_(ev::block_size<T>(n)) {
    bend_ = bsize_ < n ? bsize_ : n;
  }
  GRADIX_ALWAYS_INLINE static void start(P (&acc)[NP]) { RE::start(acc); }
  /// Elements left in the current block (more than 0 until every block is closed). A run of
  /// len elements, len a multiple of L, that fits in it the kernel adds itself (lane pack k
  /// mod NP for the k-th pack of the run), then reports with took().
  GRADIX_ALWAYS_INLINE index_t room() const { return bend_ - f_; }
  /// After the kernel added a whole run of len elements.
  GRADIX_ALWAYS_INLINE void took(P (&acc)[NP], index_t len) {
    f_ += len;
    if (f_ == bend_) close(acc);
  }
  GRADIX_ALWAYS_INLINE void close(P (&acc)[NP]) {
    parts_[b_++] = RE::finish(acc);
    RE::start(acc);
    bend_ = bend_ + bsize_ < n_ ? bend_ + bsize_ : n_;
  }
  /// Any run: fin is F's inner evaluator along the run, len its length.
  template <class In>
  [[gnu::noinline]] void run(P (&acc)[NP], In const& fin, index_t len) {
    index_t j = 0;
    while (j < len) {
      index_t const m = len - j < bend_ - f_ ? len - j : bend_ - f_;
      index_t k = 0;
      for (; k + L <= m; k += L) RE::add_full(acc, fin, j + k);
      if (m - k > 0) RE::add_tail(acc, fin, j + k, m - k);
      j += m;
      f_ += m;
      if (f_ == bend_) close(acc);
    }
  }
  /// run() on a copy of the caller's lanes (whose address is then never taken).
  template <class In>
  GRADIX_ALWAYS_INLINE void run_copy(P (&acc)[NP], In const& fin, index_t len) {
    P t[NP];
    GRADIX_UNROLL(16)
    for (int q = 0; q < NP; ++q) t[q] = acc[q];
    run(t, fin, len);
    GRADIX_UNROLL(16)
    for (int q = 0; q < NP; ++q) acc[q] = t[q];
  }
};

#endif

template <bool WV, class Root>
struct loss_arg {
  using type = int;
};
template <class Root>
struct loss_arg<true, Root> {
  using type = typename loss_root<Root>::arg;
};

/// The fused pair's loop nest (fused_in_one_nest(f) holds). With WV, also the loss value of
/// root (sum or mean of F over every axis; the pair's domain is F's, and the nest's inner
/// axis is the scheme's), left as block sums in parts.
template <bool WV, class Root, class U1, class U2>
GRADIX_FLATTEN void run_fused(ad::fused_use<U1, U2> const& f, [[maybe_unused]] Root const* root,
               [[maybe_unused]] value_type_t<typename U1::value_expr>* parts) {
  using R = fused_roles<U1, U2>;
  using UA = typename R::UA;
  using UB = typename R::UB;
  using GA = typename UA::storage_type;
  using GB = typename UB::storage_type;
  using TA = typename GA::value_type;
  using TB = typename GB::value_type;
  using V = typename UA::value_expr;
  constexpr std::size_t RD = R::RD;
  constexpr int I = R::I;
  constexpr std::uint64_t PA = R::PA, PB = R::PB;
  auto const& ua = R::a(f);
  auto const& ub = R::b(f);

  auto const ext = ua.dom_.extents();
  for (std::size_t j = 0; j < RD; ++j)
    if (ext[j] == 0) return;
  constexpr index_t static_in = extent_v<typename UA::domain_type, std::size_t(I)>;
  index_t const n_in = static_in != dyn ? static_in : ext[std::size_t(I)];
  // n_in <= fused_max_row (fused_in_one_nest); the explicit bound lets g++ see the tile
  // cannot overflow
  int const n_row = int(n_in < fused_max_row ? n_in : fused_max_row);
  index_t const n_rows = fused_rows(f);
  index_t const tsb = ub.target_->strides()[std::size_t(R::KB::target_unit_axis)] *
                      get<std::size_t(R::KB::target_unit_axis)>(ub.map_).scale_;

  ev::evaluator<V> const vev(ua.v_);
  auto const map_a = ua.map_;
  auto const map_b = ub.map_;
  auto const addr_a = target_address_of(*ua.target_);
  auto const addr_b = target_address_of(*ub.target_);
  TA* const data_a = ua.target_->data();
  TB* const data_b = ub.target_->data();

  // B's rows: one per coordinate of A's projected axes (one without any), cleared first
  TB row1[fused_max_row];
  TB* const rows = n_rows == 1 ? row1 : scratch().template try_get<TB>(std::size_t(n_rows * n_in));
  for (index_t k = 0; k < n_rows * n_in; ++k) rows[k] = TB(0);

#if defined(GRADIX_HAS_VECTOR_EXT)
  constexpr int W = simd::width<TA>;
  using X = simd::pack<TA, W>;
  // A's tile (or B's single row) in registers: a static inner extent of at most 16 packs,
  // and v copied once per pack (fully unrolled): a cheap v (eval/cost.hpp), or within 8 times
  // the unrolling limit over all packs (the batched square loss: v costs 16 nodes, most of
  // them views that compile to nothing, over 4 packs; with the tile in memory g++ 12 took
  // 3x as long) unless v is a product v0 * (...) at its top: g++ contracts that product
  // into the tile's additions, and must do so as the uses' own kernels do when they run
  // apart (which unroll only cheap bodies), for the same bits
  constexpr bool reg = std::is_same_v<TA, TB> && static_in != dyn && static_in % W == 0 &&
                       static_in <= 16 * W &&
                       (ev::cheap_body_v<V> ||
                        (!ad::region_value<V>::has_v0 &&
                         ev::code_cost_v<V> * std::size_t(static_in / W) <= 8 * ev::unroll_cost_limit));
  constexpr int NQ = reg ? int(static_in / W) : 1;
  using F = typename loss_arg<WV, Root>::type;
  auto lanes = [&] {
    if constexpr (WV) return loss_lanes<Root>(parts, root->arg_.shape().size());
    else return 0;
  }();
  auto const fev = [&] {
    if constexpr (WV) return ev::evaluator<F>(root->arg_);
    else return 0;
  }();
  if constexpr (WV) static_assert(loss_lanes<Root>::W == W, "gradix internal: lane packs differ");
  // F from the region top's value (top_in_f_v, plan_facts.hpp; run_carrying checked the
  // map), where evaluating F beside v would read and address F's operands a second time
  // (measured, g++ 12 on an AMD Zen 4: the founding per-term square loss's step 1.4-1.9x
  // backward_only that way, 0.9-1.0x this way; docs/performance.md): the region's
  // evaluator with the top's value kept, F's nodes above the top, and v0
  constexpr bool via_top = [] {
    if constexpr (WV) return top_in_f_v<F, UA, RD>;
    else return false;
  }();
  using RV = ad::region_value<V>;
  auto const pev = [&] {
    if constexpr (via_top)
      return ev::path_ev<typename RV::top, typename RV::path_type, 0, true>(ad::region_at_map(ua.v_).sub_.top_);
    else return 0;
  }();
  auto const aev = [&] {
    if constexpr (via_top) return above_ev<F, typename RV::top>(root->arg_);
    else return 0;
  }();
  auto const v0ev = [&] {
    if constexpr (via_top && RV::has_v0) return ev::evaluator<typename RV::v0>(ad::region_v0(ua.v_));
    else return 0;
  }();
  constexpr int NL = [] {
    if constexpr (WV) return loss_lanes<Root>::NP;
    else return 1;
  }();
  X lacc[NL];  // the loss value's lanes (with WV)
  if constexpr (WV) loss_lanes<Root>::start(lacc);
  // (with WV, the register path) the elements left in the scheme's current block and those
  // added since the lanes' own count was brought up to date (where a block ends, or before
  // a run the lanes add themselves): locals, so that the column loop keeps them in
  // registers (clang 16 kept the lanes' members in memory, the object's address escaping
  // into run_copy)
  [[maybe_unused]] index_t room = 0, pend = 0;
  if constexpr (WV) room = lanes.room();
#endif

#if defined(GRADIX_HAS_VECTOR_EXT)
  // A's sums over its projected axes (cleared per outer coordinate), or, when A projects
  // nothing, B's one row, in registers for the whole nest (as the row of B's own kernel
  // is: kept in memory between outer coordinates, g++ 12 -O2 -march=native contracted v's
  // products into its additions differently from B's kernel, and the bits differed)
  X tile[NQ];
  GRADIX_UNROLL(16)
  for (int q = 0; q < NQ; ++q) tile[q] = simd::splat<TA, W>(TA(0));
#endif
  coord<RD> d{};
  do {  // over B's projected axes (A's outer coordinates), row-major
    TA* const tpa = data_a + addr_a.offset(ev::map_value(map_a, d));
#if defined(GRADIX_HAS_VECTOR_EXT)
    if constexpr (reg) {
      if constexpr (PA != 0) {
        GRADIX_UNROLL(16)
        for (int q = 0; q < NQ; ++q) tile[q] = simd::splat<TA, W>(TA(0));
      }
      index_t k = 0;
      do {  // over A's projected axes
        TB* const rk = rows + k * n_in;
        // A's target (A projecting nothing) or B's row: the one in memory
        TA* const mem = PA == 0 ? tpa : rk;
        bool done = false;
        if constexpr (WV) {
          if (static_in % loss_lanes<Root>::L == 0 && room >= static_in) {
            if constexpr (via_top) {
              // the region's derivative as v's evaluator computes it (path_ev, the same
              // steps), times v0, negated, as v is; F from the top's value
              auto const pin = pev.template outer<I>(d);
              auto const fin = aev.template outer<I>(d);
              auto const vin = [&] {
                if constexpr (RV::has_v0) return v0ev.template outer<I>(d);
                else return 0;
              }();
              GRADIX_UNROLL(16)
              for (int q = 0; q < NQ; ++q) {
                auto const r = pin.template pack<W>(q * W);
                X x = r.d;
                if constexpr (RV::has_v0) x = X(ev::pack_as<TA, W>(vin, q * W) * x);
                if constexpr (RV::negative) x = X(-x);
                simd::store<TA, W>(mem + q * W, simd::load<TA, W>(mem + q * W) + x);
                tile[q] += x;
                lacc[q % NL] += fin.template pack<W>(q * W, X(r.v));
              }
            } else {
              // x as the nest without the value computes it (the same code, so that g++'s
              // contraction of v's products into the additions below is the same: the
              // same bits), F beside it (its own evaluation; the compiler shares what it
              // can)
              auto const in = vev.template outer<I>(d);
              auto const fin = fev.template outer<I>(d);
              GRADIX_UNROLL(16)
              for (int q = 0; q < NQ; ++q) {
                auto const x = ev::pack_as<TA, W>(in, q * W);
                auto const fx = ev::pack_as<TA, W>(fin, q * W);
                simd::store<TA, W>(mem + q * W, simd::load<TA, W>(mem + q * W) + x);
                tile[q] += x;
                lacc[q % NL] += fx;
              }
            }
            room -= static_in;
            pend += static_in;
            if (room == 0) {  // the block ends here
              lanes.took(lacc, pend);
              pend = 0;
              room = lanes.room();
            }
            done = true;
          }
        }
        if (!done) {
          // (x used where it is computed, as the uses' own kernels do: g++ then contracts
          // v's products into both additions as it does there)
          auto const in = vev.template outer<I>(d);
          GRADIX_UNROLL(16)
          for (int q = 0; q < NQ; ++q) {
            auto const x = ev::pack_as<TA, W>(in, q * W);
            simd::store<TA, W>(mem + q * W, simd::load<TA, W>(mem + q * W) + x);
            tile[q] += x;
          }
          if constexpr (WV) {
            lanes.took(lacc, pend);  // (inside the block: closes nothing)
            lanes.run_copy(lacc, fev.template outer<I>(d), static_in);
            pend = 0;
            room = lanes.room();
          }
        }
        ++k;
      } while (coords::next(d, ext, PA));
      if constexpr (PA != 0) {
        GRADIX_UNROLL(16)
        for (int q = 0; q < NQ; ++q) simd::store<TA, W>(tpa + q * W, simd::load<TA, W>(tpa + q * W) + tile[q]);
      }
      continue;
    }
#endif
    {
      TA atile[fused_max_row];  // A's sums over its projected axes (unused when it has none)
      if constexpr (PA != 0)
        for (int i = 0; i < n_row; ++i) atile[i] = TA(0);
      index_t k = 0;
      do {  // over A's projected axes
        TB* const rk = rows + k * n_in;
        auto in = vev.template outer<I>(d);
        auto add = [&](int i) {
          auto x = in.elem(i);
          if constexpr (PA == 0) tpa[i] += TA(x);
          else atile[i] += TA(x);
          rk[i] += TB(x);
        };
#if defined(GRADIX_HAS_VECTOR_EXT)
        if constexpr (std::is_same_v<TA, TB>) {
          int i = 0;
          for (; i + W <= n_row; i += W) {
            auto x = ev::pack_as<TA, W>(in, i);
            if constexpr (PA == 0) simd::store<TA, W>(tpa + i, simd::load<TA, W>(tpa + i) + x);
            else simd::store<TA, W>(atile + i, simd::load<TA, W>(atile + i) + x);
            simd::store<TB, W>(rk + i, simd::load<TB, W>(rk + i) + x);
          }
          for (int t = 0; t < W - 1 && i < n_row; ++t, ++i) add(i);  // the tail: under W
        } else {
          for (int i = 0; i < n_row; ++i) add(i);
        }
        if constexpr (WV) lanes.run_copy(lacc, fev.template outer<I>(d), n_in);
#else
        for (int i = 0; i < n_row; ++i) add(i);
#endif
        ++k;
      } while (coords::next(d, ext, PA));
      if constexpr (PA != 0)
        for (int i = 0; i < n_row; ++i) tpa[i] += atile[i];
    }
  } while (coords::next(d, ext, PB));
#if defined(GRADIX_HAS_VECTOR_EXT)
  if constexpr (reg && PA == 0) {
    GRADIX_UNROLL(16)
    for (int q = 0; q < NQ; ++q) simd::store<TB, W>(rows + q * W, tile[q]);
  }
#endif

  // B's rows into B's target, in the order of A's projected coordinates (B's outer order)
  coord<RD> e{};
  index_t k = 0;
  do {
    TB* const tpb = data_b + addr_b.offset(ev::map_value(map_b, e));
    TB const* const rk = rows + k * n_in;
    for (int i = 0; i < n_row; ++i) tpb[i * tsb] += rk[i];
    ++k;
  } while (coords::next(e, ext, PA));
}

}  // namespace detail

/// Scratch bytes run(f) needs: B's rows when there are several, else what its uses need apart.
template <class U1, class U2>
std::size_t scratch_bytes(ad::fused_use<U1, U2> const& f) {
  std::size_t r = std::max(scratch_bytes(f.first_), scratch_bytes(f.second_));
  if (detail::fused_in_one_nest(f)) {
    using R = detail::fused_roles<U1, U2>;
    index_t const n = detail::fused_rows(f);
    if (n > 1) {
      std::size_t const b = std::size_t(n) * std::size_t(R::a(f).dom_.extents()[std::size_t(R::I)]) *
                            sizeof(typename R::UB::storage_type::value_type);
      r = std::max(r, b);
    }
  }
  return r;
}

/// A fused pair (ad/kernel.hpp): one loop nest over the shared domain (above), or its two
/// uses apart (with several threads on enough work, an inner extent over fused_max_row, a
/// strided target, one use unwanted by grad()): the same bits either way.
template <class U1, class U2>
void run(ad::fused_use<U1, U2> const& f) {
  if (!detail::fused_in_one_nest(f)) {
    run(f.first_);
    run(f.second_);
    return;
  }
  using R = detail::fused_roles<U1, U2>;
  // rows beyond one live in the scratch reserved by backward's pre-pass; should it be short
  // (the pool grew since, from another thread), run apart rather than allocate here
  if (detail::fused_rows(f) > 1 &&
      !scratch().template try_get<typename R::UB::storage_type::value_type>(
          std::size_t(detail::fused_rows(f) * R::a(f).dom_.extents()[std::size_t(R::I)]))) {
    run(f.first_);
    run(f.second_);
    return;
  }
  detail::run_fused<false, int>(f, nullptr, nullptr);
}

namespace detail {
/// A fused pair carries the value of Root = sum(F) / mean(F) when its domain is F's shape, its
/// inner axis is the scheme's inner axis of F, and both targets hold F's element type.
template <class Root, class U1, class U2>
struct fused_carries<Root, ad::fused_use<U1, U2>> {
  static constexpr bool value = [] {
#if !defined(GRADIX_HAS_VECTOR_EXT)
    return false;
#else
    using F = typename loss_root<Root>::arg;
    using T = value_type_t<F>;
    using RR = fused_roles<U1, U2>;
    // A pair whose A projects nothing (the per-term square loss), or one whose F comes from
    // its region top's value (top_in_f_v: the batched square loss, A summing over
    // terms). Measured with the founding benchmark's batched square loss before the latter:
    // with F evaluated beside v, carrying made the step slower than value() plus
    // backward_only() (g++ 12: 1.16-1.20x, clang 16: 1.05-1.11x), F's operands read and
    // addressed a second time per pack; from the top's value it costs about nothing.
    return (RR::PA == 0 || top_in_f_v<F, typename RR::UA, RR::RD>) &&
           std::is_same_v<typename U1::domain_type, shape_of_t<F>> &&
           RR::I == int(ev::evaluator<Root>::inner_axis) &&
           std::is_same_v<typename RR::UA::storage_type::value_type, T> &&
           std::is_same_v<typename RR::UB::storage_type::value_type, T> &&
           std::is_same_v<value_type_t<typename U1::value_expr>, T> &&
           loss_lanes<Root>::W == simd::width<T>;
#endif
  }();
};
}  // namespace detail

/// Runs fused pair f (a carrier of root: carries_loss_v) and leaves the block sums of the
/// root's operand F in parts; returns false, having done nothing, when it cannot carry them
/// at run time (the pair runs apart, F's extents differ from the domain's).
template <class Root, class U1, class U2>
bool run_carrying(ad::fused_use<U1, U2> const& f, Root const& root, value_type_t<Root>* parts) {
#if !defined(GRADIX_HAS_VECTOR_EXT)
  return false;
#else
  using R = detail::fused_roles<U1, U2>;
  if (!detail::fused_in_one_nest(f)) return false;
  if (!(R::a(f).dom_.extents() == root.arg_.shape().extents())) return false;
  if constexpr (detail::top_in_f_v<typename detail::loss_root<Root>::arg, typename R::UA, R::RD>)
    if (!detail::top_map_identity(R::a(f))) return false;
  if (detail::fused_rows(f) > 1 &&
      !scratch().template try_get<typename R::UB::storage_type::value_type>(
          std::size_t(detail::fused_rows(f) * R::a(f).dom_.extents()[std::size_t(R::I)])))
    return false;
  detail::run_fused<true>(f, &root, parts);
  return true;
#endif
}

}  // namespace gradix::host
