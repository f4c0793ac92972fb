// Fuzz target: index and view operations, forward and backward, against a naive reference.
//
// The input bytes choose a parameter (shape up to 8 x 8, possibly empty; row- or
// column-major; a sparse gradient along the indexed axis, or a dense one tracking the
// other axis), an index operation along an
// axis (a gather with indices of type int8/uint16/int32/int64/uint64 that may repeat, be
// empty, negative, out of range or extreme; a range with extreme start/stop/step; a select
// or `at` with extreme positions), an elementwise function, and a change of the
// parameter's value after the expression is built (none, same shape by move or copy, or a
// new shape). Then `value` and `backward` run. Checked:
//   - nothing crashes (the CI stage runs this under AddressSanitizer and UBSan);
//   - every failure is a gradix::error whose message starts with "gradix", and exactly the
//     inputs the reference finds invalid fail;
//   - after a failure the gradient is unchanged (all zeros: the parameter is new);
//   - otherwise the value and the gradient equal the reference (double precision).
//
// Built two ways: with libFuzzer (clang -fsanitize=fuzzer; `.ci/run` runs it for about a
// minute from tests/fuzz/corpus) and, with GRADIX_FUZZ_STANDALONE, as a plain program that
// runs the files given on its command line (the `fuzz_corpus` test replays the corpus).
#include <gradix/gradix.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::index_t;

namespace {

__extension__ typedef __int128 i128;  // the reference's exact range arithmetic

struct reader {
  std::uint8_t const* p;
  std::size_t n;
  std::uint8_t u8() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
  std::uint64_t u64() {
    std::uint64_t v = 0;
    for (int k = 0; k < 8; ++k) v = v << 8 | u8();
    return v;
  }
  /// A position-like integer: small values most of the time, extremes sometimes.
  std::int64_t i64() {
    switch (u8() % 8) {
      case 0: return std::numeric_limits<std::int64_t>::max();
      case 1: return std::numeric_limits<std::int64_t>::min();
      case 2: return std::int64_t(u64());
      case 3: return -std::int64_t(u8() % 10) - 1;
      case 4: return std::int64_t(1) << (u8() % 64);
      default: return std::int64_t(u8() % 12);
    }
  }
};

[[noreturn]] void bug(char const* what, std::string const& detail = "") {
  std::fprintf(stderr, "fuzz_index: %s %s\n", what, detail.c_str());
  std::abort();
}

struct element_fn {
  int kind;
  double f(double x) const {
    switch (kind) {
      case 0: return x * x;
      case 1: return std::tanh(x);
      default: return x * 2 + 1;
    }
  }
  double df(double x) const {
    switch (kind) {
      case 0: return 2 * x;
      case 1: return 1 - std::tanh(x) * std::tanh(x);
      default: return 2;
    }
  }
  template <class E>
  auto apply(E const& e) const {
    // one expression type for every kind: the other terms get a zero weight
    double a = kind == 0, b = kind == 1, c = kind == 2;
    return gx::sum(gx::square(e) * a + gx::tanh(e) * b + (e * 2.0 + 1.0) * c);
  }
};

double value_at(index_t r, index_t c, int salt) {
  std::uint32_t h = std::uint32_t((r * 131 + c * 7 + salt * 977) * 2654435761u);
  return double(h) / 4294967296.0 - 0.5;
}

/// One index operation along an axis, as the bytes describe it, and the reference of what
/// it reads.
struct index_op {
  int kind = 0;           // 0 gather, 1 range, 2 select, 3 at
  int itype = 0;          // gather: 0 int8, 1 uint16, 2 int32, 3 int64, 4 uint64
  std::vector<std::int64_t> raw;  // gather indices as int64 (the typed vectors hold the same)
  std::vector<std::int8_t> i8;
  std::vector<std::uint16_t> u16;
  std::vector<std::int32_t> i32;
  std::vector<std::int64_t> i64;
  std::vector<std::uint64_t> u64;
  std::int64_t start = 0, stop = 0, step = 1;
  std::uint64_t pos = 0;
  bool pos_unsigned = false;

  void read(reader& in) {
    kind = in.u8() % 4;
    if (kind == 0) {
      itype = in.u8() % 5;
      int len = in.u8() % 17;
      for (int k = 0; k < len; ++k) {
        std::int64_t v = in.u8() % 4 == 0 ? in.i64() : std::int64_t(in.u8() % 10);
        switch (itype) {
          case 0: i8.push_back(std::int8_t(v)); raw.push_back(i8.back()); break;
          case 1: u16.push_back(std::uint16_t(v)); raw.push_back(u16.back()); break;
          case 2: i32.push_back(std::int32_t(v)); raw.push_back(i32.back()); break;
          case 3: i64.push_back(v); raw.push_back(v); break;
          default: u64.push_back(std::uint64_t(v)); raw.push_back(v); break;
        }
      }
    } else if (kind == 1) {
      start = in.i64();
      stop = in.i64();
      step = in.i64();
    } else {
      pos_unsigned = in.u8() % 2;
      pos = std::uint64_t(in.i64());
    }
  }
  /// The positions read along the axis (in output order), or false when gradix must throw.
  bool positions(index_t extent, std::vector<index_t>& out) const {
    auto in_range = [&](long double v) { return v >= 0 && v < (long double)extent; };
    if (kind == 0) {
      for (std::size_t k = 0; k < raw.size(); ++k) {
        long double v = itype == 4 ? (long double)std::uint64_t(raw[k]) : (long double)raw[k];
        if (!in_range(v)) return false;
        out.push_back(index_t(v));
      }
      return true;
    }
    if (kind == 1) {
      if (step == 0) return false;
      i128 n = 0, s = start, e = stop, d = step;
      if (d > 0 && e > s) n = (e - s - 1) / d + 1;
      if (d < 0 && e < s) n = (s - e - 1) / (-d) + 1;
      if (n > std::numeric_limits<std::int64_t>::max()) return false;
      if (n == 0) return true;
      i128 last = s + d * (n - 1);
      if (s < 0 || s >= extent || last < 0 || last >= extent) return false;
      for (i128 k = 0; k < n; ++k) out.push_back(index_t(s + d * k));
      return true;
    }
    long double v = pos_unsigned ? (long double)pos : (long double)std::int64_t(pos);
    if (!in_range(v)) return false;
    out.push_back(index_t(v));
    return true;
  }
};

template <class Layout, class Spec, int Axis>
void run_case(reader& in, index_t rows, index_t cols, index_op const& op, element_fn fn) {
  auto make_value = [](index_t r, index_t c, int salt) {
    gx::tensor<double, gx::shape<dyn, dyn>, Layout> t(gx::dims(r, c));
    for (index_t i = 0; i < r; ++i)
      for (index_t j = 0; j < c; ++j) t(i, j) = value_at(i, j, salt);
    return t;
  };
  auto p = gx::param(make_value(rows, cols, 0), Spec{});
  int change = in.u8() % 4;
  index_t const extent = Axis == 0 ? rows : cols;

  // reference: the positions read, then the value and the gradient after the change
  std::vector<index_t> pos;
  bool valid = op.positions(extent, pos);
  int salt = change == 1 || change == 3 ? 1 : 0;
  bool expect_error = !valid || change == 2;
  double ref_value = 0;
  std::vector<double> ref_grad(std::size_t(rows * cols), 0.0);
  if (!expect_error) {
    index_t other = Axis == 0 ? cols : rows;
    for (index_t q : pos)
      for (index_t o = 0; o < other; ++o) {
        index_t r = Axis == 0 ? q : o, c = Axis == 0 ? o : q;
        double x = value_at(r, c, salt);
        ref_value += fn.f(x);
        ref_grad[std::size_t(r * cols + c)] += fn.df(x);
      }
  }

  std::string err;
  double got = 0;
  try {
    auto run = [&](auto const& e) {
      auto loss = fn.apply(e);
      if (change == 1) p.value() = make_value(rows, cols, 1);
      if (change == 2) p.value() = make_value(rows + 1, cols, 1);
      if (change == 3) {
        auto t = make_value(rows, cols, 1);
        p.value() = t;
      }
      got = gx::value(loss);
      double b = gx::backward(loss);
      if (b != got) bug("backward's value differs from value()");
    };
    auto along = [&](auto const& idx) {
      if constexpr (Axis == 0) run(p(idx, gx::all));
      else run(p(gx::all, idx));
    };
    if (op.kind == 0) {
      switch (op.itype) {
        case 0: along(gx::indices(op.i8)); break;
        case 1: along(gx::indices(op.u16)); break;
        case 2: along(gx::indices(op.i32)); break;
        case 3: along(gx::indices(op.i64)); break;
        default: along(gx::indices(op.u64)); break;
      }
    } else if (op.kind == 1) {
      along(gx::range(op.start, op.stop, op.step));
    } else if (op.kind == 2) {
      // select drops the axis
      if (op.pos_unsigned) run(gx::select<Axis>(p, op.pos));
      else run(gx::select<Axis>(p, std::int64_t(op.pos)));
    } else {
      if (op.pos_unsigned) along(gx::at(op.pos));
      else along(gx::at(std::int64_t(op.pos)));
    }
  } catch (gx::error const& e) {
    err = e.what();
    if (err.rfind("gradix", 0) != 0) bug("an error message that does not start with gradix:", err);
  }
  // (any other exception escapes: libFuzzer reports it as a crash)

  auto g = p.grad().to_dense();
  if (!err.empty()) {
    if (!expect_error) bug("a valid input threw:", err);
    for (index_t k = 0; k < g.size(); ++k)
      if (g.data()[k] != 0) bug("a failed call wrote a gradient", err);
    return;
  }
  if (expect_error) bug("an invalid input did not throw");
  auto close = [](double a, double b) { return std::abs(a - b) <= 1e-9 * (1 + std::abs(b)); };
  if (!close(got, ref_value))
    bug("value differs:", std::to_string(got) + " vs " + std::to_string(ref_value));
  for (index_t r = 0; r < rows; ++r)
    for (index_t c = 0; c < cols; ++c)
      if (!close(g(r, c), ref_grad[std::size_t(r * cols + c)]))
        bug("gradient differs at", std::to_string(r) + ", " + std::to_string(c));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  reader in{data, size};
  index_t rows = in.u8() % 9, cols = in.u8() % 9;
  int config = in.u8() % 2;
  element_fn fn{in.u8() % 3};
  index_op op;
  op.read(in);
  // (two configurations: each one instantiates nine backward passes, and the fuzz build
  // runs under ASan + UBSan in CI)
  if (config == 0) run_case<gx::row_major, gx::sparse_grad_t<0>, 0>(in, rows, cols, op, fn);
  else run_case<gx::col_major, gx::dense_grad_t<0>, 1>(in, rows, cols, op, fn);
  return 0;
}

#if defined(GRADIX_FUZZ_STANDALONE)
// Replays inputs: each argument is a file or a directory of files.
#include <filesystem>
#include <fstream>
#include <iterator>

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (int a = 1; a < argc; ++a) {
    fs::path p(argv[a]);
    if (fs::is_directory(p)) {
      for (auto const& e : fs::directory_iterator(p))
        if (e.is_regular_file()) files.push_back(e.path());
    } else {
      files.push_back(p);
    }
  }
  std::sort(files.begin(), files.end());
  for (auto const& f : files) {
    std::ifstream s(f, std::ios::binary);
    std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(s)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
  }
  std::printf("fuzz_index: %zu inputs replayed, no finding\n", files.size());
  return files.empty() ? 1 : 0;
}
#endif
