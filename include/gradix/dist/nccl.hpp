#pragma once
/// \file
/// Data parallelism for device parameters over NCCL (docs/distributed.md, "GPUs"): the device
/// counterpart of gx::dist::data_parallel, with the same block-ordered sums and so the same
/// bits at any rank count. Needs nvcc, NCCL (it ships with the CUDA toolkit) and MPI (which
/// hands NCCL's unique id to every rank).
///
///     gx::dist::communicator world;
///     gx::dist::nccl_communicator gpus(world, launcher.stream());
///     gx::dist::nccl_data_parallel dp(gpus, split, W);    // W: a grid::device_parameter
///     for each of this rank's blocks j: grid backward ...; dp.keep(j);
///     dp.reduce();
///
/// keep(j) copies block j's gradients into a device buffer (and clears them) and enqueues
/// that block's exchange (grouped ncclSend / ncclRecv: each rank's share of the elements to
/// that rank) in the parameters' stream, so it runs behind the next block's backward.
/// reduce() sums the blocks in global block order on the device (grid::ordered_block_sum,
/// the kernel the emulator tests check against the host loop) and gathers the shares with
/// ncclAllGather. `exact = false` sums locally and calls ncclAllReduce.
///
/// Errors: every NCCL call's failure is a gradix::error naming the call and NCCL's message;
/// the communicator is nonblocking, and every wait polls the stream and
/// ncclCommGetAsyncError with the MPI communicator's deadline, then aborts the NCCL
/// communicator (ncclCommAbort) and throws, instead of hanging on a dead rank.
#include "gradix/backend/grid/block_sum.hpp"
#include "gradix/device.hpp"
#include "gradix/dist.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace gradix::dist {

namespace detail {
template <class T>
ncclDataType_t nccl_type() {
  if constexpr (std::is_same_v<T, float>) return ncclFloat32;
  else if constexpr (std::is_same_v<T, double>) return ncclFloat64;
  else static_assert(sizeof(T) == 0, "gradix::dist::nccl: gradients are float or double");
}
}  // namespace detail

/// A NCCL communicator over the ranks of an MPI communicator (rank r of MPI is rank r of
/// NCCL), nonblocking, on one CUDA stream. Collective over the MPI communicator.
class nccl_communicator {
 public:
  nccl_communicator(communicator& mpi, cudaStream_t stream) : mpi_(&mpi), stream_(stream) {
    char const* what = "gradix::dist::nccl_communicator";
    // rank 0's unique id, to every rank through MPI
    ncclUniqueId id{};
    std::string err;
    if (mpi.rank() == 0)
      if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) err = std::string("ncclGetUniqueId: ") + ncclGetErrorString(r);
    std::vector<std::int64_t> mine(sizeof(ncclUniqueId) / 8 + 2, 0);
    mine[0] = err.empty() ? 0 : 1;
    std::memcpy(mine.data() + 1, &id, sizeof id);
    auto const all = mpi.allgather(std::span<std::int64_t const>(mine), what);
    if (all[0] != 0) {
      if (!err.empty()) gradix::detail::fail(what, ": ", err);
      gradix::detail::fail(what, ": rank 0 could not make NCCL's unique id");
    }
    std::memcpy(&id, all.data() + 1, sizeof id);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    check(ncclCommInitRankConfig(&comm_, mpi.size(), id, mpi.rank(), &config), "ncclCommInitRankConfig", what);
    settle("ncclCommInitRankConfig", what);
  }
  nccl_communicator(nccl_communicator const&) = delete;
  nccl_communicator& operator=(nccl_communicator const&) = delete;
  ~nccl_communicator() {
    if (!comm_) return;
    if (broken_) (void)ncclCommAbort(comm_);
    else (void)ncclCommDestroy(comm_);
  }

  ncclComm_t get() const { return comm_; }
  cudaStream_t stream() const { return stream_; }
  communicator& mpi() const { return *mpi_; }
  int rank() const { return mpi_->rank(); }
  int size() const { return mpi_->size(); }
  bool usable() const { return !broken_; }

  /// Throws a gradix::error naming the call unless r is success (or in progress: a
  /// nonblocking call that settles later).
  void check(ncclResult_t r, char const* call, char const* what) {
    if (r == ncclSuccess || r == ncclInProgress) return;
    broken_ = true;
    char const* last = comm_ ? ncclGetLastError(comm_) : nullptr;
    gradix::detail::fail(what, ": ", call, " failed on rank ", rank(), " of ", size(), ": ", ncclGetErrorString(r),
                         last && *last ? std::string(" (") + last + ")" : std::string());
  }
  /// Waits until the communicator's last call has settled (nonblocking mode).
  void settle(char const* call, char const* what) {
    poll(call, what, [&] {
      ncclResult_t state = ncclSuccess;
      check(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError", what);
      if (state != ncclInProgress) check(state, call, what);
      return state != ncclInProgress;
    });
  }
  /// Waits until everything enqueued in the stream has run, with the MPI communicator's
  /// deadline; NCCL's asynchronous errors are thrown as they appear.
  void wait(char const* what) {
    poll("the stream", what, [&] {
      ncclResult_t state = ncclSuccess;
      check(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError", what);
      if (state != ncclInProgress) check(state, "an enqueued NCCL operation", what);
      cudaError_t const e = cudaStreamQuery(stream_);
      if (e == cudaErrorNotReady) return false;
      if (e != cudaSuccess) {
        broken_ = true;
        gradix::detail::fail(what, ": the stream failed on rank ", rank(), ": ", cudaGetErrorString(e));
      }
      return true;
    });
  }

 private:
  template <class Done>
  void poll(char const* call, char const* what, Done done) {
    using clock = std::chrono::steady_clock;
    auto const start = clock::now();
    double const timeout = mpi_->options().timeout;
    for (long spins = 0;; ++spins) {
      if (done()) return;
      if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
      if (timeout > 0 && std::chrono::duration<double>(clock::now() - start).count() > timeout) {
        broken_ = true;
        (void)ncclCommAbort(comm_);
        comm_ = nullptr;
        char secs[32];
        std::snprintf(secs, sizeof secs, "%g", timeout);
        gradix::detail::fail(what, ": ", call, " did not finish within ", secs, " s on rank ", rank(), " of ", size(),
                             " (another rank died, failed or skipped this exchange); the NCCL communicator was aborted");
      }
    }
  }
  communicator* mpi_;
  cudaStream_t stream_;
  ncclComm_t comm_ = nullptr;
  bool broken_ = false;
};

/// Device parameters (grid::device_parameter with dense gradients, all of element type T,
/// in one launcher's stream) replicated on every rank, their gradients summed over the batch
/// in global block order; the device counterpart of data_parallel (same options).
template <class T, class L>
class nccl_data_parallel {
 public:
  template <class... P>
  nccl_data_parallel(nccl_communicator& c, block_split const& split, data_parallel_options o, P&... params)
      : c_(&c), split_(split), o_(o), l_(&first_launcher(params...)) {
    static_assert(sizeof...(P) > 0, "gradix::dist::nccl_data_parallel: give it the device parameters");
    static_assert((std::is_same_v<typename P::value_type, T> && ...),
                  "gradix::dist::nccl_data_parallel: every parameter must have the element type T");
    static_assert((!P::grad_spec::sparse && ...),
                  "gradix::dist::nccl_data_parallel: parameters with sparse gradients belong in a sharded table");
    (add(params), ...);
    if constexpr (requires { l_->stream(); })
      if (l_->stream() != c.stream())
        gradix::detail::fail("gradix::dist::nccl_data_parallel: the parameters' launcher runs on another CUDA stream "
                             "than the NCCL communicator (make the nccl_communicator with the launcher's stream)");
    std::vector<std::int64_t> sizes{total_, std::int64_t(params_.size()), o.exact ? 1 : 0};
    c.mpi().agree(sizes, {"the parameters' element count", "the number of parameters", "data_parallel_options::exact"},
                  "gradix::dist::nccl_data_parallel");
    int const R = c.size();
    wmax_ = (total_ + R - 1) / R;
    most_ = (split.blocks() + R - 1) / R;
    kept_ = alloc(std::size_t(o.exact ? split.local_blocks() : 1) * std::size_t(total_));
    if (o.exact) recv_ = alloc(std::size_t(split.blocks()) * std::size_t(wmax_));
    part_ = alloc(std::size_t(wmax_));
    sum_ = alloc(std::size_t(R) * std::size_t(wmax_));
    if (!o.exact) l_->fill_zero(kept_, std::size_t(total_) * sizeof(T));
  }
  template <class... P>
    requires(sizeof...(P) > 0 && (!std::is_same_v<std::remove_cvref_t<P>, data_parallel_options> && ...))
  nccl_data_parallel(nccl_communicator& c, block_split const& split, P&... params)
      : nccl_data_parallel(c, split, data_parallel_options{}, params...) {}
  nccl_data_parallel(nccl_data_parallel const&) = delete;
  nccl_data_parallel& operator=(nccl_data_parallel const&) = delete;
  ~nccl_data_parallel() {
    for (T* p : {kept_, recv_, part_, sum_})
      if (p) l_->deallocate(p);
  }

  /// Takes block j's gradients (the next of this rank's blocks) and clears them; in exact
  /// mode enqueues block j's exchange.
  void keep(index_t j) {
    char const* what = "gradix::dist::nccl_data_parallel::keep";
    index_t const b = detail::next_block(what, split_, kept_count_, j);
    T* dst = kept_ + (o_.exact ? std::size_t(b) * std::size_t(total_) : 0);
    for (auto& e : params_) {
      if (o_.exact) l_->copy_device_to_device(dst, e.grad, std::size_t(e.size) * sizeof(T));
      else grid::add_into(*l_, dst, e.grad, e.size);
      dst += e.size;
      e.zero();
    }
    if (o_.exact) post_block(b, true);
    ++kept_count_;
  }

  /// Writes the sum over every block of the batch into each parameter's gradient (waits for
  /// the device). Every rank throws, and no gradient is written, if a rank missed a block.
  void reduce() {
    char const* what = "gradix::dist::nccl_data_parallel::reduce";
    std::string const bad = detail::missing_block(what, split_, kept_count_, c_->rank());
    int const R = c_->size();
    if (o_.exact) {
      for (index_t b = kept_count_; b < most_; ++b) post_block(b, b < split_.local_blocks());
      kept_count_ = 0;
      c_->wait(what);
      c_->mpi().exchange_counts(std::vector<std::int64_t>(std::size_t(R), 0), bad.empty(), bad, what);
      index_t const w = share(c_->rank());
      grid::ordered_block_sum(*l_, recv_, part_, split_.blocks(), w, wmax_);
    } else {
      kept_count_ = 0;
      try {
        c_->mpi().exchange_counts(std::vector<std::int64_t>(std::size_t(R), 0), bad.empty(), bad, what);
      } catch (gradix::error const&) {
        l_->fill_zero(kept_, std::size_t(total_) * sizeof(T));  // (the next step starts afresh)
        throw;
      }
      c_->check(ncclAllReduce(kept_, sum_, std::size_t(total_), detail::nccl_type<T>(), ncclSum, c_->get(), c_->stream()),
                "ncclAllReduce", what);
      l_->fill_zero(kept_, std::size_t(total_) * sizeof(T));
    }
    if (o_.exact)
      c_->check(ncclAllGather(part_, sum_, std::size_t(wmax_), detail::nccl_type<T>(), c_->get(), c_->stream()),
                "ncclAllGather", what);
    T const* src = sum_;
    for (auto& e : params_) {
      l_->copy_device_to_device(e.grad, src, std::size_t(e.size) * sizeof(T));
      src += e.size;
    }
    c_->wait(what);
  }

 private:
  // the elements [d wmax, min((d+1) wmax, total)) are rank d's share
  index_t share(int d) const {
    index_t const lo = std::min(total_, index_t(d) * wmax_), hi = std::min(total_, index_t(d + 1) * wmax_);
    return hi - lo;
  }
  // exchange k: my k-th block's shares to every rank; every rank's k-th block's share of my
  // elements into recv_ at that block's global index
  void post_block(index_t k, bool has) {
    char const* what = "gradix::dist::nccl_data_parallel::keep";
    int const R = c_->size(), me = c_->rank();
    index_t const B = split_.blocks();
    c_->check(ncclGroupStart(), "ncclGroupStart", what);
    if (has) {
      T const* blk = kept_ + std::size_t(k) * std::size_t(total_);
      for (int d = 0; d < R; ++d)
        if (share(d) > 0)
          c_->check(ncclSend(blk + std::size_t(d) * std::size_t(wmax_), std::size_t(share(d)), detail::nccl_type<T>(), d,
                             c_->get(), c_->stream()),
                    "ncclSend", what);
    }
    index_t const w = share(me);
    for (int s = 0; s < R; ++s) {
      index_t const first = B * s / R, count = B * (s + 1) / R - first;
      if (k < count && w > 0)
        c_->check(ncclRecv(recv_ + std::size_t(first + k) * std::size_t(wmax_), std::size_t(w), detail::nccl_type<T>(), s,
                           c_->get(), c_->stream()),
                  "ncclRecv", what);
    }
    c_->check(ncclGroupEnd(), "ncclGroupEnd", what);
    c_->settle("ncclGroupEnd", what);
  }
  T* alloc(std::size_t n) { return n ? static_cast<T*>(l_->allocate(n * sizeof(T))) : nullptr; }
  template <class P0, class... P>
  static L& first_launcher(P0& p, P&...) {
    return p.launcher();
  }
  struct entry {
    T* grad;
    index_t size;
    std::function<void()> zero;
  };
  template <class P>
  void add(P& p) {
    auto* g = &p.grad();
    params_.push_back({g->data(), index_t(g->shape().size()), [g] { g->zero(); }});
    total_ += params_.back().size;
  }
  nccl_communicator* c_;
  block_split split_;
  data_parallel_options o_;
  L* l_;
  std::vector<entry> params_;
  index_t total_ = 0, wmax_ = 0, most_ = 0, kept_count_ = 0;
  T *kept_ = nullptr, *recv_ = nullptr, *part_ = nullptr, *sum_ = nullptr;
};

template <class P0, class... P>
nccl_data_parallel(nccl_communicator&, block_split const&, data_parallel_options, P0&, P&...)
    -> nccl_data_parallel<typename P0::value_type, typename P0::launcher_type>;
template <class P0, class... P>
  requires(!std::is_same_v<P0, data_parallel_options>)
nccl_data_parallel(nccl_communicator&, block_split const&, P0&, P&...)
    -> nccl_data_parallel<typename P0::value_type, typename P0::launcher_type>;

}  // namespace gradix::dist
