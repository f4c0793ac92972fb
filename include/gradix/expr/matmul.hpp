#pragma once
/// \file
/// Matrix products: `matmul(a, b)` over the last two axes (a batch axis in front), with the
/// vector cases as views of it, and `dot<Axis>(a, b)`.
///
/// A product is not fused into the loops around it: every call computes it once, before the
/// expression runs, into a buffer of the call's workspace (the save transform,
/// api/saved.hpp), through a BLAS gemm where gradix has one (OpenBLAS; backend/host/gemm.hpp),
/// and the expression reads that buffer. Its operands are read in place when they are views
/// of memory with a unit stride along one of their two matrix axes (a tensor, a parameter, a
/// transpose of one: the transpose goes into the gemm call, not into a copy), and computed
/// into a buffer first otherwise. The backward is again two products, of the materialised
/// adjoint of the result (docs/ad.md, "Matrix products").

#include "gradix/config.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/shape.hpp"
#include "gradix/expr/elementwise.hpp"
#include "gradix/expr/index.hpp"
#include "gradix/expr/node.hpp"
#include "gradix/expr/reduce.hpp"
#include "gradix/expr/view.hpp"
#include "gradix/grad/adjoint_buffer.hpp"

#include <type_traits>

namespace gradix {

/// A batch of strided matrices: element (b, i, j) is p[b * bs + i * rs + j * cs]; bs = 0 for
/// one matrix shared by every batch element. How a product reads its operands
/// (backend/host/gemm.hpp, the grid's gemm).
template <class T>
struct mat_ref {
  T const* p = nullptr;
  index_t rs = 0, cs = 0, bs = 0;
  GRADIX_HOST_DEVICE constexpr T at(index_t b, index_t i, index_t j) const { return p[b * bs + i * rs + j * cs]; }
};

/// How a BLAS (host or device) reads a rows x cols matrix with strides (rs, cs): transposed or not, and its
/// leading dimension; ok = false when neither stride is a unit one (the matrix must be copied).
struct blas_form {
  bool ok = false;
  bool trans = false;
  index_t ld = 0;
};
constexpr blas_form blas_form_of(index_t rows, index_t cols, index_t rs, index_t cs) {
  index_t const r1 = rows > 1 ? rows : 1, c1 = cols > 1 ? cols : 1;
  if (cols <= 1 || cs == 1) {
    index_t ld = rows <= 1 ? c1 : rs;
    if (ld >= c1) return {true, false, ld};
  }
  if (rows <= 1 || rs == 1) {
    index_t ld = cols <= 1 ? r1 : cs;
    if (ld >= r1) return {true, true, ld};
  }
  return {};
}

/// What a call keeps of a matrix product beside its value (api/saved.hpp fills it in): the
/// operands as the products read them, and in a backward call the product's adjoint (C, of
/// the product's shape) and the buffers of the operands' adjoints (ga, gb: each operand's
/// shape, row-major; null when no gradient flows into that operand).
template <class T, class SC>
struct product_state {
  mat_ref<T> a, b;
  adjoint_buffer<T, SC> gc;
  T* ga = nullptr;
  T* gb = nullptr;
};

namespace detail {
/// The shape of a product of operands of shapes SA (.., M, K) and SB (.., K, N), each of
/// rank 2 or 3: (batch, M, N) when either has a batch axis, else (M, N).
template <class SA, class SB>
struct matmul_shape {
  static constexpr std::size_t ra = SA::rank, rb = SB::rank;
  static constexpr std::size_t rank = ra > rb ? ra : rb;
  static constexpr index_t batch = [] {
    if constexpr (ra == 3 && rb == 3) {
      index_t x = SA::static_extents[0], y = SB::static_extents[0];
      return x == dyn ? y : x;
    } else if constexpr (ra == 3) {
      return SA::static_extents[0];
    } else if constexpr (rb == 3) {
      return SB::static_extents[0];
    } else {
      return index_t(1);
    }
  }();
  struct holder {
    static constexpr array<index_t, rank> value = [] {
      array<index_t, rank> r{};
      if constexpr (rank == 3) r[0] = batch;
      r[rank - 2] = SA::static_extents[ra - 2];
      r[rank - 1] = SB::static_extents[rb - 1];
      return r;
    }();
  };
  using type = shape_from_array_t<holder>;
  // static facts the builder checks
  static constexpr index_t ka = SA::static_extents[ra - 1], kb = SB::static_extents[rb - 2];
  static constexpr bool inner_ok = ka == dyn || kb == dyn || ka == kb;
  static constexpr bool batch_ok = [] {
    if constexpr (ra == 3 && rb == 3) {
      index_t x = SA::static_extents[0], y = SB::static_extents[0];
      return x == dyn || y == dyn || x == y;
    } else {
      return true;
    }
  }();
};
}  // namespace detail

/// out[b, i, j] = sum over k of lhs[b, i, k] * rhs[b, k, j]   (b only where there is a batch
/// axis; an operand of rank 2 is shared by every batch element)
/// shape:    (batch,) M, N
/// backward: d_lhs = d_out rhs^T, d_rhs = lhs^T d_out (summed over the batch for a shared
///           operand), as products
template <class Lhs, class Rhs>
struct matmul_node {
  using is_gradix_expression = void;
  using value_type = value_type_t<Lhs>;
  using shape_type = typename detail::matmul_shape<shape_of_t<Lhs>, shape_of_t<Rhs>>::type;
  using layout_type = row_major;
  using space_type = detail::common_space_t<space_of_t<Lhs>, space_of_t<Rhs>>;
  static constexpr std::size_t rank = shape_type::rank;
  Lhs lhs_;
  Rhs rhs_;
  shape_type shape_;
  GRADIX_HOST_DEVICE constexpr shape_type const& shape() const { return shape_; }
  /// Extents of the product: batch (1 without a batch axis), M, N and the inner K.
  GRADIX_HOST_DEVICE constexpr index_t batch() const { return rank == 3 ? shape_.extent(0) : 1; }
  GRADIX_HOST_DEVICE constexpr index_t rows() const { return shape_.extent(rank - 2); }
  GRADIX_HOST_DEVICE constexpr index_t cols() const { return shape_.extent(rank - 1); }
  GRADIX_HOST_DEVICE constexpr index_t inner() const {
    return lhs_.shape().extent(shape_of_t<Lhs>::rank - 1);
  }
};

template <class N>
struct is_matmul_node : std::false_type {};
template <class L, class R>
struct is_matmul_node<matmul_node<L, R>> : std::true_type {};

namespace detail {
/// Instantiated with both shapes so that the compiler prints them.
template <class SA, class SB>
struct matmul_static_extents_differ {
  static_assert(matmul_shape<SA, SB>::inner_ok,
                "gradix::matmul: the static inner extents differ (the last axis of the left "
                "operand, the second-to-last of the right one); the shapes are named in "
                "matmul_static_extents_differ<left shape, right shape>");
  static_assert(matmul_shape<SA, SB>::batch_ok,
                "gradix::matmul: the static batch extents (axis 0) differ; the shapes are named "
                "in matmul_static_extents_differ<left shape, right shape>");
  static constexpr bool value = matmul_shape<SA, SB>::inner_ok && matmul_shape<SA, SB>::batch_ok;
};
template <class A, class B>
constexpr auto make_matmul_checked(A const& a, B const& b);
template <class A, class B>
constexpr auto make_matmul(A const& a, B const& b) {
  using SA = shape_of_t<A>;
  using SB = shape_of_t<B>;
  if constexpr (!matmul_static_extents_differ<SA, SB>::value) {
    return a;  // the static_assert above has fired: stop here
  } else {
    return make_matmul_checked(a, b);
  }
}
template <class A, class B>
constexpr auto make_matmul_checked(A const& a, B const& b) {
  using SA = shape_of_t<A>;
  using SB = shape_of_t<B>;
  constexpr std::size_t ra = SA::rank, rb = SB::rank;
  auto const sa = a.shape();
  auto const sb = b.shape();
  if (sa.extent(ra - 1) != sb.extent(rb - 2))
    fail("gradix::matmul: inner extents differ: left shape ", to_string(sa), " (K = ",
         sa.extent(ra - 1), " on axis ", ra - 1, "), right shape ", to_string(sb), " (K = ",
         sb.extent(rb - 2), " on axis ", rb - 2, ")");
  if constexpr (ra == 3 && rb == 3)
    if (sa.extent(0) != sb.extent(0))
      fail("gradix::matmul: batch extents differ: left shape ", to_string(sa), ", right shape ",
           to_string(sb), " (axis 0)");
  using node = matmul_node<A, B>;
  typename node::shape_type s{};
  constexpr std::size_t r = node::rank;
  if constexpr (r == 3) s.set_extent(0, ra == 3 ? sa.extent(0) : sb.extent(0));
  s.set_extent(r - 2, sa.extent(ra - 2));
  s.set_extent(r - 1, sb.extent(rb - 1));
  return node{a, b, s};
}
}  // namespace detail

/// The matrix product of a and b, as numpy's and PyTorch's matmul for ranks 1 to 3:
///   (M, K) x (K, N) -> (M, N)            (B, M, K) x (B, K, N) -> (B, M, N)
///   (B, M, K) x (K, N) -> (B, M, N)      (M, K) x (B, K, N) -> (B, M, N)
///   (M, K) x (K) -> (M)     (K) x (K, N) -> (N)     (B, M, K) x (K) -> (B, M)
///   (K) x (K) -> ()  (the dot product: sum(a * b))
/// Both operands have the same floating-point element type. Static extents that differ fail
/// to compile; dynamic ones throw gradix::error naming both shapes. Any operand works: a
/// tensor, a parameter, a transpose, an expression (computed into a buffer first).
template <operand A, operand B>
constexpr auto matmul(A&& a_in, B&& b_in) {
  auto a = detail::as_node(static_cast<A&&>(a_in));
  auto b = detail::as_node(static_cast<B&&>(b_in));
  using TA = value_type_t<decltype(a)>;
  using TB = value_type_t<decltype(b)>;
  constexpr std::size_t ra = shape_of_t<decltype(a)>::rank, rb = shape_of_t<decltype(b)>::rank;
  static_assert(std::is_floating_point_v<TA> && std::is_same_v<TA, TB>,
                "gradix::matmul: both operands must have the same floating-point element type "
                "(cast one: gx::cast<float>(x))");
  static_assert(ra >= 1 && ra <= 3 && rb >= 1 && rb <= 3,
                "gradix::matmul: operands of rank 1 to 3");
  if constexpr (!(std::is_floating_point_v<TA> && std::is_same_v<TA, TB>) || ra < 1 || ra > 3 ||
                rb < 1 || rb > 3) {
    return a;  // a static_assert has fired
  } else if constexpr (ra == 1 && rb == 1) {
    if (a.shape().extent(0) != b.shape().extent(0))
      detail::fail("gradix::matmul: the vectors' extents differ: ", a.shape().extent(0), " and ",
                   b.shape().extent(0));
    return sum(a * b);
  } else if constexpr (rb == 1) {
    return select<ra - 1>(detail::make_matmul(a, unsqueeze<1>(b)), 0);  // (.., M, 1) -> (.., M)
  } else if constexpr (ra == 1) {
    return select<rb - 2>(detail::make_matmul(unsqueeze<0>(a), b), 0);  // (.., 1, N) -> (.., N)
  } else {
    return detail::make_matmul(a, b);
  }
}

/// sum over axis Axis of a * b (a and b broadcast as in a * b): a dot product along one axis.
template <int Axis, operand A, operand B>
constexpr auto dot(A&& a, B&& b) {
  return sum<Axis>(static_cast<A&&>(a) * static_cast<B&&>(b));
}

}  // namespace gradix
