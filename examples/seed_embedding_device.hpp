// The founding benchmark on a device (seed_embedding --device cuda): the host run's
// computation (seed_embedding.cpp), with the tables, their sparse gradients and the indices
// in device memory, written once against a launcher L. seed_embedding_cuda.cu runs it with
// gradix::cuda::launcher; tests/cuda/seed_device_test.cpp with the grid emulator, which is
// how CI runs this code without a GPU.
//
// Each term is one forward (grid::value: a fused gather + broadcast + fixed-order sum) and one
// backward (grid::backward_only: the slot reservation and one update kernel per table use).
// The indices are grid::device_indices, whose bounds the host recorded when they were
// uploaded, so validating them is a comparison on the host: no kernel, no wait for the
// device. Timings wait for the device at the end of each phase.
#pragma once

#include "seed_embedding.hpp"

#include <gradix/device.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <type_traits>
#include <unordered_set>
#include <vector>

namespace seed {

template <class L>
void device_wait(L& l) {
  if constexpr (requires { l.synchronize(); }) l.synchronize();
}

template <class Layout, class Dim, class L>
int run_device_as(L& l, options const& o) {
  namespace gx = gradix;
  namespace grid = gradix::grid;
  constexpr bool col = std::is_same_v<Layout, gx::col_major>;
  constexpr std::size_t Axis = col ? 1 : 0;  // the table-entry axis
  auto d_ext = [&] {
    if constexpr (std::is_integral_v<Dim>) return Dim(o.d);
    else return Dim{};
  }();
  auto make_shape = [&](long entries) {
    if constexpr (col) return gx::dims(d_ext, entries);
    else return gx::dims(entries, d_ext);
  };
  auto init = [&](long entries, std::uint32_t t) {
    if (o.hash)
      return gx::generate<float, Layout>(make_shape(entries), [&](auto const& c) {
        return hash_value(std::uint64_t(c[Axis]), std::uint64_t(c[1 - Axis]), std::uint64_t(o.d), t);
      });
    return gx::randn<float, Layout>(make_shape(entries), 7 + t);
  };
  auto const ha = init(o.na, 0);
  auto const hb = init(o.nb, 1);
  using S = typename std::remove_cvref_t<decltype(ha)>::shape_type;
  using DT = grid::device_tensor<float, S, L, Layout>;
  auto Ea = grid::param(DT::from_host(l, ha), gx::sparse_grad<Axis>);
  auto Eb = grid::param(DT::from_host(l, hb), gx::sparse_grad<Axis>);

  std::vector<std::uint16_t> const i = gathered_entries(o);
  std::vector<std::uint32_t> const js = term_columns(o.n, o.na);
  gx::tensor<std::uint16_t, gx::shape<gx::dyn>> hi(gx::dims(gx::index_t(i.size())));
  for (std::size_t r = 0; r < i.size(); ++r) hi(gx::index_t(r)) = i[r];
  gx::tensor<std::uint32_t, gx::shape<gx::dyn>> hj(gx::dims(gx::index_t(js.size())));
  for (std::size_t t = 0; t < js.size(); ++t) hj(gx::index_t(t)) = js[t];
  auto const di = grid::device_indices<std::uint16_t, L>::from_host(l, hi);
  auto const dj = grid::device_indices<std::uint32_t, L>::from_host(l, hj);

  auto term = [&](std::uint32_t j) {
    if constexpr (col) return Eb(gx::all, grid::indices(di)) + Ea(gx::all, gx::at(j));
    else return Eb(grid::indices(di), gx::all) + Ea(gx::at(j), gx::all);
  };
  auto batched_block = [&] {
    if constexpr (col)
      return gx::unsqueeze<2>(Eb(gx::all, grid::indices(di))) + gx::unsqueeze<1>(Ea(gx::all, grid::indices(dj)));
    else
      return gx::unsqueeze<0>(Eb(grid::indices(di), gx::all)) + gx::unsqueeze<1>(Ea(grid::indices(dj), gx::all));
  };
  grid::backward_options const bo{o.deterministic ? grid::scatter_mode::deterministic : grid::scatter_mode::atomic, {}};

  std::vector<double> fwd, bwd, step;
  double loss = 0;
  for (long rep = 0; rep < o.reps; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    double lv = 0;
    if (o.batched) {
      lv = o.square ? grid::value(l, gx::sum(gx::square(batched_block()))) : grid::value(l, gx::sum(batched_block()));
    } else {
      for (std::uint32_t j : js)
        lv += o.square ? grid::value(l, gx::sum(gx::square(term(j)))) : grid::value(l, gx::sum(term(j)));
    }
    double const tf = seconds_since(t0);
    loss = lv;

    t0 = std::chrono::steady_clock::now();
    grid::zero_grad(Ea, Eb);
    if (o.batched) {
      if (o.square) grid::backward_only(l, gx::sum(gx::square(batched_block())), bo);
      else grid::backward_only(l, gx::sum(batched_block()), bo);
    } else {
      for (std::uint32_t j : js) {
        if (o.square) grid::backward_only(l, gx::sum(gx::square(term(j))), bo);
        else grid::backward_only(l, gx::sum(term(j)), bo);
      }
    }
    device_wait(l);
    double const tb = seconds_since(t0);

    t0 = std::chrono::steady_clock::now();
    grid::zero_grad(Ea, Eb);
    double ls = 0;
    if (o.batched) {
      ls = o.square ? grid::backward(l, gx::sum(gx::square(batched_block())), bo) : grid::backward(l, gx::sum(batched_block()), bo);
    } else {
      for (std::uint32_t j : js)
        ls += o.square ? grid::backward(l, gx::sum(gx::square(term(j))), bo) : grid::backward(l, gx::sum(term(j)), bo);
    }
    device_wait(l);
    double const ts = seconds_since(t0);
    std::printf("rep %ld: loss %.6f s  back %.6f s  step %.6f s  loss = %.9g (step's %.9g)\n", rep + 1, tf, tb, ts, lv, ls);
    fwd.push_back(tf);
    bwd.push_back(tb);
    step.push_back(ts);
  }

  int status = 0;
  long const stored_a = long(Ea.grad().size()), stored_b = long(Eb.grad().size());
  if (o.check) {
    // the gradients back on the host (dense: the check reads each stored entry's slice)
    auto const ga = Ea.grad().download();
    auto const gb = Eb.grad().download();
    auto const ids_a = Ea.grad().ids();
    auto const ids_b = Eb.grad().ids();
    std::unordered_set<long> const set_a(ids_a.begin(), ids_a.end()), set_b(ids_b.begin(), ids_b.end());
    auto value_of = [&](auto const& h) {
      return [&h](long entry, long c) -> double { return col ? h(c, entry) : h(entry, c); };
    };
    // col-major d x N and row-major N x d both keep an entry's d values contiguous
    auto grad_of = [&](auto const& g, auto const& set) {
      return [&g, &set, d = o.d](long entry) -> float const* {
        return set.count(entry) ? g.data() + entry * d : nullptr;
      };
    };
    status = reference_check(o, i, js, loss, value_of(ha), value_of(hb), grad_of(ga, set_a), grad_of(gb, set_b),
                             stored_a, stored_b);
  }
  std::printf("{\"device\": \"cuda\", \"mode\": \"%s\", \"layout\": \"%s\", \"loss_kind\": \"%s\", "
              "\"batched\": %s, \"n\": %ld, \"k\": %ld, \"d\": %ld, \"na\": %ld, \"nb\": %ld, "
              "\"reps\": %ld, \"forward_s\": %.6g, \"backward_s\": %.6g, \"step_s\": %.6g, "
              "\"loss\": %.9g, \"grad_slots_Ea\": %ld, \"grad_slots_Eb\": %ld%s}\n",
              o.deterministic ? "deterministic" : "atomic", col ? "col" : "row", o.square ? "square" : "sum",
              o.batched ? "true" : "false", o.n, o.k, o.d, o.na, o.nb, o.reps, median(fwd), median(bwd),
              median(step), loss, stored_a, stored_b,
              o.check ? (status ? ", \"check\": \"FAILED\"" : ", \"check\": \"ok\"") : "");
  return status;
}

/// The device run for o's layout and embedding extent (64 static, else dynamic).
template <class L>
int run_device(L& l, options const& o) {
  if (o.d == 64)
    return o.row ? run_device_as<gradix::row_major, gradix::fix_t<64>>(l, o)
                 : run_device_as<gradix::col_major, gradix::fix_t<64>>(l, o);
  return o.row ? run_device_as<gradix::row_major, gradix::index_t>(l, o)
               : run_device_as<gradix::col_major, gradix::index_t>(l, o);
}

}  // namespace seed
