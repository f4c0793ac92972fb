#pragma once
/// \file
/// The global batch cut into blocks (docs/distributed.md): `block_split` (blocks of a fixed
/// number of samples, and the contiguous run of blocks each rank takes) and `ordered_sum` (a
/// sum of per-block values, added in global block order). Block boundaries depend only on
/// the batch and block sizes, never on the rank count, and every sum over the batch that
/// gradix::dist makes is a sum of per-block partial sums in global block order: that is why
/// results have the same bits at any rank count. Also the checks of keep(j) and reduce()
/// that data_parallel and nccl_data_parallel share (detail::next_block, missing_block).
#include "gradix/config.hpp"
#include "gradix/core/error.hpp"
#include "gradix/dist/communicator.hpp"

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace gradix::dist {

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

}  // namespace gradix::dist
