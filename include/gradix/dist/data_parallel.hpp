#pragma once
/// \file
/// Data parallelism for dense parameters (docs/distributed.md): `data_parallel<T>` takes the
/// gradients of parameters replicated on every rank after each block's backward (`keep`) and
/// writes their sum over the global batch into every rank's gradients (`reduce`), added in
/// global block order (`data_parallel_options::exact`, the default: the same bits at any rank
/// count) or by one MPI_Allreduce (`exact = false`). dist/nccl.hpp is its device counterpart.
#include "gradix/config.hpp"
#include "gradix/core/error.hpp"
#include "gradix/dist/block_split.hpp"
#include "gradix/dist/communicator.hpp"
#include "gradix/dist/mpi.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace gradix::dist {

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
