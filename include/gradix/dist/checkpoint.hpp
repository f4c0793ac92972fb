#pragma once
/// \file
/// Checkpoints of a distributed run (docs/distributed.md, "Checkpoints"), loadable at any
/// rank count.
///
///     gx::dist::checkpoint ck(world);
///     ck.add_table("E", E).add_table_optimizer("opt", opt, E);   // opt steps E.local()
///     ck.add("W", W).add("optw", optw);                          // replicated objects
///     ck.save("run.gxck");                                       // collective
///     ck.load("run.gxck");                                       // collective, any rank count
///
/// Files: `PATH` is the manifest, a gx::checkpoint file (docs/checkpoint.md) that rank 0
/// writes last; it holds the rank count and generation of the save, each table's shape, the
/// replicated objects and the table optimizers' scalars (step count, options). Each rank r of
/// R writes its rows to `PATH.shard-r-of-R.gen-G`, also a gx::checkpoint file: the global ids
/// of its rows (`NAME.ids`), the rows (`NAME`) and the optimizer state of those rows (`opt.m.0`,
/// `opt.last.0`, ...), row k of each belonging to id k.
///
/// Save writes the shard files of a new generation, checks that every rank succeeded, then
/// rank 0 replaces the manifest (temporary file, fsync, rename): that rename is the commit.
/// A crash or a failing write before it leaves the previous manifest and its shard files
/// whole; after it, the previous generation's shard files are removed. Load reads the
/// manifest and every shard file it names, checks them all (checksums, shapes, every row
/// present exactly once), and takes the rows that this rank owns under the table's placement
/// at the current rank count; only when every rank's checks passed does any rank change its
/// objects. A rank reads every shard file, twice and a chunk at a time (check, then copy its
/// rows): its memory is a chunk and its own rows twice, never another rank's rows.
#include "gradix/checkpoint.hpp"
#include "gradix/dist.hpp"

#include <chrono>
#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <sys/types.h>  // off_t (fseeko, ftello)

namespace gradix::dist {

namespace detail {
/// Reads a gx::checkpoint file front to back in chunks, checking its framing and checksum
/// as it goes, so that a rank can take the rows it owns from a shard file without holding
/// the file (a checkpoint saved on fewer ranks has bigger shard files).
class shard_reader {
 public:
  shard_reader(std::string path, char const* what) : path_(std::move(path)), what_(what) {
    f_ = std::fopen(path_.c_str(), "rb");
    if (!f_) gradix::detail::fail(what_, ": cannot open ", path_, ": ", std::strerror(errno));
    std::uint64_t size = 0;
    if (::fseeko(f_, 0, SEEK_END) == 0) {
      off_t const at = ::ftello(f_);
      if (at > 0) size = std::uint64_t(at);
    }
    ::fseeko(f_, 0, SEEK_SET);
    if (size < 8 + 4 + 4 + 8)
      gradix::detail::fail(what_, ": ", path_, " is not a gradix checkpoint (no GRADIXCK header)");
    end_ = size - 8;
    char magic[8];
    read(magic, 8, "the header");
    if (std::memcmp(magic, gradix::detail::ckpt::magic, 8) != 0)
      gradix::detail::fail(what_, ": ", path_, " is not a gradix checkpoint (no GRADIXCK header)");
    auto const version = get<std::uint32_t>("the header");
    if (version != gradix::detail::ckpt::format_version)
      gradix::detail::fail(what_, ": ", path_, ": format version ", version, "; this gradix reads version ",
                           gradix::detail::ckpt::format_version);
    count_ = get<std::uint32_t>("the header");
  }
  shard_reader(shard_reader const&) = delete;
  shard_reader& operator=(shard_reader const&) = delete;
  ~shard_reader() {
    if (f_) std::fclose(f_);
  }
  std::string const& path() const { return path_; }
  std::uint32_t count() const { return count_; }
  /// The next record's header; the reader then stands at its data (record::bytes of them).
  gradix::detail::ckpt::record header() {
    gradix::detail::ckpt::record r;
    auto const len = get<std::uint32_t>("a record's name");
    need(len, "a record's name");
    r.name.resize(len);
    read(r.name.data(), len, "a record's name");
    r.type = get<std::uint8_t>("a record's header");
    r.layout = get<std::uint8_t>("a record's header");
    auto const rank = get<std::uint8_t>("a record's header");
    (void)get<std::uint8_t>("a record's header");
    r.extents.resize(rank);
    for (auto& e : r.extents) e = get<std::int64_t>("a record's shape");
    r.bytes = std::size_t(get<std::uint64_t>("a record's size"));
    need(r.bytes, "a record's data");
    r.offset = std::size_t(pos_);
    return r;
  }
  /// Reads n bytes (hashing them).
  void read(void* dst, std::size_t n, char const* inside) {
    need(n, inside);
    if (n > 0 && std::fread(dst, 1, n, f_) != n)
      gradix::detail::fail(what_, ": cannot read ", path_, " (inside ", inside, ")");
    h_ = gradix::detail::ckpt::fnv1a(static_cast<unsigned char const*>(dst), n, h_);
    pos_ += n;
  }
  void skip(std::size_t n) {
    std::vector<unsigned char> chunk(std::min<std::size_t>(n, 1 << 20));
    while (n > 0) {
      std::size_t const k = std::min(n, chunk.size());
      read(chunk.data(), k, "a record's data");
      n -= k;
    }
  }
  /// After the last record: checks that nothing follows and the checksum; returns it.
  std::uint64_t finish() {
    if (pos_ != end_) gradix::detail::fail(what_, ": ", path_, ": bytes after the last record (damaged)");
    std::uint64_t stored = 0;
    if (std::fread(&stored, 1, 8, f_) != 8) gradix::detail::fail(what_, ": cannot read ", path_);
    if (stored != h_)
      gradix::detail::fail(what_, ": ", path_, ": the checksum does not match (the file is damaged or truncated)");
    return h_;
  }

 private:
  template <class T>
  T get(char const* inside) {
    T x;
    read(&x, sizeof x, inside);
    return x;
  }
  void need(std::size_t n, char const* inside) {
    if (n > end_ - pos_)
      gradix::detail::fail(what_, ": ", path_, ": the file ends inside ", inside, " (truncated or damaged)");
  }
  std::string path_;
  char const* what_;
  std::FILE* f_ = nullptr;
  std::uint64_t end_ = 0, pos_ = 0, h_ = 14695981039346656037ull;
  std::uint32_t count_ = 0;
};
}  // namespace detail

/// Saves and loads tables (by global row), the optimizers that step them (their per-row
/// state follows the rows), and replicated objects (parameters, tensors, optimizers; saved
/// from rank 0). Registration is the same on every rank; the objects must outlive it.
class checkpoint {
 public:
  explicit checkpoint(communicator& c) : c_(&c) {}

  /// A sharded table's rows, as `name` (and a bfloat16 / half table's rounding counter, as
  /// `name.rounded_updates`, docs/checkpoint.md).
  template <class T>
  checkpoint& add_table(std::string const& name, sharded_table<T>& t) {
    check_name(name);
    table_entry e;
    e.name = name;
    e.rows = t.rows();
    e.dim = t.dim();
    e.owned = t.owned();
    e.owner = [&t](index_t id) { return t.owner(id); };
    e.local_row = [&t](index_t id) { return t.local_row(id); };
    e.global_row = [&t](index_t k) { return t.global_row(k); };
    e.address = &t;
    e.fields.push_back(gradix::detail::ckpt::tensor_field(name, t.local().value()));
    tables_.push_back(std::move(e));
    // a half-width table's stochastic-rounding counter (the same on every rank: each rank's
    // local() takes one rounded update per step), so that a resumed run draws the bits the
    // uninterrupted one would (at the same rank count: the bits of element k are keyed by its
    // offset in the rank's local rows)
    if constexpr (is_half_width_v<T>)
      replicated_.push_back(gradix::detail::ckpt::rounding_field(name + ".rounded_updates", t.local()));
    return *this;
  }

  /// An optimizer that steps the tables' local() parameters, given in the optimizer's order
  /// (its parameter k is tables[k].local()); add_table each table first. Its per-row state
  /// (moments, last steps, accumulators) is saved with the rows; its scalars in the manifest.
  /// Collective (the ranks decide together which state is per row).
  template <class O, class... T>
  checkpoint& add_table_optimizer(std::string const& name, O& opt, sharded_table<T>&... tables) {
    static_assert(sizeof...(T) > 0, "gradix::dist::checkpoint::add_table_optimizer: name the tables it steps");
    static_assert(gradix::detail::ckpt::has_state<O>,
                  "gradix::dist::checkpoint::add_table_optimizer: takes an optimizer of gradix/optim.hpp");
    check_name(name);
    std::vector<table_entry*> which;
    (which.push_back(find_table(&tables, name)), ...);
    std::vector<gradix::detail::ckpt::field> fs;
    opt.visit_state(gradix::detail::ckpt::state_collector{name + ".", &fs});
    // NAME.BASE.K with K a table index, and the table's owned rows first: per-row state. A
    // rank that owns no rows cannot tell an empty per-row vector from an empty replicated
    // one, so the ranks decide together: per-row where every rank says so.
    std::vector<std::int64_t> per_row(fs.size(), 0);
    std::vector<std::size_t> table_of(fs.size(), which.size());
    for (std::size_t q = 0; q < fs.size(); ++q) {
      auto const& f = fs[q];
      auto const dot = f.name.find_last_of('.');
      std::size_t k = which.size();
      if (dot != std::string::npos && dot + 1 < f.name.size() &&
          f.name.find_first_not_of("0123456789", dot + 1) == std::string::npos)
        k = std::stoul(f.name.substr(dot + 1));
      table_of[q] = k;
      per_row[q] = k < which.size() && !f.extents.empty() && f.extents[0] == which[k]->owned &&
                   (f.extents.size() == 1 || (f.extents.size() == 2 && f.extents[1] == which[k]->dim && f.layout == 0));
    }
    char const* what = "gradix::dist::checkpoint::add_table_optimizer";
    std::int64_t const n = std::int64_t(fs.size());
    c_->agree({n}, {"the number of the optimizer's state records"}, what);
    auto const all = c_->allgather(std::span<std::int64_t const>(per_row), what);
    for (std::size_t q = 0; q < fs.size(); ++q) {
      bool every = true;
      for (int r = 0; r < c_->size(); ++r) every = every && all[std::size_t(r) * fs.size() + q] != 0;
      if (every) which[table_of[q]]->fields.push_back(std::move(fs[q]));
      else replicated_.push_back(std::move(fs[q]));
    }
    return *this;
  }

  /// A replicated object: a parameter, a tensor or an optimizer of replicated parameters. Every
  /// rank holds the same one; rank 0's is saved, and every rank loads it.
  template <class X>
  checkpoint& add(std::string const& name, X& x) {
    check_name(name);
    gradix::checkpoint one;
    one.add(name, x);
    for (auto const& f : one.fields()) replicated_.push_back(f);
    return *this;
  }

  /// Collective: writes this rank's shard file, then (once every rank has) rank 0's manifest.
  /// Throws gradix::error on every rank if any rank failed; the previous checkpoint is then
  /// still the one at `path`.
  void save(std::string const& path) {
    char const* what = "gradix::dist::checkpoint::save";
    int const R = c_->size(), me = c_->rank();
    // a new generation, from rank 0's clock (unique across runs that share the path)
    std::int64_t gen0 = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::system_clock::now().time_since_epoch()).count();
    if (gen0 <= last_gen_) gen0 = last_gen_ + 1;
    std::int64_t const gen = c_->allgather(std::span<std::int64_t const>(&gen0, 1), what)[0];
    std::string const shard = shard_path(path, me, R, gen);
    std::string err;
    try {
      auto ids = ids_tensors();
      gradix::checkpoint ck;
      add_shard_fields(ck, ids);
      ck.save(shard);
    } catch (gradix::error const& e) {
      err = e.what();
    }
    try {
      agree_ok(err, what, "wrote no shard file");
    } catch (gradix::error const&) {
      if (c_->usable() && err.empty()) std::remove(shard.c_str());  // (known unused: no manifest follows)
      throw;
    }
    // the commit: rank 0's manifest
    if (me == 0) {
      try {
        std::int64_t ranks = R, g = gen;
        gradix::checkpoint m;
        std::vector<std::int64_t> shapes;
        for (auto const& t : tables_) shapes.push_back(t.rows), shapes.push_back(t.dim);
        manifest_fields(m, ranks, g, shapes);
        m.save(path);
      } catch (gradix::error const& e) {
        err = e.what();
      }
    }
    try {
      agree_ok(err, what, "could not write the manifest");
    } catch (gradix::error const&) {
      // Only when the answer arrived (rank 0 said its manifest failed) is the new shard
      // file known to be unused. After a timeout the manifest may name it: keep it.
      if (c_->usable()) std::remove(shard.c_str());
      throw;
    }
    // the previous generation's shard files (of the checkpoint this one replaced, at this
    // path): rank r removes those numbered r, r + R, ...
    if (prev_gen_ != 0 && prev_path_ == path)
      for (int s = me; s < prev_ranks_; s += R) std::remove(shard_path(path, s, prev_ranks_, prev_gen_).c_str());
    prev_gen_ = last_gen_ = gen;
    prev_ranks_ = R;
    prev_path_ = path;
  }

  /// Collective: loads the checkpoint at `path`, saved at any rank count. Throws gradix::error
  /// on every rank, and changes nothing anywhere, if any rank found a problem.
  void load(std::string const& path) {
    char const* what = "gradix::dist::checkpoint::load";
    std::string err;
    std::vector<std::function<void()>> commits;
    std::int64_t ranks = 0, gen = 0;
    std::vector<std::int64_t> shapes(tables_.size() * 2);
    gradix::checkpoint m;  // (its commit writes into ranks, gen, shapes and the replicated objects)
    try {
      manifest_fields(m, ranks, gen, shapes);
      // the rank count, generation and table shapes first, to find and check the shards
      auto f = gradix::detail::ckpt::parse_file(path, what);
      auto get = [&](char const* name, std::size_t n) {
        for (auto const& rec : f.records)
          if (rec.name == name && rec.type == gradix::detail::ckpt::type_code<std::int64_t>() && rec.bytes == 8 * n) {
            std::vector<std::int64_t> v(n);
            if (n > 0) std::memcpy(v.data(), f.data(rec), 8 * n);
            return v;
          }
        gradix::detail::fail(what, ": ", path, " is not the manifest of a gradix::dist::checkpoint with these ",
                             tables_.size(), " tables (no record '", name, "' of ", n, " 64-bit integers)");
      };
      std::int64_t const file_ranks = get("gradix.dist.ranks", 1)[0];
      std::int64_t const file_gen = get("gradix.dist.generation", 1)[0];
      auto const file_shapes = get("gradix.dist.table_shapes", 2 * tables_.size());
      if (file_ranks <= 0 || file_ranks > INT_MAX)
        gradix::detail::fail(what, ": ", path, ": a rank count of ", file_ranks);
      for (std::size_t t = 0; t < tables_.size(); ++t)
        if (file_shapes[2 * t] != tables_[t].rows || file_shapes[2 * t + 1] != tables_[t].dim)
          gradix::detail::fail(what, ": ", path, ": table '", tables_[t].name, "' was saved with ", file_shapes[2 * t],
                               " x ", file_shapes[2 * t + 1], " elements, the program's has ", tables_[t].rows, " x ",
                               tables_[t].dim);
      commits.push_back(m.prepare_load(path));
      commits.push_back(load_rows(path, int(file_ranks), file_gen));
    } catch (gradix::error const& e) {
      err = e.what();
    }
    agree_ok(err, what, "changed nothing");
    for (auto& c : commits) c();
    prev_gen_ = last_gen_ = gen;
    prev_ranks_ = int(ranks);
    prev_path_ = path;
  }

  /// The shard file of rank r of R in generation gen.
  static std::string shard_path(std::string const& path, int r, int R, std::int64_t gen) {
    return path + ".shard-" + std::to_string(r) + "-of-" + std::to_string(R) + ".gen-" + std::to_string(gen);
  }

 private:
  struct table_entry {
    std::string name;
    index_t rows = 0, dim = 0, owned = 0;
    std::function<int(index_t)> owner;
    std::function<index_t(index_t)> local_row, global_row;
    void const* address = nullptr;
    std::vector<gradix::detail::ckpt::field> fields;  // the rows, then per-row optimizer state
  };

  void check_name(std::string const& name) {
    if (name.empty() || name.rfind("gradix.", 0) == 0)
      gradix::detail::fail("gradix::dist::checkpoint::add: the name '", name,
                           "' (names must be nonempty and not start with 'gradix.')");
    for (auto const& n : names_)
      if (n == name) gradix::detail::fail("gradix::dist::checkpoint::add: the name '", name, "' is registered twice");
    names_.push_back(name);
  }
  table_entry* find_table(void const* t, std::string const& opt) {
    for (auto& e : tables_)
      if (e.address == t) return &e;
    gradix::detail::fail("gradix::dist::checkpoint::add_table_optimizer: '", opt,
                         "' steps a table that was not added with add_table first");
  }

  // Every rank passes its error text ("" when fine); all throw if any rank failed.
  void agree_ok(std::string const& err, char const* what, char const* consequence) {
    std::int64_t const bad = err.empty() ? 0 : 1;
    auto const all = c_->allgather(std::span<std::int64_t const>(&bad, 1), what);
    if (!err.empty()) throw gradix::error(err);
    for (int r = 0; r < c_->size(); ++r)
      if (all[std::size_t(r)])
        gradix::detail::fail(what, ": rank ", r, " of ", c_->size(), " failed (its own error says why); ", consequence);
  }

  std::vector<std::vector<std::int64_t>> ids_tensors() const {
    std::vector<std::vector<std::int64_t>> ids;
    for (auto const& t : tables_) {
      ids.emplace_back();
      for (index_t k = 0; k < t.owned; ++k) ids.back().push_back(t.global_row(k));
    }
    return ids;
  }
  void add_shard_fields(gradix::checkpoint& ck, std::vector<std::vector<std::int64_t>>& ids) {
    for (std::size_t t = 0; t < tables_.size(); ++t) {
      ck.add_field(gradix::detail::ckpt::vector_field(tables_[t].name + ".ids", ids[t]));
      for (auto const& f : tables_[t].fields) ck.add_field(f);
    }
  }
  void manifest_fields(gradix::checkpoint& m, std::int64_t& ranks, std::int64_t& gen, std::vector<std::int64_t>& shapes) {
    m.add_field(gradix::detail::ckpt::scalar_field("gradix.dist.ranks", ranks));
    m.add_field(gradix::detail::ckpt::scalar_field("gradix.dist.generation", gen));
    m.add_field(gradix::detail::ckpt::vector_field("gradix.dist.table_shapes", shapes));
    for (auto const& f : replicated_) m.add_field(f);
  }

  // Reads every shard file of the saved run and stages the rows this rank owns; the
  // returned function copies them into the tables and optimizers.
  std::function<void()> load_rows(std::string const& path, int ranks, std::int64_t gen) {
    char const* what = "gradix::dist::checkpoint::load";
    struct staged {
      std::vector<std::vector<unsigned char>> data;  // per field: its whole bytes
      std::vector<std::uint8_t> have;                 // per owned row
    };
    auto st = std::make_shared<std::vector<staged>>(tables_.size());
    for (std::size_t t = 0; t < tables_.size(); ++t) {
      auto& s = (*st)[t];
      for (auto const& f : tables_[t].fields) s.data.emplace_back(f.bytes().second);
      s.have.assign(std::size_t(tables_[t].owned), 0);
    }
    for (int r = 0; r < ranks; ++r) {
      std::string const file = shard_path(path, r, ranks, gen);
      // pass 1: the framing, the checksum, the records' headers, and which rows are ours:
      // (position in the file's records, local row), in file order, per table
      std::vector<std::vector<std::pair<std::int64_t, index_t>>> mine(tables_.size());
      std::vector<std::int64_t> n_of(tables_.size(), -1);
      std::vector<gradix::detail::ckpt::record> headers;
      std::uint64_t sum1 = 0;
      {
        detail::shard_reader rd(file, what);
        std::vector<std::int64_t> chunk;
        for (std::uint32_t k = 0; k < rd.count(); ++k) {
          auto h = rd.header();
          std::size_t t = tables_.size();
          for (std::size_t q = 0; q < tables_.size(); ++q)
            if (h.name == tables_[q].name + ".ids") t = q;
          if (t == tables_.size()) {
            rd.skip(h.bytes);
          } else {
            auto const& tab = tables_[t];
            if (h.type != gradix::detail::ckpt::type_code<std::int64_t>() || h.extents.size() != 1 ||
                h.bytes != std::size_t(h.extents[0]) * 8 || n_of[t] >= 0)
              gradix::detail::fail(what, ": ", file, ": record '", h.name, "' is not one vector of 64-bit ids");
            std::int64_t const n = h.extents[0];
            n_of[t] = n;
            for (std::int64_t i0 = 0; i0 < n; i0 += 65536) {
              std::int64_t const m = std::min<std::int64_t>(65536, n - i0);
              chunk.resize(std::size_t(m));
              rd.read(chunk.data(), std::size_t(m) * 8, "a record's data");
              for (std::int64_t j = 0; j < m; ++j) {
                std::int64_t const id = chunk[std::size_t(j)];
                if (id < 0 || id >= tab.rows)
                  gradix::detail::fail(what, ": ", file, ": row id ", id, " is out of range for table '", tab.name,
                                       "' of ", tab.rows, " rows");
                if (tab.owner(id) != c_->rank()) continue;
                index_t const lk = tab.local_row(id);
                auto& have = (*st)[t].have[std::size_t(lk)];
                if (have)
                  gradix::detail::fail(what, ": ", file, ": row ", id, " of table '", tab.name, "' appears twice");
                have = 1;
                mine[t].push_back({i0 + j, lk});
              }
            }
          }
          headers.push_back(std::move(h));
        }
        sum1 = rd.finish();
      }
      auto find = [&](std::string const& name) -> gradix::detail::ckpt::record const& {
        for (auto const& rec : headers)
          if (rec.name == name) return rec;
        gradix::detail::fail(what, ": ", file, ": no record '", name, "' (the model differs from the one saved)");
      };
      std::size_t expected_records = 0;
      for (std::size_t t = 0; t < tables_.size(); ++t) {
        auto const& tab = tables_[t];
        if (n_of[t] < 0) (void)find(tab.name + ".ids");
        expected_records += 1 + tab.fields.size();
        for (auto const& fd : tab.fields) {
          auto const& rec = find(fd.name);
          auto want = fd.extents;
          want[0] = n_of[t];
          if (rec.type != fd.type || rec.extents != want || rec.layout != fd.layout)
            gradix::detail::fail(what, ": ", file, ": record '", fd.name, "' holds ",
                                 gradix::detail::ckpt::type_name(rec.type), " ",
                                 gradix::detail::ckpt::shape_text(rec.extents), ", the program expects ",
                                 gradix::detail::ckpt::type_name(fd.type), " ", gradix::detail::ckpt::shape_text(want));
        }
      }
      if (headers.size() != expected_records)
        gradix::detail::fail(what, ": ", file, ": ", headers.size(), " records, the program expects ",
                             expected_records, " (the model differs from the one saved)");
      // pass 2: our rows of every per-row record, a chunk of rows at a time
      detail::shard_reader rd(file, what);
      std::vector<unsigned char> buf;
      for (std::uint32_t k = 0; k < rd.count(); ++k) {
        auto h = rd.header();
        std::size_t t = tables_.size(), q = 0;
        for (std::size_t tt = 0; tt < tables_.size() && t == tables_.size(); ++tt)
          for (std::size_t qq = 0; qq < tables_[tt].fields.size(); ++qq)
            if (tables_[tt].fields[qq].name == h.name) t = tt, q = qq;
        if (t == tables_.size() || n_of[t] <= 0) {
          rd.skip(h.bytes);
          continue;
        }
        std::int64_t const n = n_of[t];
        if (h.bytes % std::size_t(n) != 0)
          gradix::detail::fail(what, ": ", file, ": record '", h.name, "' has ", h.bytes, " bytes for ", n, " rows");
        std::size_t const row_bytes = h.bytes / std::size_t(n);
        std::int64_t const per_chunk = std::max<std::int64_t>(1, std::int64_t((1 << 20) / std::max<std::size_t>(1, row_bytes)));
        auto const& want = mine[t];
        std::size_t p = 0;
        unsigned char* dst = (*st)[t].data[q].data();
        for (std::int64_t i0 = 0; i0 < n; i0 += per_chunk) {
          std::int64_t const m = std::min(per_chunk, n - i0);
          buf.resize(std::size_t(m) * row_bytes);
          rd.read(buf.data(), buf.size(), "a record's data");
          for (; p < want.size() && want[p].first < i0 + m; ++p)
            std::memcpy(dst + std::size_t(want[p].second) * row_bytes, buf.data() + std::size_t(want[p].first - i0) * row_bytes,
                        row_bytes);
        }
      }
      if (rd.finish() != sum1)
        gradix::detail::fail(what, ": ", file, " changed while it was read");
    }
    for (std::size_t t = 0; t < tables_.size(); ++t)
      for (index_t k = 0; k < tables_[t].owned; ++k)
        if (!(*st)[t].have[std::size_t(k)])
          gradix::detail::fail(what, ": row ", tables_[t].global_row(k), " of table '", tables_[t].name,
                               "' is in none of the ", ranks, " shard files");
    return [this, st] {
      for (std::size_t t = 0; t < tables_.size(); ++t)
        for (std::size_t q = 0; q < tables_[t].fields.size(); ++q) tables_[t].fields[q].assign((*st)[t].data[q].data());
    };
  }

  communicator* c_;
  std::vector<table_entry> tables_;
  std::vector<gradix::detail::ckpt::field> replicated_;
  std::vector<std::string> names_;
  std::int64_t last_gen_ = 0, prev_gen_ = 0;
  int prev_ranks_ = 0;
  std::string prev_path_;
};

}  // namespace gradix::dist
