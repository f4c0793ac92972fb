#pragma once
/// \file
/// gx::dist::communicator (docs/distributed.md): a private copy of an MPI communicator on
/// which gradix's exchanges run, with its options (`communicator_options`: the collectives'
/// deadline) and its counter of what it sent (`traffic`). Its members are the collectives
/// gradix uses: allgather, exchange_counts (per-destination counts, and the flag by which one
/// rank's bad input makes every rank throw), post / test / wait / alltoallv (all-to-all-v,
/// nonblocking or not) and agree (the ranks compare shapes and options).
///
/// **Errors.** Every MPI call runs on the communicator's private copy with MPI_ERRORS_RETURN:
/// a failing call is a gradix::error naming the call, the rank and MPI's message. Collectives
/// are nonblocking and waited for with a deadline (`communicator_options::timeout`): a rank
/// that died or skipped a collective makes the others throw instead of hanging. Bad input on
/// one rank (an index out of range) is flagged in the first exchange, so every rank throws
/// and nothing is changed anywhere; ranks that disagree on a shape throw at construction.
/// After an error the communicator is unusable (its collectives may still be in flight); an
/// exchange abandoned at its deadline stops every MPI call of gradix (detail::abandoned,
/// dist/mpi.hpp).
///
/// **Traffic.** `communicator::traffic()` counts the bytes and messages that the exchanges
/// posted on it sent to other ranks (a rank's copies to itself do not count).
#include "gradix/core/error.hpp"
#include "gradix/dist/mpi.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace gradix::dist {

/// Bytes and messages sent to other ranks by gradix's exchanges (not counting a rank's
/// copies to itself), since the communicator was made or `reset_traffic()`.
struct traffic {
  std::uint64_t bytes_sent = 0;
  std::uint64_t messages_sent = 0;
  std::uint64_t bytes_received = 0;
};

struct communicator_options {
  /// Seconds a collective may wait for the other ranks before it throws (0: forever).
  double timeout = 60;
};

/// A private copy (MPI_Comm_dup) of an MPI communicator with MPI_ERRORS_RETURN: gradix's
/// messages never mix with the program's own, and every failure is a gradix::error.
/// Collective: every rank of `base` constructs it together.
class communicator {
 public:
  explicit communicator(MPI_Comm base = MPI_COMM_WORLD, communicator_options o = {}) : opt_(o) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited)
      gradix::detail::fail("gradix::dist::communicator: MPI is not initialized (make a "
                           "gx::dist::environment, or call MPI_Init, first)");
    if (!(o.timeout >= 0))
      gradix::detail::fail("gradix::dist::communicator: the timeout must be >= 0 seconds, not ", o.timeout);
    check(MPI_Comm_dup(base, &comm_), "MPI_Comm_dup");
    check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  }
  communicator(communicator const&) = delete;
  communicator& operator=(communicator const&) = delete;
  ~communicator() {
    int fin = 0;
    MPI_Finalized(&fin);
    // a communicator left with collectives in flight (after a timeout) is not freed
    if (comm_ != MPI_COMM_NULL && !fin && !broken_ && !detail::abandoned()) MPI_Comm_free(&comm_);
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm get() const { return comm_; }
  communicator_options const& options() const { return opt_; }
  /// False after an MPI error or a timeout: every later call throws.
  bool usable() const { return !broken_; }

  gradix::dist::traffic const& traffic() const { return traffic_; }
  void reset_traffic() { traffic_ = {}; }

  /// Throws a gradix::error naming the call when rc is not MPI_SUCCESS (and marks the
  /// communicator unusable).
  void check(int rc, char const* call) {
    if (rc == MPI_SUCCESS) return;
    broken_ = true;
    gradix::detail::fail("gradix::dist: ", call, " failed on rank ", rank_, " of ", size_, ": ",
                         detail::mpi_message(rc));
  }

  /// Waits for a nonblocking call with the communicator's deadline.
  void wait(MPI_Request& req, char const* call, char const* what) {
    using clock = std::chrono::steady_clock;
    auto const start = clock::now();
    for (long spins = 0;; ++spins) {
      int done = 0;
      if (int const rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE); rc != MPI_SUCCESS) {
        detail::abandoned() = true;  // (the request's state is unknown)
        check(rc, "MPI_Test");
      }
      if (done) return;
      if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(spins > 100000 ? 1000 : 50));
      if (opt_.timeout > 0 && (spins & 63) == 0 &&
          std::chrono::duration<double>(clock::now() - start).count() > opt_.timeout) {
        broken_ = true;
        detail::abandoned() = true;
        char secs[32];
        std::snprintf(secs, sizeof secs, "%g", opt_.timeout);
        gradix::detail::fail(what, ": ", call, " timed out after ", secs, " s on rank ", rank_,
                             " of ", size_, " (another rank died, failed or skipped this exchange)");
      }
    }
  }
  void require_usable(char const* what) const {
    if (detail::abandoned())
      gradix::detail::fail(what, ": an earlier exchange was abandoned after a timeout or a failed MPI_Test; "
                                 "gradix makes no more MPI calls in this process (rank ", rank_, ")");
    if (broken_)
      gradix::detail::fail(what, ": the communicator is unusable after an earlier MPI error or "
                                 "timeout on rank ", rank_);
  }

  // ---- collectives used by gradix (nonblocking, then wait with the deadline) ----

  /// Every rank's `mine`, in rank order.
  template <class T>
  std::vector<T> allgather(std::span<T const> mine, char const* what) {
    require_usable(what);
    std::vector<T> all(mine.size() * std::size_t(size_));
    MPI_Request req;
    int const n = detail::to_int_count(std::int64_t(mine.size()), what, "MPI_Iallgather");
    check(MPI_Iallgather(mine.data(), n, detail::mpi_type<T>(), all.data(), n, detail::mpi_type<T>(), comm_, &req),
          "MPI_Iallgather");
    wait(req, "MPI_Iallgather", what);
    return all;
  }

  /// Exchanges per-destination counts: out[d] goes to rank d, the result's [s] came from
  /// rank s. A rank with `ok == false` sends -1 everywhere, and then every rank throws: the
  /// flagging rank with `message`, the others naming the flagging rank; nothing has moved.
  std::vector<std::int64_t> exchange_counts(std::vector<std::int64_t> out, bool ok, std::string const& message,
                                            char const* what) {
    require_usable(what);
    if (!ok) std::fill(out.begin(), out.end(), std::int64_t(-1));
    std::vector<std::int64_t> in(static_cast<std::size_t>(size_));
    MPI_Request req;
    check(MPI_Ialltoall(out.data(), 1, MPI_INT64_T, in.data(), 1, MPI_INT64_T, comm_, &req), "MPI_Ialltoall");
    wait(req, "MPI_Ialltoall", what);
    if (!ok) throw gradix::error(message);
    for (int s = 0; s < size_; ++s)
      if (in[std::size_t(s)] < 0)
        gradix::detail::fail(what, ": rank ", s, " of ", size_, " found bad input (its own error names it); "
                                   "nothing was sent or changed");
    return in;
  }

  /// A posted all-to-all-v: its counts live here until it completes.
  struct exchange {
    MPI_Request req = MPI_REQUEST_NULL;
    std::vector<int> sc, sd, rc, rd;
  };
  /// Posts an all-to-all-v of `scount[d]` items of `type` (extent `bytes` each) to each rank
  /// d, from consecutive places of `send`, into consecutive places of `recv`; wait() or
  /// test() finishes it. The buffers must stay until then. `rdispl` (optional) places rank
  /// s's items at recv + rdispl[s] instead.
  void post(exchange& x, void const* send, std::vector<std::int64_t> const& scount, void* recv,
            std::vector<std::int64_t> const& rcount, MPI_Datatype type, std::size_t bytes, char const* what,
            std::vector<std::int64_t> const* rdispl = nullptr, bool skip_self = false) {
    require_usable(what);
    auto const n = static_cast<std::size_t>(size_);
    x.sc.assign(n, 0);
    x.sd.assign(n, 0);
    x.rc.assign(n, 0);
    x.rd.assign(n, 0);
    std::int64_t so = 0, ro = 0;
    for (int r = 0; r < size_; ++r) {
      auto const i = std::size_t(r);
      x.sc[i] = detail::to_int_count(scount[i], what, "MPI_Ialltoallv");
      x.rc[i] = detail::to_int_count(rcount[i], what, "MPI_Ialltoallv");
      x.sd[i] = detail::to_int_count(so, what, "MPI_Ialltoallv");
      x.rd[i] = detail::to_int_count(rdispl ? (*rdispl)[i] : ro, what, "MPI_Ialltoallv");
      so += scount[i];
      ro += rcount[i];
      if (r != rank_) {
        traffic_.bytes_sent += std::uint64_t(scount[i]) * bytes;
        traffic_.bytes_received += std::uint64_t(rcount[i]) * bytes;
        traffic_.messages_sent += scount[i] > 0 ? 1 : 0;
      }
    }
    if (skip_self) x.sc[std::size_t(rank_)] = x.rc[std::size_t(rank_)] = 0;  // (the caller moves its own share)
    check(MPI_Ialltoallv(send, x.sc.data(), x.sd.data(), type, recv, x.rc.data(), x.rd.data(), type, comm_, &x.req),
          "MPI_Ialltoallv");
  }
  /// Lets posted exchanges progress (MPI moves nonblocking collectives inside its calls).
  void test(exchange& x) {
    if (x.req == MPI_REQUEST_NULL || broken_ || detail::abandoned()) return;
    int done = 0;
    check(MPI_Test(&x.req, &done, MPI_STATUS_IGNORE), "MPI_Test");
  }
  void wait(exchange& x, char const* what) {
    if (x.req != MPI_REQUEST_NULL) wait(x.req, "MPI_Ialltoallv", what);
  }
  /// A blocking all-to-all-v (post, then wait with the deadline). With skip_self the buffers
  /// keep a place for this rank's own share, which MPI leaves alone (the caller moves it).
  void alltoallv(void const* send, std::vector<std::int64_t> const& scount, void* recv,
                 std::vector<std::int64_t> const& rcount, MPI_Datatype type, std::size_t bytes, char const* what,
                 bool skip_self = false) {
    exchange x;
    post(x, send, scount, recv, rcount, type, bytes, what, nullptr, skip_self);
    wait(x, what);
  }

  /// Checks that every rank passed the same `values` (shapes, options): otherwise every rank
  /// throws, naming the first rank that differs from rank 0 and both values.
  void agree(std::vector<std::int64_t> const& values, std::vector<char const*> const& names, char const* what) {
    // the number of values first: an all-gather needs the same length on every rank
    std::int64_t const n0 = std::int64_t(values.size());
    auto const lengths = allgather(std::span<std::int64_t const>(&n0, 1), what);
    for (int r = 1; r < size_; ++r)
      if (lengths[std::size_t(r)] != lengths[0])
        gradix::detail::fail(what, ": the ranks disagree on the number of values to compare (parameters?): rank 0 has ",
                             lengths[0], ", rank ", r, " has ", lengths[std::size_t(r)]);
    auto const all = allgather(std::span<std::int64_t const>(values), what);
    std::size_t const n = values.size();
    for (int r = 1; r < size_; ++r)
      for (std::size_t k = 0; k < n; ++k)
        if (all[std::size_t(r) * n + k] != all[k])
          gradix::detail::fail(what, ": the ranks disagree on ", names[k], ": rank 0 has ", all[k], ", rank ", r,
                               " has ", all[std::size_t(r) * n + k]);
  }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  communicator_options opt_;
  int rank_ = 0, size_ = 1;
  bool broken_ = false;
  gradix::dist::traffic traffic_;
};

}  // namespace gradix::dist
