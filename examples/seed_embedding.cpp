// The founding benchmark (docs/performance.md): an embedding table read through an index,
// with the gradient wanted for the table.
//
//   Ea: 64 x 1,000,000   Eb: 64 x 65,535   i = 0..4999 (uint16)   n = 100 terms
//   loss = sum over terms t of  sum( Eb(:, i) + Ea(:, j_t) )       j_t random per term
//
// The computation uses only gradix's public API: each term is one expression, its forward
// pass one fused loop, its backward pass two fused scatter-add kernels over the gathered
// block (never a zero-filled gradient the size of a table). `--check` compares with an
// independent plain-loop reference at the end of this file.
//
// Usage: seed_embedding [--layout col|row] [--n N] [--reps R] [--threads T] [--na NA]
//          [--nb NB] [--k K] [--d D] [--loss sum|square] [--idx-mod M] [--random-idx]
//          [--batched] [--init hash|randn] [--check] [--device cpu|cuda] [--deterministic]
//          [--dtype f32|bf16|f16] [--fused-optimizer sgd|adagrad]
//
// --dtype bf16 or f16 stores both tables as gx::bfloat16 or gx::half (half the memory; read
// as float, gradients in float; docs/ops.md), with the hash init rounded to nearest.
//
// --fused-optimizer sgd or adagrad (with --batched: one loss per step) trains the tables:
// each rep also times one optimizer step taken as backward + a separate step
// (`zero_grad; backward(e); opt.step()`) and one taken by the fused call
// (`backward(e, gx::optim::fused(opt))`, docs/optim.md), and prints their ratio and the loss
// of the last step (2 x reps steps in all, lr 0.01).
//
// --device cuda runs the same computation on the GPU (seed_embedding_device.hpp; built where
// meson finds nvcc): device tables with sparse device gradients, the indices in device
// memory, --deterministic for the order-fixed scatter (default: atomic adds).
#include <gradix/gradix.hpp>
#include <gradix/optim.hpp>

#include "seed_embedding.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace gx = gradix;

// ------------------------------------------------------------------ allocation counting
// Every replaceable operator new is counted (gradix allocates through them).
namespace counting {
std::atomic<long> allocations{0}, bytes{0};
}  // namespace counting
static void* counted_alloc(std::size_t n, std::size_t align) {
  counting::allocations.fetch_add(1, std::memory_order_relaxed);
  counting::bytes.fetch_add(long(n), std::memory_order_relaxed);
  void* p = nullptr;
  if (align <= alignof(std::max_align_t)) p = std::malloc(n ? n : 1);
  else if (posix_memalign(&p, align, n ? n : 1) != 0) p = nullptr;
  return p;
}
void* operator new(std::size_t n) {
  if (void* p = counted_alloc(n, 0)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void* operator new(std::size_t n, std::align_val_t a) {
  if (void* p = counted_alloc(n, std::size_t(a))) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t a) { return operator new(n, a); }
void* operator new(std::size_t n, std::nothrow_t const&) noexcept { return counted_alloc(n, 0); }
void* operator new[](std::size_t n, std::nothrow_t const&) noexcept { return counted_alloc(n, 0); }
void* operator new(std::size_t n, std::align_val_t a, std::nothrow_t const&) noexcept {
  return counted_alloc(n, std::size_t(a));
}
void* operator new[](std::size_t n, std::align_val_t a, std::nothrow_t const&) noexcept {
  return counted_alloc(n, std::size_t(a));
}
// g++ 12 warns that free() does not match operator new, inside these replacements themselves.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpragmas"
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

// ------------------------------------------------------------------ options
using seed::options;

static double rss_mib(char const* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(field, 0) == 0) return std::stod(line.substr(std::strlen(field))) / 1024.0;
  return -1;
}

// --check on the host tables: seed::reference_check with the parameters' accessors.
template <class P>
static int host_check(options const& o, P const& Ea, P const& Eb, std::vector<std::uint16_t> const& i,
                      std::vector<std::uint32_t> const& js, double loss, bool col) {
  auto value_of = [&](P const& E) {
    return [&E, col](long entry, long c) -> double { return col ? E.value()(c, entry) : E.value()(entry, c); };
  };
  auto grad_of = [](P const& E) {
    return [&E](long entry) -> float const* {
      gx::index_t const slot = E.grad().find(entry);
      return slot < 0 ? nullptr : E.grad().slice_data(slot);
    };
  };
  return seed::reference_check(o, i, js, loss, value_of(Ea), value_of(Eb), grad_of(Ea), grad_of(Eb),
                               long(Ea.grad().size()), long(Eb.grad().size()));
}

// ------------------------------------------------------------------ the benchmark
// Layout: gx::col_major (tables d x N, column gathers) or gx::row_major (N x d, row gathers).
// Dim: gx::fix_t<64> keeps the embedding extent static; a plain index_t makes it dynamic.
template <class Layout, class Dim, class Elem = float>
int run(options const& o) {
  constexpr bool col = std::is_same_v<Layout, gx::col_major>;
  constexpr std::size_t Axis = col ? 1 : 0;  // the table-entry axis
  if constexpr (!std::is_integral_v<Dim>) {
    if (o.d != Dim::value) return std::fprintf(stderr, "internal: static d mismatch\n"), 1;
  }
  auto d_ext = [&] {
    if constexpr (std::is_integral_v<Dim>) return Dim(o.d);
    else return Dim{};
  }();
  auto make_shape = [&](long entries) {
    if constexpr (col) return gx::dims(d_ext, entries);
    else return gx::dims(entries, d_ext);
  };

  // Tables: hash init (the PyTorch peer's formula) or gradix's seeded randn.
  // (a half-width table is generated in place: no float table is ever allocated)
  auto init = [&](long entries, std::uint32_t t) {
    if constexpr (std::is_same_v<Elem, float>)
      if (!o.hash) return gx::randn<float, Layout>(make_shape(entries), 7 + t);
    return gx::generate<Elem, Layout>(make_shape(entries), [&](auto const& c) {
      return seed::hash_value(std::uint64_t(c[Axis]), std::uint64_t(c[1 - Axis]), std::uint64_t(o.d), t);
    });
  };
  auto Ea = gx::param(init(o.na, 0), gx::sparse_grad<Axis>);
  auto Eb = gx::param(init(o.nb, 1), gx::sparse_grad<Axis>);

  std::vector<std::uint16_t> const i = seed::gathered_entries(o);
  std::vector<std::uint32_t> const js = seed::term_columns(o.n, o.na);
  double rss_init = rss_mib("VmRSS:");

  // One term: sum(Eb(:, i) + Ea(:, j)) (or of its square), Ea(:, j) broadcast against the block.
  auto term = [&](std::uint32_t j) {
    if constexpr (col) return Eb(gx::all, gx::indices(i)) + Ea(gx::all, gx::at(j));
    else return Eb(gx::indices(i), gx::all) + Ea(gx::at(j), gx::all);
  };
  // All terms at once: Ea gathered at every term column, broadcast along a third axis.
  auto batched_block = [&] {
    if constexpr (col)
      return gx::unsqueeze<2>(Eb(gx::all, gx::indices(i))) +
             gx::unsqueeze<1>(Ea(gx::all, gx::indices(js)));
    else
      return gx::unsqueeze<0>(Eb(gx::indices(i), gx::all)) +
             gx::unsqueeze<1>(Ea(gx::indices(js), gx::all));
  };

  // --fused-optimizer: the tables' optimizer (lr 0.01), stepped twice per rep
  std::optional<gx::optim::sgd<decltype(Ea), decltype(Eb)>> sgd;
  std::optional<gx::optim::adagrad<decltype(Ea), decltype(Eb)>> adagrad;
  if (o.fused_optimizer == "sgd") sgd.emplace(gx::optim::sgd_options{.lr = 0.01}, Ea, Eb);
  if (o.fused_optimizer == "adagrad") adagrad.emplace(gx::optim::adagrad_options{.lr = 0.01}, Ea, Eb);

  std::vector<double> fwd, bwd, step, opt_sep, opt_fused;
  long last_back_allocs = 0;
  double opt_loss = 0;
  long opt_steps = 0;
  double loss = 0;
  for (long rep = 0; rep < o.reps; ++rep) {
    // forward: n calls of value
    long a0 = counting::allocations, b0 = counting::bytes;
    auto t0 = std::chrono::steady_clock::now();
    double l = 0;
    if (o.batched) {
      l = o.square ? gx::value(gx::sum(gx::square(batched_block()))) : gx::value(gx::sum(batched_block()));
    } else {
      for (std::uint32_t j : js)
        l += o.square ? gx::value(gx::sum(gx::square(term(j)))) : gx::value(gx::sum(term(j)));
    }
    double tf = seed::seconds_since(t0);
    long fa = counting::allocations - a0, fb = counting::bytes - b0;
    loss = l;

    // backward: zero_grad plus n gradient-only backward calls
    a0 = counting::allocations, b0 = counting::bytes;
    t0 = std::chrono::steady_clock::now();
    gx::zero_grad(Ea, Eb);
    if (o.batched) {
      if (o.square) gx::backward_only(gx::sum(gx::square(batched_block())));
      else gx::backward_only(gx::sum(batched_block()));
    } else {
      for (std::uint32_t j : js) {
        if (o.square) gx::backward_only(gx::sum(gx::square(term(j))));
        else gx::backward_only(gx::sum(term(j)));
      }
    }
    double tb = seed::seconds_since(t0);
    long ba = counting::allocations - a0, bb = counting::bytes - b0;
    last_back_allocs = ba;

    // step: zero_grad plus n value-returning backward calls
    t0 = std::chrono::steady_clock::now();
    gx::zero_grad(Ea, Eb);
    double ls = 0;
    if (o.batched) {
      ls = o.square ? gx::backward(gx::sum(gx::square(batched_block()))) : gx::backward(gx::sum(batched_block()));
    } else {
      for (std::uint32_t j : js)
        ls += o.square ? gx::backward(gx::sum(gx::square(term(j)))) : gx::backward(gx::sum(term(j)));
    }
    double ts = seed::seconds_since(t0);
    (void)ls;
    std::printf("rep %ld: loss %.6f s (%ld allocations, %ld bytes)  back %.6f s (%ld allocations, "
                "%ld bytes)  step %.6f s  loss = %.9g\n",
                rep + 1, tf, fa, fb, tb, ba, bb, ts, l);

    // --fused-optimizer: one step as backward + a separate step, one as the fused call
    auto train = [&](auto& opt) {
      auto separate = [&](auto const& e) {
        gx::zero_grad(Ea, Eb);
        double const v = gx::backward(e);
        opt.step();
        return v;
      };
      auto fused = [&](auto const& e) { return double(gx::backward(e, gx::optim::fused(opt))); };
      t0 = std::chrono::steady_clock::now();
      opt_loss = o.square ? separate(gx::sum(gx::square(batched_block()))) : separate(gx::sum(batched_block()));
      opt_sep.push_back(seed::seconds_since(t0));
      t0 = std::chrono::steady_clock::now();
      opt_loss = o.square ? fused(gx::sum(gx::square(batched_block()))) : fused(gx::sum(batched_block()));
      opt_fused.push_back(seed::seconds_since(t0));
      opt_steps += 2;
      std::printf("       %s: backward + step %.6f s  fused %.6f s (%ld rows stepped in the scatter)  "
                  "loss = %.9g (step %ld)\n",
                  o.fused_optimizer.c_str(), opt_sep.back(), opt_fused.back(), long(opt.fused_rows_applied()),
                  opt_loss, opt_steps);
    };
    if (sgd) train(*sgd);
    if (adagrad) train(*adagrad);
    fwd.push_back(tf);
    bwd.push_back(tb);
    step.push_back(ts);
  }

  int status = 0;
  if (o.check) status = host_check(o, Ea, Eb, i, js, loss, col);
  if (o.check && o.reps >= 2) {
    // once warm, a backward pass allocates nothing (sparse storage keeps its memory)
    std::printf("check: last rep's backward allocations: %ld (expected 0)\n", last_back_allocs);
    if (last_back_allocs != 0) status = 1;
  }

  std::string opt_json;
  if (!o.fused_optimizer.empty()) {
    char b[320];
    std::snprintf(b, sizeof b,
                  ", \"optimizer\": \"%s\", \"backward_plus_step_s\": %.6g, \"fused_step_s\": %.6g, "
                  "\"fused_ratio\": %.4g, \"optimizer_steps\": %ld, \"optimizer_loss\": %.9g",
                  o.fused_optimizer.c_str(), seed::median(opt_sep), seed::median(opt_fused),
                  seed::median(opt_fused) / seed::median(opt_sep), opt_steps, opt_loss);
    opt_json = b;
  }
  std::printf("{\"dtype\": \"%s\", \"layout\": \"%s\", \"loss_kind\": \"%s\", \"batched\": %s, \"n\": %ld, \"k\": %ld, "
              "\"d\": %ld, \"na\": %ld, \"nb\": %ld, \"threads\": %ld, \"reps\": %ld, "
              "\"forward_s\": %.6g, \"backward_s\": %.6g, \"step_s\": %.6g, "
              "\"peak_rss_mib\": %.1f, \"rss_after_init_mib\": %.1f, \"loss\": %.9g, "
              "\"backward_allocations\": %ld, \"grad_slots_Ea\": %ld, \"grad_slots_Eb\": %ld%s%s}\n",
              o.dtype.c_str(), col ? "col" : "row", o.square ? "square" : "sum", o.batched ? "true" : "false", o.n,
              o.k, o.d, o.na, o.nb, o.threads, o.reps, seed::median(fwd), seed::median(bwd), seed::median(step),
              rss_mib("VmHWM:"), rss_init, loss, last_back_allocs, long(Ea.grad().size()),
              long(Eb.grad().size()), o.check ? (status ? ", \"check\": \"FAILED\"" : ", \"check\": \"ok\"") : "",
              opt_json.c_str());
  return status;
}

#if !defined(GRADIX_EXAMPLE_CUDA)
// Built without nvcc: seed_embedding_cuda.cu is not linked in.
int seed::run_cuda(options const&) {
  std::fprintf(stderr, "seed_embedding: --device cuda: this binary was built without CUDA (meson "
                       "found no nvcc, or -Dcuda=disabled)\n");
  return 2;
}
#endif

int main(int argc, char** argv) {
  options o = seed::parse(argc, argv);
  if (o.cuda && o.dtype != "f32") {
    std::fprintf(stderr, "seed_embedding: --dtype %s is for the host (device tables are float here)\n", o.dtype.c_str());
    return 2;
  }
  if (!o.fused_optimizer.empty() && o.cuda) {
    std::fprintf(stderr, "seed_embedding: --fused-optimizer is for the host (a fused step takes host parameters)\n");
    return 2;
  }
  if (o.cuda) return seed::run_cuda(o);
  if (o.deterministic) {
    std::fprintf(stderr, "seed_embedding: --deterministic is for --device cuda (the host backward is "
                         "deterministic already)\n");
    return 2;
  }
  if (!o.fused_optimizer.empty() && (!o.batched || o.check)) {
    std::fprintf(stderr, "seed_embedding: --fused-optimizer %s needs --batched (one loss per step) and "
                         "takes no --check (the tables move)\n", o.fused_optimizer.c_str());
    return 2;
  }
  if (o.dtype != "f32" && !o.hash) {
    std::fprintf(stderr, "seed_embedding: --dtype %s takes the hash init (--init randn is for f32)\n", o.dtype.c_str());
    return 2;
  }
  gx::set_num_threads(int(o.threads));
  if (o.dtype != "f32") std::printf("seed_embedding: %s tables (%s)\n", o.dtype.c_str(), gx::half_isa());
  std::printf("seed_embedding: %s, %s-major tables, Ea %ld x %ld, Eb %ld x %ld, k = %ld, "
              "n = %ld, loss %s%s, %ld thread(s)\n",
              gx::simd::isa(), o.row ? "row" : "column", o.row ? o.na : o.d, o.row ? o.d : o.na, o.row ? o.nb : o.d,
              o.row ? o.d : o.nb, o.k, o.n, o.square ? "square" : "sum", o.batched ? ", batched" : "",
              o.threads);
  try {
    auto with = [&]<class Elem>() {
      if (o.d == 64) {
        return o.row ? run<gx::row_major, gx::fix_t<64>, Elem>(o) : run<gx::col_major, gx::fix_t<64>, Elem>(o);
      }
      return o.row ? run<gx::row_major, gx::index_t, Elem>(o) : run<gx::col_major, gx::index_t, Elem>(o);
    };
    if (o.dtype == "bf16") return with.template operator()<gx::bfloat16>();
    if (o.dtype == "f16") return with.template operator()<gx::half>();
    return with.template operator()<float>();
  } catch (gx::error const& e) {
    std::fprintf(stderr, "seed_embedding: %s\n", e.what());
    return 1;
  }
}
