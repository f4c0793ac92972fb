// Checkpoints (gradix/checkpoint.hpp, docs/checkpoint.md): round trips, a training run
// stopped and resumed gives the same bits as one that never stopped (every optimizer), loads
// that refuse a wrong file and change nothing, and saves that never leave a half-written
// checkpoint (a process killed inside the write, a write that fails).
#include "testing.hpp"

#include <gradix/checkpoint.hpp>
#include <gradix/gradix.hpp>
#include <gradix/optim.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#if defined(__linux__)
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#endif

namespace gx = gradix;
using gx::dyn;
using gx::index_t;
namespace fs = std::filesystem;

namespace {

// A fresh directory per test case, removed at the end.
struct temp_dir {
  fs::path path;
  temp_dir() {
    path = fs::temp_directory_path() / ("gradix_ckpt_" + std::to_string(long(::getpid())) + "_" +
                                        std::to_string(counter()++));
    fs::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(char const* name) const { return (path / name).string(); }
  static int& counter() {
    static int c = 0;
    return c;
  }
};

template <class T>
bool same_bits(T const* a, T const* b, index_t n) {
  return n == 0 || std::memcmp(a, b, std::size_t(n) * sizeof(T)) == 0;
}

std::string read_file(std::string const& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_file(std::string const& p, std::string const& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(s.data(), std::streamsize(s.size()));
}

// A small model: a sparse embedding table read by repeated indices, a dense weight and a
// bias; the loss a squared error of a bag-of-rows score.
struct model {
  gx::parameter<float, gx::shape<dyn, 6>, gx::row_major, gx::sparse_grad_t<0>> E;
  gx::parameter<float, gx::shape<6, 3>, gx::col_major> W;
  gx::parameter<float, gx::shape<dyn>> b;
  explicit model(std::uint64_t seed)
      : E(gx::param(gx::randn<float>(gx::dims(50, gx::fix<6>), seed, 0.0f, 0.3f), gx::sparse_grad<0>)),
        W(gx::param(gx::uniform<float, gx::col_major>(gx::shape<6, 3>{}, seed + 1, -0.5f, 0.5f))),
        b(gx::param(gx::zeros<float>(gx::dims(3)))) {}
  // the step-th batch: 8 rows (repeats), targets from the step number
  float step_loss(int step) {
    std::vector<int> ids(8);
    for (int k = 0; k < 8; ++k) ids[std::size_t(k)] = (step * 7 + k * k * 3) % 50;
    auto t = gx::uniform<float>(gx::dims(8, 3), std::uint64_t(1000 + step), -1.0f, 1.0f);
    auto h = E(gx::indices(ids), gx::all);
    auto y = gx::sum<1>(gx::unsqueeze<2>(h) * W) + b;
    return gx::backward(gx::mean(gx::square(y - t)));
  }
};

void check_resume(auto make_opt, char const* what) {
  CAPTURE(what);
  temp_dir dir;
  std::string const path = dir / "run.gxck";
  int const total = 10, stop = 5;

  // the run that never stops
  model a(1);
  auto opt_a = make_opt(a);
  std::vector<float> losses_a;
  for (int s = 1; s <= total; ++s) {
    opt_a.zero_grad();
    losses_a.push_back(a.step_loss(s));
    opt_a.step();
  }

  // the run stopped after `stop` steps and saved
  {
    model b(1);
    auto opt_b = make_opt(b);
    for (int s = 1; s <= stop; ++s) {
      opt_b.zero_grad();
      b.step_loss(s);
      opt_b.step();
    }
    // doc-snippet: save
    gx::checkpoint ck;
    ck.add("E", b.E).add("W", b.W).add("b", b.b).add("opt", opt_b);
    gx::save(path, ck);  // or ck.save(path)
    // end doc-snippet
  }

  // a new process would start here: other initial values, then the checkpoint
  model c(99);
  auto opt_c = make_opt(c);
  // doc-snippet: load
  gx::checkpoint ck;
  ck.add("E", c.E).add("W", c.W).add("b", c.b).add("opt", opt_c);
  gx::load(path, ck);  // or ck.load(path)
  // end doc-snippet
  for (int s = stop + 1; s <= total; ++s) {
    opt_c.zero_grad();
    float const l = c.step_loss(s);
    CHECK(std::memcmp(&l, &losses_a[std::size_t(s - 1)], sizeof l) == 0);
    opt_c.step();
  }
  CHECK(same_bits(a.E.value().data(), c.E.value().data(), a.E.value().size()));
  CHECK(same_bits(a.W.value().data(), c.W.value().data(), a.W.value().size()));
  CHECK(same_bits(a.b.value().data(), c.b.value().data(), a.b.value().size()));
}

}  // namespace

TEST_CASE("checkpoint: tensors and parameters round trip bit for bit, in place") {
  temp_dir dir;
  auto p = gx::param(gx::randn<double>(gx::dims(4, 5), 3), gx::sparse_grad<1>);
  auto q = gx::param(gx::uniform<float, gx::col_major>(gx::dims(3, 2), 4, -1.0f, 1.0f));
  auto t = gx::tensor<std::int64_t, gx::shape<3>>{-7, 0, 1ll << 40};
  auto s = gx::tensor<float, gx::shape<>>{2.5f};
  gx::checkpoint out;
  out.add("p", p).add("q", q).add("t", t).add("s", s);
  out.save(dir / "a.gxck");

  auto p2 = gx::param(gx::zeros<double>(gx::dims(4, 5)), gx::sparse_grad<1>);
  auto q2 = gx::param(gx::zeros<float, gx::col_major>(gx::dims(3, 2)));
  gx::tensor<std::int64_t, gx::shape<3>> t2{};
  gx::tensor<float, gx::shape<>> s2{};
  double const* where = p2.value().data();
  gx::checkpoint in;
  in.add("p", p2).add("q", q2).add("t", t2).add("s", s2);
  in.load(dir / "a.gxck");
  CHECK(p2.value().data() == where);  // loaded into the same buffer: views stay valid
  CHECK(same_bits(p.value().data(), p2.value().data(), 20));
  CHECK(same_bits(q.value().data(), q2.value().data(), 6));
  CHECK(t2(2) == (1ll << 40));
  CHECK(t2(0) == -7);
  CHECK(s2.data()[0] == 2.5f);
  CHECK(in.names() == std::vector<std::string>{"p", "q", "t", "s"});
  // no temporary file is left next to the checkpoint
  int files = 0;
  for (auto const& e : fs::directory_iterator(dir.path)) files += e.is_regular_file();
  CHECK(files == 1);
}

TEST_CASE("checkpoint: a run stopped and resumed continues with the same bits (every optimizer)") {
  check_resume([](model& m) { return gx::optim::lazy_adam({.lr = 0.05}, m.E, m.W, m.b); }, "lazy_adam");
  check_resume([](model& m) { return gx::optim::adam({.lr = 0.05, .weight_decay = 0.01}, m.E, m.W, m.b); }, "adam");
  check_resume([](model& m) { return gx::optim::adamw({.lr = 0.05, .weight_decay = 0.1}, m.E, m.W, m.b); }, "adamw");
  check_resume(
      [](model& m) { return gx::optim::sgd({.lr = 0.1, .momentum = 0.9, .nesterov = true}, m.E, m.W, m.b); },
      "sgd with Nesterov momentum");
  check_resume([](model& m) { return gx::optim::sgd({.lr = 0.1}, m.E, m.W, m.b); }, "plain sgd");
  check_resume(
      [](model& m) { return gx::optim::adagrad({.lr = 0.1, .initial_accumulator = 0.1}, m.E, m.W, m.b); }, "adagrad");
}

TEST_CASE("checkpoint: half-width parameters and tensors; stochastic rounding resumes with the same bits") {
  temp_dir dir;
  auto make = [] {
    gx::tensor<gx::bfloat16, gx::shape<dyn, dyn>> e(gx::dims(12, 6));
    auto const r = gx::randn<float>(gx::dims(12, 6), 21);
    e = r;
    auto p = gx::param(e, gx::sparse_grad<0>);
    p.set_rounding(gx::stochastic_rounding(5));
    return p;
  };
  std::vector<int> rows{3, 0, 3, 11};
  auto step = [&](auto& p, auto& opt) {
    gx::backward(gx::sum(gx::square(gx::gather<0>(p, rows))));
    opt.step();
    opt.zero_grad();
  };
  auto h = gx::tensor<gx::half, gx::shape<3>>{gx::half(1.5f), gx::half(-65504.0f), gx::half::from_bits(0x0001)};
  // uninterrupted: 6 steps
  auto a = make();
  auto oa = gx::optim::adagrad({.lr = 0.01}, a);
  for (int s = 0; s < 6; ++s) step(a, oa);
  // 3 steps, saved, loaded into fresh objects, 3 more
  auto b = make();
  auto ob = gx::optim::adagrad({.lr = 0.01}, b);
  for (int s = 0; s < 3; ++s) step(b, ob);
  gx::checkpoint out;
  out.add("E", b).add("opt", ob).add("h", h);
  out.save(dir / "h.gxck");
  auto c = make();
  auto oc = gx::optim::adagrad({.lr = 0.01}, c);
  gx::tensor<gx::half, gx::shape<3>> h2{};
  gx::checkpoint in;
  in.add("E", c).add("opt", oc).add("h", h2);
  in.load(dir / "h.gxck");
  CHECK(c.rounded_updates() == 3);
  CHECK(same_bits(b.value().data(), c.value().data(), 72));
  for (int s = 0; s < 3; ++s) step(c, oc);
  CHECK(same_bits(a.value().data(), c.value().data(), 72));
  CHECK(same_bits(h.data(), h2.data(), 3));
  CHECK(std::find(in.names().begin(), in.names().end(), std::string("E.rounded_updates")) != in.names().end());
  // a bfloat16 record does not load into a float tensor
  auto f = gx::param(gx::zeros<float>(gx::dims(12, 6)), gx::sparse_grad<0>);
  auto of = gx::optim::adagrad({.lr = 0.01}, f);
  gx::checkpoint wrong;
  wrong.add("E", f).add("opt", of).add("h", h2);
  CHECK_THROWS_WITH_AS(wrong.load(dir / "h.gxck"), doctest::Contains("holds bf16 elements, the program's object f32"),
                       gx::error);
}

TEST_CASE("checkpoint: an optimizer's state and options are records of their own") {
  model m(1);
  auto opt = gx::optim::lazy_adam({.lr = 0.05}, m.E, m.W, m.b);
  gx::checkpoint ck;
  ck.add("opt", opt);
  auto n = ck.names();
  for (char const* want : {"opt.lr", "opt.t", "opt.m.0", "opt.v.2", "opt.last.0", "opt.last.2"})
    CHECK(std::find(n.begin(), n.end(), std::string(want)) != n.end());
  CHECK_THROWS_WITH_AS(ck.add("opt", opt), doctest::Contains("the name 'opt.lr' is registered twice"), gx::error);
}

TEST_CASE("checkpoint: a load refuses a file that does not match and changes nothing") {
  temp_dir dir;
  std::string const good = dir / "good.gxck";
  auto p = gx::param(gx::randn<float>(gx::dims(4, 3), 5));
  auto t = gx::tensor<std::int32_t, gx::shape<2>>{1, 2};
  {
    gx::checkpoint ck;
    ck.add("p", p).add("t", t);
    ck.save(good);
  }
  auto const bytes = read_file(good);

  // the objects a failed load must leave alone
  auto p2 = gx::param(gx::full(gx::dims(4, 3), 7.0f));
  auto t2 = gx::tensor<std::int32_t, gx::shape<2>>{9, 9};
  auto unchanged = [&] { return p2.value()(3, 2) == 7.0f && p2.value()(0, 0) == 7.0f && t2(0) == 9 && t2(1) == 9; };
  auto load_into = [&](std::string const& path) {
    gx::checkpoint ck;
    ck.add("p", p2).add("t", t2);
    ck.load(path);
  };
  // the bytes of a checkpoint of p3 and t under the names the load expects
  auto saved_as = [&](auto& p3, char const* file) {
    gx::checkpoint ck;
    ck.add("p", p3).add("t", t);
    ck.save(dir / file);
    return read_file(dir / file);
  };
  auto refused = [&](std::string const& contents, char const* message) {
    CAPTURE(message);
    std::string const path = dir / "bad.gxck";
    write_file(path, contents);
    CHECK_THROWS_WITH_AS(load_into(path), doctest::Contains(message), gx::error);
    CHECK(unchanged());
  };

  SUBCASE("a damaged byte fails the checksum") {
    std::string b = bytes;
    b[b.size() / 2] = char(b[b.size() / 2] ^ 0x10);
    refused(b, "the checksum does not match");
  }
  SUBCASE("a truncated file") { refused(bytes.substr(0, bytes.size() - 20), "the checksum does not match"); }
  SUBCASE("not a checkpoint") { refused("hello, world: not a checkpoint at all", "is not a gradix checkpoint"); }
  SUBCASE("a newer format") {
    std::string b = bytes;
    b[8] = 2;  // version 2
    refused(b, "format version 2; this gradix reads version 1");
  }
  SUBCASE("a wrong shape") {
    auto p3 = gx::param(gx::randn<float>(gx::dims(4, 5), 5));
    refused(saved_as(p3, "shape.gxck"), "record 'p' has shape [4, 5], the program's object [4, 3]");
  }
  SUBCASE("a wrong element type") {
    auto p3 = gx::param(gx::randn<double>(gx::dims(4, 3), 5));
    refused(saved_as(p3, "type.gxck"), "record 'p' holds f64 elements, the program's object f32");
  }
  SUBCASE("a wrong layout") {
    auto p3 = gx::param(gx::randn<float, gx::col_major>(gx::dims(4, 3), 5));
    refused(saved_as(p3, "layout.gxck"), "record 'p' is column-major, the program's object row-major");
  }
  SUBCASE("a missing record") {
    gx::checkpoint ck;
    ck.add("p", p);
    ck.save(dir / "missing.gxck");
    refused(read_file(dir / "missing.gxck"), "no record 't'");
  }
  SUBCASE("an extra record") {
    auto extra = gx::tensor<float, gx::shape<1>>{1};
    gx::checkpoint ck;
    ck.add("p", p).add("t", t).add("extra", extra);
    ck.save(dir / "extra.gxck");
    refused(read_file(dir / "extra.gxck"), "record 'extra' is not registered");
  }
  SUBCASE("a file that does not exist") {
    CHECK_THROWS_WITH_AS(load_into(dir / "nothing.gxck"), doctest::Contains("cannot open"), gx::error);
    CHECK(unchanged());
  }
  // and the good file still loads
  load_into(good);
  CHECK(same_bits(p.value().data(), p2.value().data(), 12));
  CHECK(t2(1) == 2);
}

#if defined(__linux__)
TEST_CASE("checkpoint: a save killed or failing inside its write leaves the old checkpoint whole") {
  temp_dir dir;
  std::string const path = dir / "run.gxck";
  auto p = gx::param(gx::randn<float>(gx::dims(200, 50), 8));  // 40 kB of data
  gx::checkpoint ck;
  ck.add("p", p);
  ck.save(path);
  auto const saved = read_file(path);
  p.value()(0, 0) += 1.0f;  // the next save would differ

  // a child limited to 10 kB files: SIGXFSZ kills it inside the write ("a crash")
  pid_t const pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    rlimit lim{10000, 10000};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    ck.save(path);
    ::_exit(0);  // not reached
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(WIFSIGNALED(status));
  CHECK(read_file(path) == saved);  // the old checkpoint, whole

  // the same limit with SIGXFSZ ignored: the write fails, save throws, the temporary goes
  pid_t const pid2 = ::fork();
  REQUIRE(pid2 >= 0);
  if (pid2 == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit lim{10000, 10000};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    try {
      ck.save(path);
    } catch (gx::error const& e) {
      bool const ok = std::strstr(e.what(), "gradix::checkpoint::save: writing ") &&
                      std::strstr(e.what(), "is unchanged");
      ::_exit(ok ? 3 : 4);
    }
    ::_exit(5);
  }
  ::waitpid(pid2, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 3);
  CHECK(read_file(path) == saved);
  int tmp = 0;
  for (auto const& e : fs::directory_iterator(dir.path))
    tmp += e.path().filename().string().find(".tmp.") != std::string::npos;
  CHECK(tmp == 1);  // only the killed child's temporary (a crash cannot clean up)

  // and the checkpoint loads
  auto p2 = gx::param(gx::zeros<float>(gx::dims(200, 50)));
  gx::checkpoint in;
  in.add("p", p2);
  in.load(path);
  CHECK(p2.value()(0, 0) != p.value()(0, 0));  // the value before the change
  CHECK(p2.value()(1, 1) == p.value()(1, 1));
}
#endif
