// Model blocks, written the natural way from the docs (benchmark, not a test): issue 32's
// table. For each block, loss = sum(square(block)); forward = gx::value(loss), backward =
// gx::backward(loss) (one call: the value and the gradient of every parameter), and the
// ratio backward / forward, at 1 thread. Issue 32's target is a ratio of at most 3.5 for
// every block. bench/blocks_torch.py is the PyTorch 2 twin (same blocks, shapes and output).
//
// Shapes: X (B, T, D) = (4, 32, 64), a constant tensor; W (D, D), W1 (D, FF), W2 (FF, D)
// with FF = 256, and Wq, Wk, Wv, Wo (D, D): parameters. --large: 8x the elements of X,
// B 16, T 64, D 128, FF 512 (the W's accordingly). --x-param: X is a parameter too (its
// gradient is computed by every backward call), which is what makes the gradient cross
// the normalization in the norm blocks: with a constant X, layer_norm and rms_norm have no
// parameter (their backward call is the value alone; the line says "no parameter") and
// ln_matmul's and residual's gradients stop at W. Issue 32's table was measured with X a
// parameter (its matmul ratio of 3.2 is the forward product and two gradient products);
// --x-param gives its figures (~600x for the layer norm at the small shape).
//
//   matmul        matmul(X, W)
//   mlp_gelu      matmul(gelu_tanh(matmul(X, W1)), W2) (gx::gelu_tanh: the tanh form,
//                 0.5 h (1 + tanh(sqrt(2/pi) (h + 0.044715 h^3))))
//   layer_norm    ln(X) = gx::layer_norm(X): (X - mean) / sqrt(mean(square(X - mean)) +
//                 eps) over the last axis, eps 1e-5 (no affine parameters)
//   ln_matmul     matmul(ln(X), W)
//   residual      X + matmul(ln(X), W)
//   rms_norm      gx::rms_norm(X, 1e-5f): X / sqrt(mean(square(X)) + eps), the last axis
//   softmax       softmax<2>(matmul(X, W)) (not through cross_entropy)
//   log_softmax   log_softmax<2>(matmul(X, W))
//   attention     matmul(softmax<2>(matmul(matmul(X, W), permute<0,2,1>(X))), X)
//   causal_head   one causal attention head: q, k, v = matmul(X, Wq), matmul(X, Wk),
//                 matmul(X, Wv); matmul(softmax<2>(where(mask, matmul(q, permute<0,2,1>(k))
//                 * (1 / sqrt(D)), -1e9)), v), mask a (T, T) constant, 1 on and below the
//                 diagonal
//   transformer   a pre-norm block: h = X + matmul(causal_head(ln(X)), Wo), then
//                 h + matmul(gelu_tanh(matmul(ln(h), W1)), W2) (ln without affine
//                 parameters), ln(X) and h bound by gx::let (each read several times)
//
// Every block runs one warm-up (value, then backward) and up to --reps repeats (default 9),
// forward and backward interleaved, the gradients cleared between repeats outside the
// timing; the figures are medians. Once a block's backward calls (the warm-up's included)
// have taken more than --limit seconds (default 3) in all, its remaining repeats are
// skipped (before gx::let and the staged reduction adjoints a layer norm's backward took
// ~600x its forward); the line and the JSON say how many repeats were timed (0: the
// warm-up call's times, first touch of the storages included).
//
// Each block runs in a child process (fork) of its own, so that a block that crashes (a
// stack overflow: before gx::let, the transformer block overflowed the default 8 MiB stack)
// or that runs past --timeout seconds in all (default 60; the child is killed) is reported
// as such and the others still run. --stack MIB runs each block on a thread with that stack
// size; 0, the default, runs it on the main thread and its stack (ulimit -s).
// --no-fork runs every block in this process, one after the other (for a profiler or a
// debugger: a crash ends the run). --only BLOCK (repeatable) runs those blocks.
// The last line is one JSON object with every median and ratio; a block that did not finish
// has a "status" other than "ok" and no figures.
//
// The transformer block is compiled unless GRADIX_BENCH_BLOCKS_TRANSFORMER is 0. Compile
// cost today (g++ 12 -O3 -march=native): about 57 s and 1.3 GB for this file, of which the
// transformer block is about 20 s and 0.35 GB.

#include <gradix/gradix.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <poll.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef GRADIX_BENCH_BLOCKS_TRANSFORMER
#define GRADIX_BENCH_BLOCKS_TRANSFORMER 1
#endif

namespace gx = gradix;
using gx::dyn;
using gx::index_t;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

char const* const block_names[] = {
    "matmul", "mlp_gelu", "layer_norm", "ln_matmul", "residual", "rms_norm", "softmax",
    "log_softmax", "attention", "causal_head",
#if GRADIX_BENCH_BLOCKS_TRANSFORMER
    "transformer",
#endif
};

// What a child sends back: plain data, through a pipe.
struct figures {
  double fwd_ms = 0, bwd_ms = 0;
  int timed = 0;   // repeats timed; 0: the warm-up call's times
  int params = 0;  // parameters read (0: backward computes the value alone)
};
struct result {
  std::string name;
  figures f;
  std::string status;  // "ok", or why there are no figures
};
std::vector<result> results;
volatile float sink = 0;

struct options {
  int reps = 9;
  double limit_s = 3;
  double timeout_s = 60;
  long stack_mib = 0;
  bool large = false;
  bool x_param = false;
  bool fork = true;
  std::vector<std::string> only;
  bool wants(std::string const& name) const {
    return only.empty() || std::find(only.begin(), only.end(), name) != only.end();
  }
};

void print_line(options const& o, result const& r) {
  if (r.status != "ok") {
    std::printf("%-12s %s\n", r.name.c_str(), r.status.c_str());
  } else {
    std::printf("%-12s forward %10.3f ms  backward %10.3f ms  ratio %8.2f  (%d repeats%s%s)\n",
                r.name.c_str(), r.f.fwd_ms, r.f.bwd_ms, r.f.bwd_ms / r.f.fwd_ms, r.f.timed,
                r.f.timed < o.reps ? ", time limit" : "", r.f.params == 0 ? ", no parameter" : "");
  }
  std::fflush(stdout);
}

// One block: loss = sum(square(block)), the parameters it reads.
template <class Loss, class Clear>
void run_block(options const& o, std::string const& name, int params, Loss const& loss,
               Clear&& clear) {
  if (!o.wants(name)) return;
  auto fwd = [&] { sink = sink + float(gx::value(loss)); };
  auto bwd = [&] { sink = sink + float(gx::backward(loss)); };
  // Warm-up: first touch of the gradient storages and the workspace.
  double t0 = now();
  fwd();
  double t1 = now();
  bwd();
  double t2 = now();
  clear();
  double spent = t2 - t1;
  std::vector<double> tf, tb;
  for (int r = 0; r < o.reps && spent <= o.limit_s; ++r) {
    double a = now();
    fwd();
    double b = now();
    bwd();
    double c = now();
    clear();  // as a training step would, outside the timing
    tf.push_back(b - a);
    tb.push_back(c - b);
    spent += c - b;
  }
  result res{name, {}, "ok"};
  res.f.timed = int(tf.size());
  res.f.params = params;
  if (tf.empty()) {
    res.f.fwd_ms = (t1 - t0) * 1e3;
    res.f.bwd_ms = (t2 - t1) * 1e3;
  } else {
    res.f.fwd_ms = median(tf) * 1e3;
    res.f.bwd_ms = median(tb) * 1e3;
  }
  if (!o.fork) print_line(o, res);  // a child's line is printed by the parent
  results.push_back(res);
}

template <class E>
auto loss_of(E const& block) {
  return gx::sum(gx::square(block));
}

using mat = gx::tensor<float, gx::shape<dyn, dyn>>;

// Every block over the input XI: the constant tensor X, or (--x-param) a parameter holding
// the same values, whose gradient every backward call then computes too.
template <class XI, class Wt>
void blocks(options const& o, XI& X, Wt& W, Wt& W1, Wt& W2, Wt& Wq, Wt& Wk, Wt& Wv,
            [[maybe_unused]] Wt& Wo, mat const& mask, float scale) {
  auto causal_head = [&](auto const& x) {
    auto q = gx::matmul(x, Wq);
    auto k = gx::matmul(x, Wk);
    auto v = gx::matmul(x, Wv);
    auto scores = gx::matmul(q, gx::permute<0, 2, 1>(k)) * scale;
    return gx::matmul(gx::softmax<2>(gx::where(mask, scores, -1e9f)), v);
  };
  // The parameters whose gradients are cleared between repeats, outside the timing (X's too
  // when it is one).
  auto block = [&](std::string const& name, auto const& loss, auto&... params) {
    constexpr int count = int(sizeof...(params)) + (gx::parameter_object<XI> ? 1 : 0);
    run_block(o, name, count, loss, [&] {
      if constexpr (sizeof...(params) > 0) gx::zero_grad(params...);
      if constexpr (gx::parameter_object<XI>) gx::zero_grad(X);
    });
  };

  block("matmul", loss_of(gx::matmul(X, W)), W);
  block("mlp_gelu", loss_of(gx::matmul(gx::gelu_tanh(gx::matmul(X, W1)), W2)), W1, W2);
  block("layer_norm", loss_of(gx::layer_norm(X)));
  block("ln_matmul", loss_of(gx::matmul(gx::layer_norm(X), W)), W);
  block("residual", loss_of(X + gx::matmul(gx::layer_norm(X), W)), W);
  block("rms_norm", loss_of(gx::rms_norm(X, 1e-5f)));
  block("softmax", loss_of(gx::softmax<2>(gx::matmul(X, W))), W);
  block("log_softmax", loss_of(gx::log_softmax<2>(gx::matmul(X, W))), W);
  block("attention",
        loss_of(gx::matmul(
            gx::softmax<2>(gx::matmul(gx::matmul(X, W), gx::permute<0, 2, 1>(X))), X)),
        W);
  block("causal_head", loss_of(causal_head(X)), Wq, Wk, Wv);
#if GRADIX_BENCH_BLOCKS_TRANSFORMER
  {
    // every value read more than once is bound by gx::let (docs/ad.md, "Shared values"):
    // the normalized input (read by q, k and v), the residual stream h
    auto out = gx::let(X + gx::matmul(gx::let(gx::layer_norm(X), causal_head), Wo), [&](auto h) {
      return h + gx::matmul(gx::gelu_tanh(gx::matmul(gx::layer_norm(h), W1)), W2);
    });
    block("transformer", loss_of(out), Wq, Wk, Wv, Wo, W1, W2);
  }
#endif
}

void run_all(options const& o) {
  index_t const B = o.large ? 16 : 4, T = o.large ? 64 : 32, D = o.large ? 128 : 64,
                FF = o.large ? 512 : 256;
  auto init = [](index_t rows, index_t cols, std::uint64_t seed) {
    float const sd = 1.f / std::sqrt(float(rows));
    return gx::param(gx::randn<float>(gx::dims(rows, cols), seed, 0.f, sd));
  };
  auto X = gx::randn<float>(gx::dims(B, T, D), 1);
  auto W = init(D, D, 2);
  auto W1 = init(D, FF, 3);
  auto W2 = init(FF, D, 4);
  auto Wq = init(D, D, 5), Wk = init(D, D, 6), Wv = init(D, D, 7), Wo = init(D, D, 8);
  mat mask(gx::dims(T, T));  // causal: position t sees positions 0..t
  for (index_t i = 0; i < T; ++i)
    for (index_t j = 0; j <= i; ++j) mask(i, j) = 1.f;
  float const scale = 1.f / std::sqrt(float(D));
  if (o.x_param) {
    auto Xp = gx::param(X);
    blocks(o, Xp, W, W1, W2, Wq, Wk, Wv, Wo, mask, scale);
  } else {
    blocks(o, X, W, W1, W2, Wq, Wk, Wv, Wo, mask, scale);
  }
}

// run_all on a thread with a stack of o.stack_mib MiB, or on this one.
void run_on_stack(options const& o) {
  if (o.stack_mib <= 0) {
    run_all(o);
    return;
  }
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, std::size_t(o.stack_mib) << 20);
  pthread_t t;
  auto body = [](void* p) -> void* {
    run_all(*static_cast<options const*>(p));
    return nullptr;
  };
  if (pthread_create(&t, &attr, body, const_cast<options*>(&o)) != 0) {
    std::fprintf(stderr, "bench_blocks: cannot start a thread with a %ld MiB stack\n", o.stack_mib);
    std::exit(2);
  }
  pthread_join(t, nullptr);
  pthread_attr_destroy(&attr);
}

// One block in a child process: its figures, or why there are none.
result run_child(options const& o, std::string const& name) {
  result res{name, {}, "ok"};
  int fd[2];
  if (pipe(fd) != 0) {
    res.status = "failed: pipe";
    return res;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    res.status = "failed: fork";
    close(fd[0]);
    close(fd[1]);
    return res;
  }
  if (pid == 0) {
    close(fd[0]);
    options c = o;
    c.only = {name};
    gx::set_num_threads(1);
    run_on_stack(c);
    figures f;
    if (!results.empty()) f = results.front().f;
    bool const sent = write(fd[1], &f, sizeof f) == ssize_t(sizeof f);
    std::fflush(stdout);
    _exit(sent ? 0 : 3);
  }
  close(fd[1]);
  figures f;
  std::size_t got = 0;
  double const deadline = now() + o.timeout_s;
  bool timed_out = false;
  while (got < sizeof f) {
    double const left = deadline - now();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fd[0], POLLIN, 0};
    int const ready = poll(&p, 1, int(std::min(left * 1e3 + 1, 1e9)));
    if (ready < 0) continue;  // EINTR
    if (ready == 0) continue;  // the deadline check above ends the wait
    ssize_t const n = read(fd[0], reinterpret_cast<char*>(&f) + got, sizeof f - got);
    if (n <= 0) break;  // the child ended without sending everything
    got += std::size_t(n);
  }
  close(fd[0]);
  if (timed_out) kill(pid, SIGKILL);
  int st = 0;
  waitpid(pid, &st, 0);
  char why[160];
  if (timed_out) {
    std::snprintf(why, sizeof why, "timeout: killed after %.0f s (--timeout)", o.timeout_s);
    res.status = why;
  } else if (WIFSIGNALED(st)) {
    int const sig = WTERMSIG(st);
    std::snprintf(why, sizeof why, "crashed: signal %d (%s)%s", sig, strsignal(sig),
                  sig == SIGSEGV ? "; a stack overflow? try --stack 64" : "");
    res.status = why;
  } else if (got < sizeof f || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    std::snprintf(why, sizeof why, "failed: exit status %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    res.status = why;
  } else {
    res.f = f;
  }
  return res;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int a = 1; a < argc; ++a) {
    auto arg = [&](char const* key) -> char const* {
      std::size_t k = std::strlen(key);
      if (std::strncmp(argv[a], key, k) == 0 && argv[a][k] == '=') return argv[a] + k + 1;
      if (std::strcmp(argv[a], key) == 0 && a + 1 < argc) return argv[++a];
      return nullptr;
    };
    if (std::strcmp(argv[a], "--large") == 0) o.large = true;
    else if (std::strcmp(argv[a], "--x-param") == 0) o.x_param = true;
    else if (char const* v = arg("--reps")) o.reps = std::atoi(v);
    else if (char const* v2 = arg("--limit")) o.limit_s = std::atof(v2);
    else if (char const* v3 = arg("--only")) o.only.emplace_back(v3);
    else if (char const* v4 = arg("--timeout")) o.timeout_s = std::atof(v4);
    else if (char const* v5 = arg("--stack")) o.stack_mib = std::atol(v5);
    else if (std::strcmp(argv[a], "--no-fork") == 0) o.fork = false;
    else {
      std::fprintf(stderr,
                   "usage: %s [--reps N] [--large] [--x-param] [--limit SECONDS] [--timeout SECONDS] "
                   "[--stack MIB] [--no-fork] [--only BLOCK]...\n",
                   argv[0]);
      return 2;
    }
  }
  if (o.reps < 1) {
    std::fprintf(stderr, "%s: --reps must be at least 1\n", argv[0]);
    return 2;
  }
  for (auto const& name : o.only)
    if (std::find_if(std::begin(block_names), std::end(block_names),
                     [&](char const* b) { return name == b; }) == std::end(block_names)) {
      std::fprintf(stderr, "%s: no block named %s (blocks:", argv[0], name.c_str());
      for (char const* b : block_names) std::fprintf(stderr, " %s", b);
      std::fprintf(stderr, ")\n");
      return 2;
    }
  std::printf("gradix bench/blocks: %s, 1 thread, %s shapes, X %s, sum(square(block)), "
              "backward(loss) / value(loss), medians of up to %d (limit %g s of backward per block)\n",
              gx::simd::isa(), o.large ? "large (B 16, T 64, D 128, FF 512)" : "small (B 4, T 32, D 64, FF 256)",
              o.x_param ? "a parameter" : "constant", o.reps, o.limit_s);
  if (o.fork) {
    // The parent runs no gradix work: each child starts from a process with no pool threads.
    std::vector<result> all;
    for (char const* name : block_names) {
      if (!o.wants(name)) continue;
      all.push_back(run_child(o, name));
      print_line(o, all.back());
    }
    results = all;
  } else {
    gx::set_num_threads(1);
    run_on_stack(o);
  }
  std::printf("{\"bench\": \"blocks\", \"impl\": \"gradix\", \"large\": %s, \"reps\": %d, \"limit_s\": %g, "
              "\"timeout_s\": %g, \"x_param\": %s, \"transformer_compiled\": %s, \"results\": [",
              o.large ? "true" : "false", o.reps, o.limit_s, o.timeout_s, o.x_param ? "true" : "false",
              GRADIX_BENCH_BLOCKS_TRANSFORMER ? "true" : "false");
  for (std::size_t i = 0; i < results.size(); ++i) {
    result const& r = results[i];
    if (r.status == "ok")
      std::printf("%s{\"block\": \"%s\", \"status\": \"ok\", \"forward_ms\": %.4f, \"backward_ms\": %.4f, "
                  "\"ratio\": %.3f, \"timed\": %d, \"params\": %d}",
                  i ? ", " : "", r.name.c_str(), r.f.fwd_ms, r.f.bwd_ms, r.f.bwd_ms / r.f.fwd_ms,
                  r.f.timed, r.f.params);
    else
      std::printf("%s{\"block\": \"%s\", \"status\": \"%s\"}", i ? ", " : "", r.name.c_str(),
                  r.status.c_str());
  }
  std::printf("]}\n");
}
