#pragma once
/// \file
/// Row-sharded tables (docs/distributed.md): `sharded_table<T>` spreads a table's rows over
/// the ranks (`placement`); each rank holds only the rows it owns, as a parameter with sparse
/// gradients along the rows (`local()`) that an optimizer steps. `fetch` reads the rows that
/// a rank's blocks use into a `lookup`: an ordinary parameter with one row per (block,
/// distinct id), which expressions gather from, so forward and backward need nothing of MPI.
/// `push` sends the lookup's row gradients to their owners, which add them in global block
/// order (`push_options::exact`, the default: the same bits at any rank count). `read_rows`
/// reads rows outside training.
///
/// **Traffic.** `fetch` sends each distinct id of the rank's blocks to its owner (8 bytes)
/// and gets its row back; `push` sends one row per (block, touched row) to its owner, with
/// its (id, block) key (16 bytes). Nothing is proportional to the table's size: a rank holds
/// only the rows it owns. A rank's own rows do not go through MPI.
#include "gradix/api/param.hpp"
#include "gradix/config.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/shape.hpp"
#include "gradix/core/tensor.hpp"
#include "gradix/dist/block_split.hpp"
#include "gradix/dist/communicator.hpp"
#include "gradix/dist/mpi.hpp"
#include "gradix/grad/storage.hpp"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace gradix::dist {

namespace detail {
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
}  // namespace detail

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
  /// The gradients' element type: T, or float for a bfloat16 or half table (whose rows
  /// travel as their 16-bit patterns, half the bytes of float rows).
  using grad_type = compute_type_t<T>;
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
    if constexpr (std::is_same_v<grad_type, T>) {
      grad_row_type_ = row_type_;
    } else {
      if (int rc = MPI_Type_contiguous(int(d_), detail::mpi_type<grad_type>(), &grad_row_type_); rc != MPI_SUCCESS)
        c.check(rc, "MPI_Type_contiguous");
      c.check(MPI_Type_commit(&grad_row_type_), "MPI_Type_commit");
    }
  }
  sharded_table(sharded_table const&) = delete;
  sharded_table& operator=(sharded_table const&) = delete;
  ~sharded_table() {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && !detail::abandoned()) {
      if (grad_row_type_ != MPI_DATATYPE_NULL && grad_row_type_ != row_type_) MPI_Type_free(&grad_row_type_);
      if (row_type_ != MPI_DATATYPE_NULL) MPI_Type_free(&row_type_);
    }
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
    grad_type const* gd = g.dense().data();
    // the entries to send: one per touched (block, id) row; with exact = false one per id,
    // its blocks' rows summed here first, in block order
    std::vector<std::int64_t> eid, eblock;
    std::vector<grad_type> merged_rows;              // (exact = false: the ranks' sums)
    std::vector<std::size_t> esrc;           // each entry's row: a lookup row, or a merged one
    if (bad.empty()) {
      detail::id_map<std::int64_t>& merged = distinct_;
      if (!o.exact) merged.reset(L.pair_id_.size());
      for (std::size_t k = 0; k < L.pair_id_.size(); ++k) {
        if (!g.is_touched(index_t(k))) continue;
        grad_type const* row = gd + k * std::size_t(d_);
        if (!o.exact) {
          auto [at, added] = merged.try_emplace(L.pair_id_[k], std::int64_t(eid.size()));
          if (!added) {
            grad_type* dst = merged_rows.data() + std::size_t(*at) * std::size_t(d_);
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
    grad_type const* rows_of = o.exact ? gd : merged_rows.data();
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
    grad_type* const vals = room(s_.gout, send_rows.size() * std::size_t(d_));
    grad_type* const rvals = room(s_.ggot, std::size_t(nrecv) * std::size_t(d_));
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
      std::memcpy(vals + k * std::size_t(d_), rows_of + esrc[e] * std::size_t(d_), std::size_t(d_) * sizeof(grad_type));
    }
    auto twice = [](std::vector<std::int64_t> v) {
      for (auto& x : v) x *= 2;
      return v;
    };
    c_->alltoallv(keys, twice(scount), rkeys, twice(rcount), MPI_INT64_T, sizeof(std::int64_t), what, true);
    c_->alltoallv(vals, scount, rvals, rcount, grad_row_type_, std::size_t(d_) * sizeof(grad_type), what, true);
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
    auto add = [&](std::int64_t id, grad_type const* src) {
      index_t const slot = st.reserve(local_row(id));
      grad_type* dst = st.data() + slot * st.slice_elements();
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
    std::vector<grad_type> gout, ggot;  // (push: gradient rows)
  } s_;
  template <class V>
  static typename V::value_type* room(V& v, std::size_t n) {
    if (v.size() < n) v.resize(n);
    return v.data();
  }
  MPI_Datatype row_type_ = MPI_DATATYPE_NULL;       // a row of values
  MPI_Datatype grad_row_type_ = MPI_DATATYPE_NULL;  // a row of gradients (row_type_ unless T is half-width)
};

}  // namespace gradix::dist
