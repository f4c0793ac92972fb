#pragma once
/// \file
/// Training across processes on MPI (docs/distributed.md): row-sharded embedding tables,
/// data parallelism for dense parameters, and results with the same bits at any rank count.
///
///     gx::dist::environment env(argc, argv);             // MPI_Init_thread / MPI_Finalize
///     gx::dist::communicator world;                      // a private copy of MPI_COMM_WORLD
///     gx::dist::block_split split(world, 4096, 256);     // the global batch in blocks of 256
///     gx::dist::sharded_table<float> E(world, rows, dim, gx::dist::placement::block, init);
///     gx::optim::lazy_adam opt({.lr = 1e-2}, E.local()); // steps the rows this rank owns
///     gx::dist::data_parallel dp(world, split, W);       // dense parameters, replicated
///
///     auto look = E.fetch(ids, offsets, split);          // one all-to-all-v: ids, then rows
///     for (index_t j = split.first_block(); j < split.end_block(); ++j) {
///       auto l = gx::backward(loss(gx::gather<0>(look.rows(), look.block(j)), W) / n);
///       losses.push_back(l);
///       dp.keep(j);                                      // block j's dense gradients
///     }
///     E.push(look);      // each touched row's gradient to its owner, summed in block order
///     dp.reduce();       // dense gradients summed in block order, on every rank
///     opt.step(); ...
///
/// **Same bits at any rank count.** The global batch is cut into blocks of a fixed number of
/// samples (block_split), each rank takes a contiguous run of blocks, and every sum over the
/// batch is a sum over blocks in global block order of per-block partial sums, whatever the
/// number of ranks: a table row's gradient is the sum of its per-block gradients (each block
/// has its own rows in the lookup, so backward sums a block's duplicates on its own), a dense
/// gradient likewise (`keep` after each block's backward), and the loss with `ordered_sum`.
/// So losses, gradients and parameters come out bit-identical for 1, 2, 3 or 4 ranks, and
/// equal to one process that accumulates the blocks' gradients in order. The option
/// `data_parallel_options::exact = false` trades that for one MPI_Allreduce.
///
/// **Traffic.** `fetch` sends each distinct id of the rank's blocks to its owner (8 bytes)
/// and gets its row back; `push` sends one row per (block, touched row) to its owner, with
/// its (id, block) key (16 bytes). Nothing is proportional to the table's size: a rank holds
/// only the rows it owns. `communicator::traffic()` counts bytes and messages sent to other
/// ranks.
///
/// **Errors.** Every MPI call runs on the communicator's private copy with MPI_ERRORS_RETURN:
/// a failing call is a gradix::error naming the call, the rank and MPI's message. Collectives
/// are nonblocking and waited for with a deadline (`communicator_options::timeout`): a rank
/// that died or skipped a collective makes the others throw instead of hanging. Bad input on
/// one rank (an index out of range) is flagged in the first exchange, so every rank throws
/// and nothing is changed anywhere; ranks that disagree on a shape throw at construction.
/// After an error the communicator is unusable (its collectives may still be in flight).
#include "gradix/api/param.hpp"
#include "gradix/config.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/shape.hpp"
#include "gradix/core/tensor.hpp"
#include "gradix/grad/storage.hpp"

// (C only: Open MPI's deprecated C++ bindings do not compile warning-free)
#if !defined(OMPI_SKIP_MPICXX)
#define OMPI_SKIP_MPICXX 1
#endif
#if !defined(MPICH_SKIP_MPICXX)
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace gradix::dist {

namespace detail {
template <class T>
MPI_Datatype mpi_type() {
  if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, std::int64_t>) return MPI_INT64_T;
  else if constexpr (std::is_same_v<T, std::uint64_t>) return MPI_UINT64_T;
  else if constexpr (std::is_same_v<T, int>) return MPI_INT;
  else static_assert(sizeof(T) == 0, "gradix::dist: element types are float, double and 64-bit integers");
}
inline std::string mpi_message(int rc) {
  char buf[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(rc, buf, &n) != MPI_SUCCESS) return "error code " + std::to_string(rc);
  return std::string(buf, std::size_t(n));
}
/// Set when gradix abandoned an exchange (its deadline passed, or MPI_Test failed): MPI
/// could still complete it later, inside any MPI call, writing into buffers that are gone.
/// From then on gradix makes no MPI call in this process (every gradix::dist call throws,
/// destructors free no MPI objects, environment skips MPI_Finalize), and neither should
/// the program: it should report the error and exit.
inline bool& abandoned() {
  static bool a = false;
  return a;
}

/// An open-addressing map from 64-bit ids to values, cleared in O(1) between uses
/// (generation stamps) and grown only when a use needs more room: the bookkeeping of fetch,
/// which meets every id of a rank's blocks.
template <class V>
class id_map {
 public:
  /// Empties the map, with room for `n` keys at load factor 1/2 or less.
  void reset(std::size_t n) {
    std::size_t cap = 16;
    int bits = 4;
    while (cap < 2 * n) cap *= 2, ++bits;
    if (cap > keys_.size()) {
      keys_.assign(cap, 0);
      vals_.assign(cap, V{});
      stamp_.assign(cap, 0);
      gen_ = 0;
      shift_ = 64 - bits;
    }
    if (++gen_ == 0) {  // (after 2^32 uses: clear the stamps once)
      std::fill(stamp_.begin(), stamp_.end(), 0u);
      gen_ = 1;
    }
  }
  /// The value of `key`, inserting `v` when absent; .second says whether it was inserted.
  std::pair<V*, bool> try_emplace(std::int64_t key, V v) {
    std::size_t const mask = keys_.size() - 1;
    std::size_t h = std::size_t((std::uint64_t(key) * 0x9E3779B97F4A7C15ull) >> shift_);
    for (;; h = (h + 1) & mask) {
      if (stamp_[h] != gen_) {
        stamp_[h] = gen_;
        keys_[h] = key;
        vals_[h] = v;
        return {&vals_[h], true};
      }
      if (keys_[h] == key) return {&vals_[h], false};
    }
  }
  V* find(std::int64_t key) {
    std::size_t const mask = keys_.size() - 1;
    for (std::size_t h = std::size_t((std::uint64_t(key) * 0x9E3779B97F4A7C15ull) >> shift_);; h = (h + 1) & mask) {
      if (stamp_[h] != gen_) return nullptr;
      if (keys_[h] == key) return &vals_[h];
    }
  }

 private:
  std::vector<std::int64_t> keys_;
  std::vector<V> vals_;
  std::vector<std::uint32_t> stamp_;
  std::uint32_t gen_ = 0;
  int shift_ = 60;
};

inline int to_int_count(std::int64_t n, char const* what, char const* call) {
  if (n > INT_MAX)
    gradix::detail::fail(what, ": ", n, " elements in one message of ", call,
                         " (MPI counts are int; at most ", INT_MAX, ")");
  return int(n);
}
}  // namespace detail

/// MPI_Init_thread (MPI_THREAD_FUNNELED: gradix's threads never call MPI) and MPI_Finalize.
/// Does nothing when MPI is already initialized.
class environment {
 public:
  environment(int& argc, char**& argv) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (inited) return;
    int provided = 0;
    if (int rc = MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided); rc != MPI_SUCCESS)
      gradix::detail::fail("gradix::dist::environment: MPI_Init_thread failed: ", detail::mpi_message(rc));
    owner_ = true;
  }
  environment(environment const&) = delete;
  environment& operator=(environment const&) = delete;
  ~environment() {
    int fin = 0;
    MPI_Finalized(&fin);
    // (after an abandoned exchange MPI_Finalize could complete it into freed memory, or
    // wait for a dead rank: the process ends without it, and mpirun reports that)
    if (owner_ && !fin && !detail::abandoned()) MPI_Finalize();
  }

 private:
  bool owner_ = false;
};

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

/// The global batch cut into blocks of `block_samples` samples (the last may be shorter),
/// and the contiguous run of blocks this rank takes: blocks [B r / R, B (r+1) / R) for B
/// blocks and R ranks. Block boundaries depend only on the batch and block sizes, never on
/// the rank count: that is what makes results the same at any rank count. Collective (the
/// ranks must agree on both sizes).
class block_split {
 public:
  block_split(communicator& c, index_t global_samples, index_t block_samples)
      : n_(global_samples), g_(block_samples) {
    char const* what = "gradix::dist::block_split";
    // (agreed first, so that a bad size is the same error on every rank, not a timeout)
    c.agree({global_samples, block_samples}, {"the global batch size", "the block size"}, what);
    if (global_samples < 0) gradix::detail::fail(what, ": the batch has ", global_samples, " samples (must be >= 0)");
    if (block_samples <= 0) gradix::detail::fail(what, ": the block size is ", block_samples, " samples (must be > 0)");
    blocks_ = (n_ + g_ - 1) / g_;
    first_ = blocks_ * c.rank() / c.size();
    end_ = blocks_ * (c.rank() + 1) / c.size();
  }
  index_t samples() const { return n_; }
  index_t block_samples() const { return g_; }
  /// Number of blocks in the global batch.
  index_t blocks() const { return blocks_; }
  /// This rank's blocks: [first_block(), end_block()).
  index_t first_block() const { return first_; }
  index_t end_block() const { return end_; }
  index_t local_blocks() const { return end_ - first_; }
  /// Global sample range of block j: [block_begin(j), block_end(j)).
  index_t block_begin(index_t j) const { return std::min(n_, j * g_); }
  index_t block_end(index_t j) const { return std::min(n_, (j + 1) * g_); }
  /// This rank's samples: [first_sample(), end_sample()).
  index_t first_sample() const { return block_begin(first_); }
  index_t end_sample() const { return block_begin(end_); }

 private:
  index_t n_, g_, blocks_ = 0, first_ = 0, end_ = 0;
};

namespace detail {
/// keep(j)'s checks (data_parallel and nccl_data_parallel): j must be the next of this rank's
/// blocks; returns its local index.
inline index_t next_block(char const* what, block_split const& split, index_t kept, index_t j) {
  if (j < split.first_block() || j >= split.end_block())
    gradix::detail::fail(what, ": block ", j, " is not one of this rank's blocks [", split.first_block(), ", ",
                         split.end_block(), ")");
  index_t const b = j - split.first_block();
  if (b < kept) gradix::detail::fail(what, ": block ", j, " was already kept");
  if (b > kept)
    gradix::detail::fail(what, ": blocks are kept in order: block ", split.first_block() + kept, " comes before block ", j);
  return b;
}
/// reduce()'s check: "" when every block of this rank was kept, else the error to flag.
inline std::string missing_block(char const* what, block_split const& split, index_t kept, int rank) {
  if (kept >= split.local_blocks()) return {};
  return std::string(what) + ": block " + std::to_string(split.first_block() + kept) + " was not kept on rank " +
         std::to_string(rank);
}
}  // namespace detail

/// The sum of per-block values (this rank's blocks, in order) over the whole batch, added in
/// global block order: the same bits at any rank count. Collective.
inline double ordered_sum(communicator& c, block_split const& split, std::span<double const> mine) {
  char const* what = "gradix::dist::ordered_sum";
  bool const ok = index_t(mine.size()) == split.local_blocks();
  // the per-block values travel in one all-gather of fixed width (the most blocks a rank has)
  index_t const width = (split.blocks() + c.size() - 1) / c.size();
  std::vector<double> padded(std::size_t(width) + 1, 0.0);
  padded[0] = ok ? 1.0 : -1.0;
  if (ok) std::copy(mine.begin(), mine.end(), padded.begin() + 1);
  auto const all = c.allgather(std::span<double const>(padded), what);
  if (!ok)
    gradix::detail::fail(what, ": ", mine.size(), " values for this rank's ", split.local_blocks(),
                         " blocks (rank ", c.rank(), ")");
  double s = 0;
  for (int r = 0; r < c.size(); ++r) {
    std::size_t const base = std::size_t(r) * (std::size_t(width) + 1);
    if (all[base] < 0)
      gradix::detail::fail(what, ": rank ", r, " passed the wrong number of values (its own error says how many)");
    index_t const nb = split.blocks() * (r + 1) / c.size() - split.blocks() * r / c.size();
    for (index_t k = 0; k < nb; ++k) s += all[base + 1 + std::size_t(k)];
  }
  return s;
}

/// How a sharded table's rows are placed on the ranks: `block` gives rank r the rows
/// [N r / R, N (r+1) / R), `modulo` the rows with id % R == r.
enum class placement { block, modulo };

template <class T>
class sharded_table;

/// The rows a rank's blocks read from a sharded table (sharded_table::fetch): a parameter
/// with one row per (block, distinct id in the block), and per block the index vector that
/// maps its ids to those rows. Use it in expressions as `gather<0>(look.rows(), look.block(j))`;
/// backward writes the rows' gradients, which `sharded_table::push` sends to the owners.
template <class T>
class lookup {
 public:
  using rows_type = parameter<T, shape<dyn, dyn>, row_major, dense_grad_t<0>>;
  rows_type& rows() { return rows_; }
  rows_type const& rows() const { return rows_; }
  /// Indices into rows() of block j's ids (global block index), in the order they were given.
  std::span<std::int32_t const> block(index_t j) const {
    if (j < first_block_ || j >= first_block_ + index_t(offsets_.size()) - 1)
      gradix::detail::fail("gradix::dist::lookup::block: block ", j, " is not one of this rank's blocks [",
                           first_block_, ", ", first_block_ + index_t(offsets_.size()) - 1, ")");
    auto const k = std::size_t(j - first_block_);
    return std::span<std::int32_t const>(index_).subspan(std::size_t(offsets_[k]),
                                                         std::size_t(offsets_[k + 1] - offsets_[k]));
  }
  /// Indices into rows() of all the ids given to fetch, in order.
  std::span<std::int32_t const> all() const { return index_; }
  /// Number of (block, id) rows.
  index_t size() const { return index_t(pair_id_.size()); }

 private:
  friend class sharded_table<T>;
  explicit lookup(index_t n, index_t dim) : rows_(tensor<T, shape<dyn, dyn>>(dims(n, dim))) {}
  rows_type rows_;
  std::vector<std::int32_t> index_;
  std::vector<index_t> offsets_;
  index_t first_block_ = 0;
  std::vector<std::int64_t> pair_id_, pair_block_;  // per row of rows_
  const void* table_ = nullptr;
  bool pushed_ = false;
};

struct push_options {
  /// true: every (block, row) gradient travels to the owner, which adds them in global block
  /// order (the same bits at any rank count). false: each rank first adds its own blocks'
  /// rows of an id, and the owner adds the ranks' sums in rank order: one row per (rank, id)
  /// instead of per (block, id), and bits that depend on the rank count.
  bool exact = true;
};

/// A table of `rows` x `dim` elements whose rows are spread over the ranks (placement). Each
/// rank holds only the rows it owns, as a parameter with sparse gradients along the rows
/// (`local()`), which an optimizer steps: lazy Adam, SGD, Adagrad all update only the rows
/// that `push` gave a gradient. Collective: every rank constructs it with the same shape.
template <class T>
class sharded_table {
 public:
  using local_type = parameter<T, shape<dyn, dyn>, row_major, sparse_grad_t<0>>;
  /// `init(id, row)` fills the row with global id `id` (a std::span<T> of dim elements);
  /// without it the rows are zero.
  sharded_table(communicator& c, index_t rows, index_t dim, placement p = placement::block,
                std::function<void(index_t, std::span<T>)> const& init = {})
      : c_(&c), n_(rows), d_(dim), p_(p), agreed_(agree_shape(c, rows, dim, p)), local_(make_local(c, rows, dim, p)) {
    if (init) {
      auto& v = local_.value();
      for (index_t k = 0; k < owned(); ++k) init(global_row(k), std::span<T>(v.data() + k * d_, std::size_t(d_)));
    }
    if (int rc = MPI_Type_contiguous(int(d_), detail::mpi_type<T>(), &row_type_); rc != MPI_SUCCESS)
      c.check(rc, "MPI_Type_contiguous");
    c.check(MPI_Type_commit(&row_type_), "MPI_Type_commit");
  }
  sharded_table(sharded_table const&) = delete;
  sharded_table& operator=(sharded_table const&) = delete;
  ~sharded_table() {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && row_type_ != MPI_DATATYPE_NULL && !detail::abandoned()) MPI_Type_free(&row_type_);
  }

  index_t rows() const { return n_; }
  index_t dim() const { return d_; }
  gradix::dist::placement placement() const { return p_; }
  communicator& comm() const { return *c_; }
  /// The rows this rank owns, local row k holding global row global_row(k).
  local_type& local() { return local_; }
  local_type const& local() const { return local_; }
  index_t owned() const { return owned_by(c_->rank()); }
  index_t owned_by(int r) const {
    index_t const R = c_->size();
    return p_ == placement::block ? n_ * (r + 1) / R - n_ * r / R : (n_ - r + R - 1) / R;
  }
  /// The rank that owns global row id, and its local row there.
  int owner(index_t id) const {
    index_t const R = c_->size();
    return p_ == placement::block ? int(((id + 1) * R - 1) / n_) : int(id % R);
  }
  index_t local_row(index_t id) const {
    index_t const R = c_->size();
    return p_ == placement::block ? id - n_ * owner(id) / R : id / R;
  }
  index_t global_row(index_t k) const {
    index_t const R = c_->size(), r = c_->rank();
    return p_ == placement::block ? n_ * r / R + k : k * R + r;
  }

  /// Reads the rows that this rank's blocks use. `ids` holds every id of blocks
  /// split.first_block() .. end_block()-1 one after the other, block j's in
  /// [offsets[j - first], offsets[j - first + 1]). Sends each distinct id to its owner and
  /// receives its row (one all-to-all of counts, one all-to-all-v of ids, one of rows).
  /// Collective. An id out of range on any rank makes every rank throw; nothing is sent.
  template <class I>
  lookup<T> fetch(std::span<I const> ids, std::span<index_t const> offsets, block_split const& split) {
    static_assert(std::is_integral_v<I>, "gradix::dist::sharded_table::fetch: ids must be integers");
    char const* what = "gradix::dist::sharded_table::fetch";
    int const R = c_->size();
    std::string bad;
    index_t const nb = split.local_blocks();
    if (index_t(offsets.size()) != nb + 1 || offsets[0] != 0 || offsets[offsets.size() - 1] != index_t(ids.size())) {
      bad = std::string(what) + ": offsets must have one entry per block of this rank plus one (" +
            std::to_string(nb + 1) + "), start at 0 and end at the number of ids (" + std::to_string(ids.size()) +
            "); rank " + std::to_string(c_->rank()) + " has " + std::to_string(offsets.size()) + " entries";
    } else {
      for (std::size_t k = 0; k + 1 < offsets.size() && bad.empty(); ++k)
        if (offsets[k + 1] < offsets[k])
          bad = std::string(what) + ": offsets decrease at block " + std::to_string(split.first_block() + index_t(k));
      for (std::size_t i = 0; i < ids.size() && bad.empty(); ++i)
        if (std::int64_t(ids[i]) < 0 || std::int64_t(ids[i]) >= n_)
          bad = std::string(what) + ": index " + std::to_string(std::int64_t(ids[i])) + " at position " +
                std::to_string(i) + " is out of range for axis 0 of extent " + std::to_string(n_) + " (rank " +
                std::to_string(c_->rank()) + ")";
    }
    if (bad.empty() && ids.size() > std::size_t(INT32_MAX))
      bad = std::string(what) + ": " + std::to_string(ids.size()) + " ids on rank " + std::to_string(c_->rank()) +
            " (at most 2^31 - 1 per fetch)";
    // the (block, distinct id) pairs: the lookup's rows, in block order, first use first
    std::vector<std::int64_t> pair_id, pair_block;
    std::vector<std::int32_t> index(ids.size());
    if (bad.empty()) {
      for (index_t b = 0; b < nb; ++b) {
        in_block_.reset(std::size_t(offsets[std::size_t(b) + 1] - offsets[std::size_t(b)]));
        for (index_t i = offsets[std::size_t(b)]; i < offsets[std::size_t(b) + 1]; ++i) {
          std::int64_t const id = std::int64_t(ids[std::size_t(i)]);
          auto [at, added] = in_block_.try_emplace(id, std::int32_t(pair_id.size()));
          if (added) {
            pair_id.push_back(id);
            pair_block.push_back(split.first_block() + b);
          }
          index[std::size_t(i)] = *at;
        }
      }
    }
    // the distinct ids, grouped by owner (first use first within an owner)
    auto& slot_of = distinct_;  // id -> position in `want`
    slot_of.reset(pair_id.size());
    std::vector<std::int64_t> scount(static_cast<std::size_t>(R), 0);
    std::vector<std::int64_t> distinct;
    if (bad.empty())
      for (std::int64_t id : pair_id)
        if (slot_of.try_emplace(id, 0).second) {
          distinct.push_back(id);
          ++scount[std::size_t(owner(id))];
        }
    auto const rcount = c_->exchange_counts(scount, bad.empty(), bad, what);
    std::vector<std::int64_t> sdisp(std::size_t(R) + 1, 0), rdisp(std::size_t(R) + 1, 0);
    for (int r = 0; r < R; ++r) {
      sdisp[std::size_t(r) + 1] = sdisp[std::size_t(r)] + scount[std::size_t(r)];
      rdisp[std::size_t(r) + 1] = rdisp[std::size_t(r)] + rcount[std::size_t(r)];
    }
    std::int64_t* const want = room(s_.want, distinct.size());
    {
      auto fill = sdisp;
      for (std::int64_t id : distinct) {
        std::int64_t const at = fill[std::size_t(owner(id))]++;
        want[std::size_t(at)] = id;
        *slot_of.find(id) = at;
      }
    }
    std::size_t const nasked = static_cast<std::size_t>(rdisp[std::size_t(R)]);
    std::int64_t* const asked = room(s_.asked, nasked);
    // (this rank's own rows do not go through MPI: they are copied straight into the lookup)
    c_->alltoallv(want, scount, asked, rcount, MPI_INT64_T, sizeof(std::int64_t), what, true);
    // the owner copies the asked rows out (into buffers kept between calls: no zero-filling)
    int const me = c_->rank();
    T* const out = room(s_.out, nasked * std::size_t(d_));
    T* const got = room(s_.got, distinct.size() * std::size_t(d_));
    T const* v = local_.value().data();
    for (int r = 0; r < R; ++r) {
      if (r == me) continue;  // (the place of this rank's own share stays unused)
      for (std::size_t k = std::size_t(rdisp[std::size_t(r)]); k < std::size_t(rdisp[std::size_t(r) + 1]); ++k) {
        std::int64_t const id = asked[k];
        if (id < 0 || id >= n_ || owner(id) != me)
          gradix::detail::fail(what, ": rank ", me, " was asked for row ", id, " which it does not own");
        std::memcpy(out + k * std::size_t(d_), v + local_row(id) * d_, std::size_t(d_) * sizeof(T));
      }
    }
    c_->alltoallv(out, rcount, got, scount, row_type_, std::size_t(d_) * sizeof(T), what, true);
    // the lookup: rows per (block, id), this rank's own from its values
    lookup<T> L(index_t(pair_id.size()), d_);
    T* dst = L.rows_.value().data();
    for (std::size_t k = 0; k < pair_id.size(); ++k) {
      std::int64_t const id = pair_id[k];
      T const* src = owner(id) == me ? v + local_row(id) * d_ : got + std::size_t(*slot_of.find(id)) * std::size_t(d_);
      std::memcpy(dst + k * std::size_t(d_), src, std::size_t(d_) * sizeof(T));
    }
    L.index_ = std::move(index);
    L.offsets_.assign(offsets.begin(), offsets.end());
    L.first_block_ = split.first_block();
    L.pair_id_ = std::move(pair_id);
    L.pair_block_ = std::move(pair_block);
    L.table_ = this;
    return L;
  }
  template <class I>
  lookup<T> fetch(std::vector<I> const& ids, std::vector<index_t> const& offsets, block_split const& split) {
    return fetch(std::span<I const>(ids), std::span<index_t const>(offsets), split);
  }

  /// The rows of `ids` (any ids, repeats allowed) as an ids.size() x dim tensor, for reading
  /// outside training (evaluation, nearest neighbours): no gradient. Collective; each rank
  /// passes its own ids (an id out of range on any rank makes every rank throw).
  template <class I>
  tensor<T, shape<dyn, dyn>> read_rows(std::span<I const> ids) {
    char const* what = "gradix::dist::sharded_table::read_rows";
    int const R = c_->size();
    std::string bad;
    for (std::size_t i = 0; i < ids.size() && bad.empty(); ++i)
      if (std::int64_t(ids[i]) < 0 || std::int64_t(ids[i]) >= n_)
        bad = std::string(what) + ": index " + std::to_string(std::int64_t(ids[i])) + " at position " +
              std::to_string(i) + " is out of range for axis 0 of extent " + std::to_string(n_) + " (rank " +
              std::to_string(c_->rank()) + ")";
    std::vector<std::int64_t> scount(static_cast<std::size_t>(R), 0);
    if (bad.empty())
      for (auto id : ids) ++scount[std::size_t(owner(index_t(id)))];
    auto const rcount = c_->exchange_counts(scount, bad.empty(), bad, what);
    std::vector<std::int64_t> fill(static_cast<std::size_t>(R), 0);
    for (int r = 1; r < R; ++r) fill[std::size_t(r)] = fill[std::size_t(r) - 1] + scount[std::size_t(r) - 1];
    std::vector<std::int64_t> want(ids.size());
    std::vector<std::size_t> where(ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) {
      auto const at = std::size_t(fill[std::size_t(owner(index_t(ids[i])))]++);
      want[at] = std::int64_t(ids[i]);
      where[i] = at;
    }
    std::vector<std::int64_t> asked(static_cast<std::size_t>(std::accumulate(rcount.begin(), rcount.end(), std::int64_t(0))));
    c_->alltoallv(want.data(), scount, asked.data(), rcount, MPI_INT64_T, sizeof(std::int64_t), what);
    std::vector<T> out(asked.size() * std::size_t(d_)), got(want.size() * std::size_t(d_));
    T const* v = local_.value().data();
    for (std::size_t k = 0; k < asked.size(); ++k)
      std::memcpy(out.data() + k * std::size_t(d_), v + local_row(asked[k]) * d_, std::size_t(d_) * sizeof(T));
    c_->alltoallv(out.data(), rcount, got.data(), scount, row_type_, std::size_t(d_) * sizeof(T), what);
    tensor<T, shape<dyn, dyn>> r(dims(index_t(ids.size()), d_));
    for (std::size_t i = 0; i < ids.size(); ++i)
      std::memcpy(r.data() + i * std::size_t(d_), got.data() + where[i] * std::size_t(d_), std::size_t(d_) * sizeof(T));
    return r;
  }
  template <class I>
  tensor<T, shape<dyn, dyn>> read_rows(std::vector<I> const& ids) {
    return read_rows(std::span<I const>(ids));
  }

  /// Sends the gradient of every touched (block, id) row of the lookup to the row's owner,
  /// which adds each row's gradients into local().grad() in global block order: the same bits at any
  /// rank count (push_options::exact = false trades that for less traffic). Collective;
  /// call once per lookup, after its backward passes.
  void push(lookup<T>& L, push_options o = {}) {
    char const* what = "gradix::dist::sharded_table::push";
    int const R = c_->size();
    std::string bad;
    if (L.table_ != this) bad = std::string(what) + ": the lookup was fetched from another table";
    else if (L.pushed_) bad = std::string(what) + ": the lookup was already pushed";
    else if (L.rows_.grad().busy_flag() || local_.grad().busy_flag())
      bad = std::string(what) + ": a backward pass is running on the lookup or the table";
    auto const& g = L.rows_.grad();
    T const* gd = g.dense().data();
    // the entries to send: one per touched (block, id) row; with exact = false one per id,
    // its blocks' rows summed here first, in block order
    std::vector<std::int64_t> eid, eblock;
    std::vector<T> merged_rows;              // (exact = false: the ranks' sums)
    std::vector<std::size_t> esrc;           // each entry's row: a lookup row, or a merged one
    if (bad.empty()) {
      detail::id_map<std::int64_t>& merged = distinct_;
      if (!o.exact) merged.reset(L.pair_id_.size());
      for (std::size_t k = 0; k < L.pair_id_.size(); ++k) {
        if (!g.is_touched(index_t(k))) continue;
        T const* row = gd + k * std::size_t(d_);
        if (!o.exact) {
          auto [at, added] = merged.try_emplace(L.pair_id_[k], std::int64_t(eid.size()));
          if (!added) {
            T* dst = merged_rows.data() + std::size_t(*at) * std::size_t(d_);
            for (index_t x = 0; x < d_; ++x) dst[x] += row[x];
            continue;
          }
          esrc.push_back(eid.size());
          merged_rows.insert(merged_rows.end(), row, row + d_);
        } else {
          esrc.push_back(k);
        }
        eid.push_back(L.pair_id_[k]);
        eblock.push_back(L.pair_block_[k]);
      }
    }
    T const* rows_of = o.exact ? gd : merged_rows.data();
    std::vector<std::int64_t> scount(static_cast<std::size_t>(R), 0);
    std::vector<std::size_t> send_rows(eid.size());  // entries grouped by owner, in order inside
    {
      for (auto id : eid) ++scount[std::size_t(owner(id))];
      std::vector<std::int64_t> fill(static_cast<std::size_t>(R), 0);
      for (int r = 1; r < R; ++r) fill[std::size_t(r)] = fill[std::size_t(r) - 1] + scount[std::size_t(r) - 1];
      for (std::size_t e = 0; e < eid.size(); ++e) send_rows[std::size_t(fill[std::size_t(owner(eid[e]))]++)] = e;
    }
    auto const rcount = c_->exchange_counts(scount, bad.empty(), bad, what);
    std::int64_t const nrecv = std::accumulate(rcount.begin(), rcount.end(), std::int64_t(0));
    std::int64_t* const keys = room(s_.want, send_rows.size() * 2);
    std::int64_t* const rkeys = room(s_.asked, std::size_t(nrecv) * 2);
    T* const vals = room(s_.out, send_rows.size() * std::size_t(d_));
    T* const rvals = room(s_.got, std::size_t(nrecv) * std::size_t(d_));
    int const me = c_->rank();
    std::vector<std::int64_t> sdisp(static_cast<std::size_t>(R) + 1, 0), rdisp(static_cast<std::size_t>(R) + 1, 0);
    for (int r = 0; r < R; ++r) {
      sdisp[std::size_t(r) + 1] = sdisp[std::size_t(r)] + scount[std::size_t(r)];
      rdisp[std::size_t(r) + 1] = rdisp[std::size_t(r)] + rcount[std::size_t(r)];
    }
    for (std::size_t k = 0; k < send_rows.size(); ++k) {
      if (std::int64_t(k) >= sdisp[std::size_t(me)] && std::int64_t(k) < sdisp[std::size_t(me) + 1]) continue;  // (own rows: added below, without MPI)
      std::size_t const e = send_rows[k];
      keys[2 * k] = eid[e];
      keys[2 * k + 1] = eblock[e];
      std::memcpy(vals + k * std::size_t(d_), rows_of + esrc[e] * std::size_t(d_), std::size_t(d_) * sizeof(T));
    }
    auto twice = [](std::vector<std::int64_t> v) {
      for (auto& x : v) x *= 2;
      return v;
    };
    c_->alltoallv(keys, twice(scount), rkeys, twice(rcount), MPI_INT64_T, sizeof(std::int64_t), what, true);
    c_->alltoallv(vals, scount, rvals, rcount, row_type_, std::size_t(d_) * sizeof(T), what, true);
    L.pushed_ = true;
    // The owner's sum. What arrives is in global block order: by source rank (ranks hold
    // ascending runs of blocks), and from each rank in its blocks' order (the entries keep
    // the lookup's order, which is block by block). So adding the entries as they come, this
    // rank's own in their rank's place, adds each row's blocks in order, with no sort.
    // Checked first, before anything is added.
    {
      std::int64_t last_block = -1;
      for (int r = 0; r < R; ++r) {
        if (r == me) {
          if (scount[std::size_t(me)] > 0) last_block = eblock[send_rows[std::size_t(sdisp[std::size_t(me) + 1] - 1)]];
          continue;
        }
        for (std::int64_t at = rdisp[std::size_t(r)]; at < rdisp[std::size_t(r) + 1]; ++at) {
          std::int64_t const id = rkeys[std::size_t(2 * at)], blk = rkeys[std::size_t(2 * at + 1)];
          if (id < 0 || id >= n_ || owner(id) != me)
            gradix::detail::fail(what, ": rank ", me, " received a gradient for row ", id, " which it does not own");
          if (blk < last_block)
            gradix::detail::fail(what, ": rank ", me, " received block ", blk, " after block ", last_block,
                                 " (the ranks' blocks are out of order)");
          last_block = blk;
        }
      }
    }
    auto& st = local_.grad();
    auto add = [&](std::int64_t id, T const* src) {
      index_t const slot = st.reserve(local_row(id));
      T* dst = st.data() + slot * st.slice_elements();
      for (index_t x = 0; x < d_; ++x) dst[x] += src[x];
    };
    for (int r = 0; r < R; ++r) {
      if (r == me) {
        for (std::int64_t k = sdisp[std::size_t(me)]; k < sdisp[std::size_t(me) + 1]; ++k) {
          std::size_t const e = send_rows[std::size_t(k)];
          add(eid[e], rows_of + esrc[e] * std::size_t(d_));
        }
        continue;
      }
      for (std::int64_t at = rdisp[std::size_t(r)]; at < rdisp[std::size_t(r) + 1]; ++at)
        add(rkeys[std::size_t(2 * at)], rvals + std::size_t(at) * std::size_t(d_));
    }
  }

 private:
  // (agreed before anything is checked or allocated: a bad shape is the same error on every rank)
  static bool agree_shape(communicator& c, index_t rows, index_t dim, gradix::dist::placement p) {
    c.agree({rows, dim, std::int64_t(p)}, {"the number of rows", "the row length", "the placement"},
            "gradix::dist::sharded_table");
    return true;
  }
  static local_type make_local(communicator& c, index_t rows, index_t dim, gradix::dist::placement p) {
    char const* what = "gradix::dist::sharded_table";
    if (rows <= 0 || dim <= 0)
      gradix::detail::fail(what, ": a table of ", rows, " x ", dim, " (both extents must be > 0)");
    if (dim > INT_MAX) gradix::detail::fail(what, ": rows of ", dim, " elements (at most ", INT_MAX, ")");
    index_t const R = c.size(), r = c.rank();
    index_t const own = p == placement::block ? rows * (r + 1) / R - rows * r / R : (rows - r + R - 1) / R;
    return local_type(tensor<T, shape<dyn, dyn>>(dims(own, dim)));
  }
  communicator* c_;
  index_t n_, d_;
  gradix::dist::placement p_;
  bool agreed_;
  local_type local_;
  detail::id_map<std::int32_t> in_block_;   // fetch's bookkeeping, kept between calls
  detail::id_map<std::int64_t> distinct_;
  // exchange buffers, kept between calls (they grow; they are never zero-filled again)
  struct {
    std::vector<std::int64_t> want, asked;
    std::vector<T> out, got;
  } s_;
  template <class V>
  static typename V::value_type* room(V& v, std::size_t n) {
    if (v.size() < n) v.resize(n);
    return v.data();
  }
  MPI_Datatype row_type_ = MPI_DATATYPE_NULL;
};

struct data_parallel_options {
  /// true: dense gradients are summed over blocks in global block order (the same bits at
  /// any rank count; each block's gradient travels in shares, one per rank, as soon as it is
  /// kept, and each rank sums its share over all blocks, then gathers the sums). false: each
  /// rank sums its own blocks and one MPI_Allreduce adds the ranks' sums (less traffic; the
  /// bits depend on the rank count).
  bool exact = true;
};

/// Dense parameters replicated on every rank, their gradients summed over the global batch.
/// After each block's backward, `keep(j)` takes the gradients of block j (and clears them),
/// and in exact mode sends them on their way at once, so the exchange of block j overlaps
/// the backward of block j+1; `reduce()` writes the sum over all blocks of the batch into
/// every rank's gradients. Blocks are kept in increasing order. The exchanges run on a
/// private copy of the communicator (`comm()`, with its own traffic counter), so that other
/// collectives (a sharded table's fetch and push) may come between keep and reduce.
template <class T>
class data_parallel {
 public:
  template <class... P>
  data_parallel(communicator& c, block_split const& split, data_parallel_options o, P&... params)
      : own_(c.get(), c.options()), c_(&own_), split_(split), o_(o) {
    static_assert(sizeof...(P) > 0, "gradix::dist::data_parallel: give it the dense parameters");
    static_assert((std::is_same_v<typename P::value_type, T> && ...),
                  "gradix::dist::data_parallel: every parameter must have the element type T");
    static_assert((!P::grad_spec::sparse && ...),
                  "gradix::dist::data_parallel: parameters with sparse gradients belong in a sharded_table");
    (add(params), ...);
    c.agree({std::int64_t(params_.size()), o.exact ? 1 : 0}, {"the number of parameters", "data_parallel_options::exact"},
            "gradix::dist::data_parallel");
    std::vector<std::int64_t> sizes;
    for (auto const& e : params_) sizes.push_back(e.size);
    c.agree(sizes, std::vector<char const*>(sizes.size(), "a parameter's element count"), "gradix::dist::data_parallel");
    int const R = c.size();
    index_t const B = split.blocks();
    most_ = (B + R - 1) / R;
    for (int d = 0; d <= R; ++d) lo_.push_back(total_ * d / R);
    for (int s = 0; s < R; ++s) blocks_of_.push_back(B * (s + 1) / R - B * s / R);
    if (o_.exact) {
      kept_.assign(std::size_t(split.local_blocks()) * std::size_t(total_), T(0));
      index_t const w = lo_[std::size_t(c.rank()) + 1] - lo_[std::size_t(c.rank())];
      recv_.assign(std::size_t(most_) * std::size_t(R) * std::size_t(w), T(0));
      ex_.resize(std::size_t(most_));
    } else {
      kept_.assign(std::size_t(total_), T(0));
    }
  }
  template <class... P>
    requires(sizeof...(P) > 0 && (!std::is_same_v<std::remove_cvref_t<P>, data_parallel_options> && ...))
  data_parallel(communicator& c, block_split const& split, P&... params)
      : data_parallel(c, split, data_parallel_options{}, params...) {}
  data_parallel(data_parallel const&) = delete;
  data_parallel& operator=(data_parallel const&) = delete;
  /// Exchanges still in flight (blocks kept, no reduce) finish first: their buffers are ours.
  /// If that fails or times out, the buffers are left allocated (see detail::abandoned).
  ~data_parallel() {
    bool pending = false;
    for (auto& x : ex_) pending = pending || x.req != MPI_REQUEST_NULL;
    if (!pending) return;
    try {
      if (!detail::abandoned())
        for (auto& x : ex_) own_.wait(x, "gradix::dist::data_parallel::~data_parallel");
    } catch (gradix::error const&) {
    }
    if (detail::abandoned()) {  // MPI may still write into them: never freed
      new std::vector<T>(std::move(kept_));
      new std::vector<T>(std::move(recv_));
      new std::vector<communicator::exchange>(std::move(ex_));
    }
  }

  /// The private communicator its exchanges run on (traffic() counts them).
  communicator& comm() { return own_; }

  /// Takes the current gradients as block j's (global index: the next of this rank's blocks)
  /// and clears them, for the next block's backward. Exact mode: posts block j's exchange.
  void keep(index_t j) {
    char const* what = "gradix::dist::data_parallel::keep";
    index_t const b = detail::next_block(what, split_, kept_count_, j);
    T* dst = kept_.data() + (o_.exact ? std::size_t(b) * std::size_t(total_) : 0);
    for (auto& e : params_) {
      if (o_.exact) std::memcpy(dst, e.grad, std::size_t(e.size) * sizeof(T));
      else
        for (index_t x = 0; x < e.size; ++x) dst[x] += e.grad[x];
      dst += e.size;
      e.zero();
    }
    if (o_.exact) post_block(b, true);
    ++kept_count_;
    for (auto& x : ex_) c_->test(x);
  }

  /// Writes the sum over every block of the batch into each parameter's gradient (all of it
  /// touched). Collective; every block of this rank must have been kept. If one was not, every
  /// rank throws and no gradient is written.
  void reduce() {
    char const* what = "gradix::dist::data_parallel::reduce";
    std::string const bad = detail::missing_block(what, split_, kept_count_, c_->rank());
    int const R = c_->size();
    std::vector<T> sum(static_cast<std::size_t>(total_));
    if (!o_.exact) {
      kept_count_ = 0;  // (even if a rank failed: the next step starts afresh)
      std::vector<T> mine(kept_.begin(), kept_.end());
      std::fill(kept_.begin(), kept_.end(), T(0));
      c_->exchange_counts(std::vector<std::int64_t>(std::size_t(R), 0), bad.empty(), bad, what);
      MPI_Request req;
      c_->check(MPI_Iallreduce(mine.data(), sum.data(), detail::to_int_count(total_, what, "MPI_Iallreduce"),
                               detail::mpi_type<T>(), MPI_SUM, c_->get(), &req),
                "MPI_Iallreduce");
      c_->wait(req, "MPI_Iallreduce", what);
    } else {
      // the exchanges every rank posts: one per block of the rank with the most blocks (a
      // rank without its k-th block sends nothing in exchange k, a block not kept sends zeros)
      for (index_t b = kept_count_; b < most_; ++b) post_block(b, b < split_.local_blocks());
      for (auto& x : ex_) c_->wait(x, what);
      kept_count_ = 0;
      c_->exchange_counts(std::vector<std::int64_t>(std::size_t(R), 0), bad.empty(), bad, what);
      // my share, summed over the blocks in global block order: rank by rank, each rank's in order
      int const me = c_->rank();
      index_t const w = lo_[std::size_t(me) + 1] - lo_[std::size_t(me)];
      std::vector<T> part(static_cast<std::size_t>(w), T(0));
      for (int s = 0; s < R; ++s)
        for (index_t k = 0; k < blocks_of_[std::size_t(s)]; ++k) {
          T const* src = recv_.data() + (std::size_t(k) * std::size_t(R) + std::size_t(s)) * std::size_t(w);
          for (index_t x = 0; x < w; ++x) part[std::size_t(x)] += src[x];
        }
      // everyone gets every share
      std::vector<int> ic(static_cast<std::size_t>(R)), id(static_cast<std::size_t>(R));
      for (int d = 0; d < R; ++d) {
        ic[std::size_t(d)] = detail::to_int_count(lo_[std::size_t(d) + 1] - lo_[std::size_t(d)], what, "MPI_Iallgatherv");
        id[std::size_t(d)] = detail::to_int_count(lo_[std::size_t(d)], what, "MPI_Iallgatherv");
      }
      MPI_Request req;
      c_->check(MPI_Iallgatherv(part.data(), int(w), detail::mpi_type<T>(), sum.data(), ic.data(), id.data(),
                                detail::mpi_type<T>(), c_->get(), &req),
                "MPI_Iallgatherv");
      c_->wait(req, "MPI_Iallgatherv", what);
    }
    kept_count_ = 0;
    T const* src = sum.data();
    for (auto& e : params_) {
      std::memcpy(e.grad, src, std::size_t(e.size) * sizeof(T));
      e.touch_all();
      src += e.size;
    }
  }

 private:
  // Exchange k: this rank's k-th block (if `has` it) sends share [lo_d, lo_{d+1}) to rank d;
  // rank s's k-th block (if it has one) arrives in recv_ at (k, s).
  void post_block(index_t k, bool has) {
    char const* what = "gradix::dist::data_parallel::keep";
    int const R = c_->size(), me = c_->rank();
    index_t const w = lo_[std::size_t(me) + 1] - lo_[std::size_t(me)];
    std::vector<std::int64_t> sc(static_cast<std::size_t>(R)), rc(static_cast<std::size_t>(R)),
        rd(static_cast<std::size_t>(R));
    for (int d = 0; d < R; ++d) {
      sc[std::size_t(d)] = has ? lo_[std::size_t(d) + 1] - lo_[std::size_t(d)] : 0;
      rc[std::size_t(d)] = k < blocks_of_[std::size_t(d)] ? w : 0;
      rd[std::size_t(d)] = std::int64_t(d) * w;
    }
    T const* send = k < split_.local_blocks() ? kept_.data() + std::size_t(k) * std::size_t(total_) : nullptr;
    // rank s's share of exchange k lands at (k, s); a rank without a k-th block sends 0
    c_->post(ex_[std::size_t(k)], send, sc, recv_.data() + std::size_t(k) * std::size_t(R) * std::size_t(w), rc,
             detail::mpi_type<T>(), sizeof(T), what, &rd);
  }
  struct entry {
    T* grad;
    index_t size;
    std::function<void()> zero, touch_all;
  };
  template <class P>
  void add(P& p) {
    auto* g = &p.grad();
    params_.push_back({g->data(), index_t(g->dense().size()), [g] { g->zero(); }, [g] { g->touch_all(); }});
    total_ += params_.back().size;
  }
  communicator own_;
  communicator* c_;
  block_split split_;
  data_parallel_options o_;
  std::vector<entry> params_;
  index_t total_ = 0, most_ = 0, kept_count_ = 0;
  std::vector<index_t> lo_, blocks_of_;
  std::vector<T> kept_, recv_;
  std::vector<communicator::exchange> ex_;
};

template <class P0, class... P>
data_parallel(communicator&, block_split const&, data_parallel_options, P0&, P&...)
    -> data_parallel<typename P0::value_type>;
template <class P0, class... P>
  requires(!std::is_same_v<P0, data_parallel_options>)
data_parallel(communicator&, block_split const&, P0&, P&...) -> data_parallel<typename P0::value_type>;

}  // namespace gradix::dist
