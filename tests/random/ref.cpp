// The reference evaluator and the run-time side of the randomized graph tests: plain loops
// over row-major std::vector<double>, no gradix code (see ref.hpp).
#include "ref.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <sstream>
#include <stdexcept>

namespace rg {

namespace {

index count(std::vector<index> const& s) {
  index n = 1;
  for (index e : s) n *= e;
  return n;
}

/// Row-major strides of a shape.
std::vector<index> strides(std::vector<index> const& s) {
  std::vector<index> st(s.size());
  index m = 1;
  for (std::size_t k = s.size(); k-- > 0;) {
    st[k] = m;
    m *= s[k];
  }
  return st;
}

/// Coordinates of flat index i.
std::vector<index> unravel(std::vector<index> const& s, index i) {
  std::vector<index> c(s.size());
  for (std::size_t k = s.size(); k-- > 0;) {
    c[k] = s[k] ? i % s[k] : 0;
    i = s[k] ? i / s[k] : 0;
  }
  return c;
}

[[noreturn]] void bad(std::string const& m) { throw std::logic_error("rg::ref: " + m); }

double apply(uop op, double x) {
  switch (op) {
    case NEG: return -x;
    case EXP: return std::exp(x);
    case LOG: return std::log(x);
    case SQRT: return std::sqrt(x);
    case TANH: return std::tanh(x);
    case SIGMOID: return 1.0 / (1.0 + std::exp(-x));
    case RELU: return x > 0 ? x : 0.0;
    case ABS: return std::fabs(x);
    case SQUARE: return x * x;
  }
  bad("unary op");
}

double apply(bop op, double a, double b) {
  switch (op) {
    case ADD: return a + b;
    case SUB: return a - b;
    case MUL: return a * b;
    case DIV: return a / b;
    case MAX: return a >= b ? a : b;
    case MIN: return a <= b ? a : b;
    case POW: return std::pow(a, b);
  }
  bad("binary op");
}

/// numpy broadcasting of two shapes aligned at the last axis.
std::vector<index> broadcast(std::vector<index> const& a, std::vector<index> const& b) {
  std::size_t r = std::max(a.size(), b.size());
  std::vector<index> out(r);
  for (std::size_t k = 0; k < r; ++k) {
    index ea = k + a.size() >= r ? a[k + a.size() - r] : 1;
    index eb = k + b.size() >= r ? b[k + b.size() - r] : 1;
    if (ea != eb && ea != 1 && eb != 1) bad("shapes do not broadcast");
    out[k] = ea == 1 ? eb : ea;
  }
  return out;
}

/// Flat index into `a` (shape sa) of output coordinate c, broadcasting.
index bcast_offset(std::vector<index> const& sa, std::vector<index> const& c) {
  std::size_t off = c.size() - sa.size();
  index i = 0;
  for (std::size_t k = 0; k < sa.size(); ++k) i = i * sa[k] + (sa[k] == 1 ? 0 : c[k + off]);
  return i;
}

}  // namespace

iarg all() { return {}; }
iarg list(std::vector<index> const& pos) { return {iarg::LIST, pos}; }
iarg list(std::vector<int> const& pos) {
  return {iarg::LIST, std::vector<index>(pos.begin(), pos.end())};
}
iarg range(index start, index stop, index step) {
  iarg a{iarg::LIST, {}};
  if (step > 0)
    for (index i = start; i < stop; i += step) a.pos.push_back(i);
  else
    for (index i = start; i > stop; i += step) a.pos.push_back(i);
  return a;
}
iarg at(index j) { return {iarg::LIST, {j}}; }
iarg select(index j) { return {iarg::SELECT, {j}}; }

void ref::kink(int id, double d) {
  if (d < kink_margin) {
    kink_margin = d;
    kink_node = id;
  }
}

arr ref::leaf(int, std::vector<index> shape, std::vector<double> const& data) {
  if (count(shape) != index(data.size())) bad("leaf size");
  return {std::move(shape), data};
}

arr ref::unary(int id, uop op, arr const& a) {
  arr r{a.shape, std::vector<double>(a.v.size())};
  for (std::size_t i = 0; i < a.v.size(); ++i) {
    double x = a.v[i];
    if ((op == RELU || op == ABS) && x != 0) kink(id, std::fabs(x));
    r.v[i] = apply(op, x);
  }
  return r;
}

arr ref::binary(int id, bop op, arr const& a, arr const& b) {
  arr r{broadcast(a.shape, b.shape), {}};
  index n = count(r.shape);
  r.v.resize(std::size_t(n));
  for (index i = 0; i < n; ++i) {
    auto c = unravel(r.shape, i);
    double x = a.v[std::size_t(bcast_offset(a.shape, c))];
    double y = b.v[std::size_t(bcast_offset(b.shape, c))];
    if ((op == MAX || op == MIN) && x != y) kink(id, std::fabs(x - y));
    r.v[std::size_t(i)] = apply(op, x, y);
  }
  return r;
}

arr ref::binary(int id, bop op, arr const& a, double c) {
  arr r{a.shape, std::vector<double>(a.v.size())};
  for (std::size_t i = 0; i < a.v.size(); ++i) {
    if ((op == MAX || op == MIN) && a.v[i] != c) kink(id, std::fabs(a.v[i] - c));
    r.v[i] = apply(op, a.v[i], c);
  }
  return r;
}

arr ref::binary(int id, bop op, double c, arr const& b) {
  arr r{b.shape, std::vector<double>(b.v.size())};
  for (std::size_t i = 0; i < b.v.size(); ++i) {
    if ((op == MAX || op == MIN) && b.v[i] != c) kink(id, std::fabs(b.v[i] - c));
    r.v[i] = apply(op, c, b.v[i]);
  }
  return r;
}

arr ref::reduce(int id, rop op, arr const& a, std::vector<int> axes, bool keep) {
  std::size_t R = a.shape.size();
  std::vector<bool> red(R, false);
  if (axes.empty())
    red.assign(R, true);
  else
    for (int ax : axes) {
      if (ax < 0 || std::size_t(ax) >= R || red[std::size_t(ax)]) bad("reduce axes");
      red[std::size_t(ax)] = true;
    }
  std::vector<index> out_shape, kept_shape;  // kept_shape: a's shape with 1 on reduced axes
  index cnt = 1;
  for (std::size_t k = 0; k < R; ++k) {
    if (red[k]) {
      cnt *= a.shape[k];
      if (keep) out_shape.push_back(1);
    } else {
      out_shape.push_back(a.shape[k]);
    }
    kept_shape.push_back(red[k] ? 1 : a.shape[k]);
  }
  index n = count(kept_shape);
  if (op != RSUM && cnt == 0) bad("empty mean/max");
  std::vector<double> acc(std::size_t(n), op == RMAX ? -std::numeric_limits<double>::infinity() : 0.0);
  index na = count(a.shape);
  auto ks = strides(kept_shape);
  for (index i = 0; i < na; ++i) {  // serial, in row-major order
    auto c = unravel(a.shape, i);
    index o = 0;
    for (std::size_t k = 0; k < R; ++k) o += red[k] ? 0 : c[k] * ks[k];
    double x = a.v[std::size_t(i)];
    if (op == RMAX)
      acc[std::size_t(o)] = std::max(acc[std::size_t(o)], x);
    else
      acc[std::size_t(o)] += x;
  }
  if (op == RMEAN)
    for (auto& x : acc) x /= double(cnt);
  if (op == RMAX) {  // distance from each maximum to the next distinct value
    std::vector<double> second(std::size_t(n), -std::numeric_limits<double>::infinity());
    for (index i = 0; i < na; ++i) {
      auto c = unravel(a.shape, i);
      index o = 0;
      for (std::size_t k = 0; k < R; ++k) o += red[k] ? 0 : c[k] * ks[k];
      double x = a.v[std::size_t(i)];
      if (x != acc[std::size_t(o)]) second[std::size_t(o)] = std::max(second[std::size_t(o)], x);
    }
    for (index o = 0; o < n; ++o)
      if (std::isfinite(second[std::size_t(o)]))
        kink(id, acc[std::size_t(o)] - second[std::size_t(o)]);
  }
  return {out_shape, acc};
}

arr ref::index_(int, arr const& a, std::vector<iarg> const& args) {
  if (args.size() != a.shape.size()) bad("index: one argument per axis");
  std::vector<index> out_shape;
  std::vector<int> out_axis_of(args.size(), -1);  // operand axis -> output axis
  for (std::size_t k = 0; k < args.size(); ++k) {
    auto const& g = args[k];
    for (index p : g.pos)
      if (p < 0 || p >= a.shape[k]) bad("index out of range");
    if (g.kind == iarg::SELECT) continue;
    out_axis_of[k] = int(out_shape.size());
    out_shape.push_back(g.kind == iarg::ALL ? a.shape[k] : index(g.pos.size()));
  }
  index n = count(out_shape);
  auto sa = strides(a.shape);
  arr r{out_shape, std::vector<double>(std::size_t(n))};
  for (index i = 0; i < n; ++i) {
    auto c = unravel(out_shape, i);
    index off = 0;
    for (std::size_t k = 0; k < args.size(); ++k) {
      auto const& g = args[k];
      index ak = g.kind == iarg::ALL      ? c[std::size_t(out_axis_of[k])]
                 : g.kind == iarg::SELECT ? g.pos[0]
                                          : g.pos[std::size_t(c[std::size_t(out_axis_of[k])])];
      off += ak * sa[k];
    }
    r.v[std::size_t(i)] = a.v[std::size_t(off)];
  }
  return r;
}

arr ref::permute(int, arr const& a, std::vector<int> const& perm) {
  std::size_t R = a.shape.size();
  if (perm.size() != R) bad("permute rank");
  std::vector<index> out_shape(R);
  for (std::size_t k = 0; k < R; ++k) out_shape[k] = a.shape[std::size_t(perm[k])];
  auto sa = strides(a.shape);
  index n = count(out_shape);
  arr r{out_shape, std::vector<double>(std::size_t(n))};
  for (index i = 0; i < n; ++i) {
    auto c = unravel(out_shape, i);
    index off = 0;
    for (std::size_t k = 0; k < R; ++k) off += c[k] * sa[std::size_t(perm[k])];
    r.v[std::size_t(i)] = a.v[std::size_t(off)];
  }
  return r;
}

arr ref::matmul(int, arr const& a, arr const& b) {
  std::size_t const ra = a.shape.size(), rb = b.shape.size();
  if (ra < 2 || ra > 3 || rb < 2 || rb > 3) bad("matmul rank");
  index const M = a.shape[ra - 2], K = a.shape[ra - 1], K2 = b.shape[rb - 2], N = b.shape[rb - 1];
  if (K != K2) bad("matmul inner extents");
  index const B = ra == 3 ? a.shape[0] : rb == 3 ? b.shape[0] : 1;
  if (ra == 3 && rb == 3 && a.shape[0] != b.shape[0]) bad("matmul batch");
  std::vector<index> shape = (ra == 3 || rb == 3) ? std::vector<index>{B, M, N} : std::vector<index>{M, N};
  arr r{shape, std::vector<double>(std::size_t(B * M * N))};
  for (index q = 0; q < B; ++q)
    for (index i = 0; i < M; ++i)
      for (index j = 0; j < N; ++j) {
        double acc = 0;
        for (index k = 0; k < K; ++k) {
          double const x = a.v[std::size_t((ra == 3 ? q * M * K : 0) + i * K + k)];
          double const y = b.v[std::size_t((rb == 3 ? q * K * N : 0) + k * N + j)];
          acc += x * y;
        }
        r.v[std::size_t(q * M * N + i * N + j)] = acc;
      }
  return r;
}

arr ref::softmax(int, arr const& a, int axis, bool log) {
  std::size_t const R = a.shape.size();
  if (axis < 0 || std::size_t(axis) >= R) bad("softmax axis");
  auto st = strides(a.shape);
  index const n = a.shape[std::size_t(axis)], step = st[std::size_t(axis)];
  arr r{a.shape, std::vector<double>(a.v.size())};
  for (index i = 0; i < index(a.v.size()); ++i) {
    if (unravel(a.shape, i)[std::size_t(axis)] != 0) continue;  // one row per start
    double m = -std::numeric_limits<double>::infinity();
    for (index k = 0; k < n; ++k) m = std::max(m, a.v[std::size_t(i + k * step)]);
    double s = 0;
    for (index k = 0; k < n; ++k) s += std::exp(a.v[std::size_t(i + k * step)] - m);
    for (index k = 0; k < n; ++k) {
      double const x = a.v[std::size_t(i + k * step)];
      r.v[std::size_t(i + k * step)] = log ? x - m - std::log(s) : std::exp(x - m) / s;
    }
  }
  return r;
}

arr ref::norm(int id, arr const& a, bool rms, double eps) {
  if (a.shape.empty()) bad("norm rank");
  index const n = a.shape.back();
  arr r{a.shape, std::vector<double>(a.v.size())};
  for (index i0 = 0; i0 < index(a.v.size()); i0 += n) {
    double mean = 0;
    if (!rms) {
      for (index k = 0; k < n; ++k) mean += a.v[std::size_t(i0 + k)];
      mean /= double(n);
    }
    double var = 0;
    for (index k = 0; k < n; ++k) {
      double const c = a.v[std::size_t(i0 + k)] - mean;
      var += c * c;
    }
    var /= double(n);
    kink(id, std::sqrt(var));
    double const rs = 1.0 / std::sqrt(var + eps);
    for (index k = 0; k < n; ++k) r.v[std::size_t(i0 + k)] = (a.v[std::size_t(i0 + k)] - mean) * rs;
  }
  return r;
}

arr ref::causal(int, arr const& a) {
  std::size_t const R = a.shape.size();
  if (R < 2) bad("causal rank");
  index const Tq = a.shape[R - 2], Tk = a.shape[R - 1];
  arr r = a;
  for (index i = 0; i < index(a.v.size()); ++i) {
    index const k = i % Tk, q = (i / Tk) % Tq;
    if (k > q) r.v[std::size_t(i)] = -std::numeric_limits<double>::infinity();
  }
  return r;
}

arr ref::unsqueeze(int, arr const& a, int axis) {
  if (axis < 0 || std::size_t(axis) > a.shape.size()) bad("unsqueeze axis");
  arr r = a;
  r.shape.insert(r.shape.begin() + axis, 1);
  return r;
}

arr ref::reshape(int, arr const& a, std::vector<index> shape) {
  if (count(shape) != count(a.shape)) bad("reshape count");
  return {std::move(shape), a.v};
}

arr ref::broadcast_to(int, arr const& a, std::vector<index> shape) {
  if (broadcast(a.shape, shape) != shape) bad("broadcast_to shape");
  index n = count(shape);
  arr r{shape, std::vector<double>(std::size_t(n))};
  for (index i = 0; i < n; ++i)
    r.v[std::size_t(i)] = a.v[std::size_t(bcast_offset(a.shape, unravel(shape, i)))];
  return r;
}

// ---- run-time data and checks

namespace {
std::uint64_t g_seed = 0;
bool g_seed_set = false;

std::uint64_t mix(std::uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

data draw(graph_info const& g, std::uint64_t run_seed, int attempt) {
  data d;
  d.run_seed = run_seed;
  d.attempt = attempt;
  std::mt19937_64 rng(mix(mix(mix(run_seed) ^ std::uint64_t(g.gen_seed)) ^ std::uint64_t(g.id)) ^
                      std::uint64_t(attempt));
  auto uni = [&](double lo, double hi) {
    return lo + (hi - lo) * double(rng() >> 11) * 0x1.0p-53;
  };
  auto below = [&](index m) { return int(rng() % std::uint64_t(m)); };
  for (auto const& l : g.leaves) {
    std::vector<double> v(std::size_t(l.size));
    for (auto& x : v) x = uni(l.lo, l.hi);
    d.leaf.push_back(std::move(v));
  }
  for (auto const& s : g.ints) {
    std::vector<int> v;
    if (s.kind == int_spec::ONE) {
      v.push_back(below(s.m));
      d.pos.push_back(v[0]);
    } else if (s.kind == int_spec::UNIQUE) {
      std::vector<int> all(std::size_t(s.m));
      for (index k = 0; k < s.m; ++k) all[std::size_t(k)] = int(k);
      std::shuffle(all.begin(), all.end(), rng);
      v.assign(all.begin(), all.begin() + s.n);
      d.pos.push_back(-1);
    } else {
      for (index k = 0; k < s.n; ++k) v.push_back(below(s.m));
      if (s.n >= 2) {  // force a repeat: one position copies another
        std::size_t a = std::size_t(below(s.n)), b = std::size_t(below(s.n - 1));
        if (b >= a) ++b;
        v[b] = v[a];
      }
      d.pos.push_back(-1);
    }
    d.idx.push_back(std::move(v));
  }
  d.w.resize(std::size_t(g.w_size));
  for (auto& x : d.w) x = uni(-1.0, 1.0);
  return d;
}
}  // namespace

std::uint64_t runtime_seed() {
  if (g_seed_set) return g_seed;
  if (char const* e = std::getenv("GRADIX_RANDOM_SEED")) return std::strtoull(e, nullptr, 10);
  return 1;
}
void set_runtime_seed(std::uint64_t s) {
  g_seed = s;
  g_seed_set = true;
}

data sample(graph_info const& g, graph_fn const& f) {
  std::uint64_t s = runtime_seed();
  std::string last;
  for (int attempt = 0; attempt < 200; ++attempt) {
    data d = draw(g, s, attempt);
    ref r;
    arr out = f(r, d);
    bool finite = true;
    for (double x : out.v) finite = finite && std::isfinite(x);
    if (!finite) {
      last = "a non-finite reference value";
      continue;
    }
    if (r.kink_margin < kink_margin) {
      std::ostringstream os;
      os << "node n" << r.kink_node << " within " << r.kink_margin << " of its kink";
      last = os.str();
      continue;
    }
    d.ok = true;
    return d;
  }
  data d = draw(g, s, 0);
  d.why = "no data away from the kinks in 200 draws (last: " + last + ")";
  return d;
}

std::string describe(graph_info const& g, data const& d) {
  std::ostringstream os;
  os << "random graph: generator seed " << g.gen_seed << ", graph " << g.id
     << " (python3 tools/gen_random_graphs.py --seed " << g.gen_seed << " --only " << g.id
     << "; meson option random_seed); run-time seed " << d.run_seed << " (--random-seed=" << d.run_seed
     << " or GRADIX_RANDOM_SEED=" << d.run_seed << "), data draw " << d.attempt << "\n"
     << g.text;
  return os.str();
}

std::string check_values(arr const& expected, std::vector<double> const& got) {
  if (index(got.size()) != count(expected.shape)) {
    std::ostringstream os;
    os << "forward: gradix gives " << got.size() << " elements, the reference "
       << count(expected.shape);
    return os.str();
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    double x = got[i], y = expected.v[i];
    if (!(std::fabs(x - y) <= 1e-9 + 1e-9 * std::fabs(y))) {
      std::ostringstream os;
      os.precision(17);
      os << "forward mismatch at [";
      auto c = unravel(expected.shape, index(i));
      for (std::size_t k = 0; k < c.size(); ++k) os << (k ? ", " : "") << c[k];
      os << "]: gradix " << x << " vs reference " << y;
      return os.str();
    }
  }
  return "";
}

double loss(graph_info const& g, graph_fn const& f, data const& d) {
  ref r;
  arr out = f(r, d);
  if (g.w_size == 0) {
    if (out.v.size() != 1) bad("a rank-0 root has one element");
    return out.v[0];
  }
  if (out.v.size() != d.w.size()) bad("W and the root differ in size");
  double acc = 0;
  for (std::size_t i = 0; i < out.v.size(); ++i) acc += d.w[i] * out.v[i];
  return acc;
}

void central_differences(graph_info const& g, graph_fn const& f, data const& d0, int leaf,
                         std::vector<double>& numeric, std::vector<double>& noise) {
  data d = d0;
  auto& x = d.leaf[std::size_t(leaf)];
  numeric.assign(x.size(), 0.0);
  noise.assign(x.size(), 0.0);
  for (std::size_t k = 0; k < x.size(); ++k) {
    double x0 = x[k];
    double h = 1e-6 * std::max(1.0, std::fabs(x0));
    x[k] = x0 + h;
    double xp = x[k], fp = loss(g, f, d);
    x[k] = x0 - h;
    double xm = x[k], fm = loss(g, f, d);
    x[k] = x0;
    numeric[k] = (fp - fm) / (xp - xm);
    noise[k] = 16 * std::numeric_limits<double>::epsilon() * (std::fabs(fp) + std::fabs(fm)) /
               (xp - xm);
  }
}

std::string check_grad(graph_info const& g, graph_fn const& f, data const& d, int leaf,
                       std::vector<double> const& analytic) {
  std::vector<double> numeric, noise;
  central_differences(g, f, d, leaf, numeric, noise);
  std::ostringstream os;
  os.precision(17);
  if (analytic.size() != numeric.size()) {
    os << "leaf " << leaf << ": the gradient has " << analytic.size() << " elements, the leaf "
       << numeric.size();
    return os.str();
  }
  double const rtol = 1e-6, atol = 1e-8;
  double worst = 0;
  std::size_t worst_k = 0;
  bool bad_any = false;
  for (std::size_t k = 0; k < numeric.size(); ++k) {
    double a = analytic[k], n = numeric[k];
    double tol = atol + noise[k] + rtol * std::max(std::fabs(a), std::fabs(n));
    double r = std::fabs(a - n) / tol;
    if (!(r <= 1.0) && (!bad_any || !(r <= worst))) {  // NaN counts as worst
      worst = r;
      worst_k = k;
      bad_any = true;
      if (std::isnan(r)) break;
    }
  }
  if (!bad_any) return "";
  double a = analytic[worst_k], n = numeric[worst_k];
  os << "gradient mismatch for x" << leaf << " (leaf " << leaf << "); worst element, flat index "
     << worst_k << ": analytic " << a << " vs numeric " << n << " (|diff| " << std::fabs(a - n)
     << ", tol " << atol + noise[worst_k] + rtol * std::max(std::fabs(a), std::fabs(n)) << ")";
  return os.str();
}

}  // namespace rg
