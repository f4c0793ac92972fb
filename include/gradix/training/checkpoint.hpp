#pragma once
/// \file
/// Checkpoints: parameters, tensors and optimizer state saved to one file and loaded back
/// (docs/checkpoint.md).
///
///     gx::checkpoint ck;
///     ck.add("E", E).add("W", W).add("opt", opt);   // references: register once
///     ck.save("run.gxck");                            // after opt.step()
///     ...
///     ck.load("run.gxck");                            // into the same objects
///
/// The format (version 1; little-endian; docs/checkpoint.md):
///
///     magic "GRADIXCK" (8 bytes), u32 version, u32 record count, then per record:
///       u32 name length, the name (UTF-8), u8 element type, u8 layout (0 row-major,
///       1 column-major), u8 rank, u8 0, i64 extents[rank], u64 byte count, the elements
///       (in the layout's storage order)
///     and last u64 FNV-1a 64 of every byte before it.
///
/// `save` writes a temporary file next to the target, flushes it to the disk and renames it
/// over the target, so a crash or a failed write never leaves a half-written checkpoint
/// (the old one stays). `load` reads the whole file and checks the magic, version, checksum,
/// and every record's name, element type, layout and shape against the registered objects
/// before it writes anything: a mismatch is a `gradix::error` that names the record, and
/// nothing is changed. Records must match one to one (a missing or an extra record is an
/// error), as a model's state must.
///
/// Optimizers take part through their `visit_state(f)` (training/optimizers.hpp), which this
/// header does not need: `<gradix/checkpoint.hpp>` includes both.
#include "gradix/api/param.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/layout.hpp"
#include "gradix/core/tensor.hpp"

#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <fcntl.h>
#include <unistd.h>
#define GRADIX_CHECKPOINT_POSIX 1
#endif

namespace gradix {

namespace detail::ckpt {

static_assert(std::endian::native == std::endian::little,
              "gradix: checkpoints are written in little-endian order; this target is big-endian");

inline constexpr char magic[8] = {'G', 'R', 'A', 'D', 'I', 'X', 'C', 'K'};
inline constexpr std::uint32_t format_version = 1;

/// Element type codes of the format.
template <class T>
constexpr std::uint8_t type_code() {
  if constexpr (std::is_same_v<T, float>) return 1;
  else if constexpr (std::is_same_v<T, double>) return 2;
  else if constexpr (std::is_same_v<T, bool>) return 11;
  else if constexpr (std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) == 1) return 3;
  else if constexpr (std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) == 2) return 4;
  else if constexpr (std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) == 4) return 5;
  else if constexpr (std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) == 8) return 6;
  else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T> && sizeof(T) == 1) return 7;
  else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T> && sizeof(T) == 2) return 8;
  else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T> && sizeof(T) == 4) return 9;
  else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T> && sizeof(T) == 8) return 10;
  else if constexpr (std::is_same_v<T, bfloat16>) return 12;
  else if constexpr (std::is_same_v<T, half>) return 13;
  else return 0;
}
inline char const* type_name(std::uint8_t c) {
  static char const* const names[] = {"?",   "f32", "f64", "i8",  "i16",  "i32", "i64",
                                      "u8",  "u16", "u32", "u64", "bool", "bf16", "f16"};
  return c < std::size(names) ? names[c] : "?";
}

inline std::uint64_t fnv1a(unsigned char const* p, std::size_t n, std::uint64_t h = 14695981039346656037ull) {
  for (std::size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

/// One record: what the program has under a name, and how to write and read its bytes.
struct field {
  std::string name;
  std::uint8_t type = 0;
  std::uint8_t layout = 0;
  std::vector<std::int64_t> extents;
  std::function<std::pair<void const*, std::size_t>()> bytes;  // the elements, storage order
  std::function<void(unsigned char const*)> assign;           // from exactly that many bytes
};

inline std::string shape_text(std::vector<std::int64_t> const& e) {
  std::string s = "[";
  for (std::size_t i = 0; i < e.size(); ++i) s += (i ? ", " : "") + std::to_string(e[i]);
  return s + "]";
}

template <class T, class S, class L>
field tensor_field(std::string name, tensor<T, S, L>& t) {
  static_assert(type_code<T>() != 0, "gradix::checkpoint: this element type cannot be saved");
  field f;
  f.name = std::move(name);
  f.type = type_code<T>();
  f.layout = std::is_same_v<L, col_major> ? 1 : 0;
  for (int i = 0; i < int(S::rank); ++i) f.extents.push_back(std::int64_t(t.extent(i)));
  f.bytes = [&t] { return std::pair<void const*, std::size_t>(t.data(), std::size_t(t.size()) * sizeof(T)); };
  f.assign = [&t](unsigned char const* p) {
    if (t.size() > 0) std::memcpy(t.data(), p, std::size_t(t.size()) * sizeof(T));
  };
  return f;
}

template <class T>
field vector_field(std::string name, std::vector<T>& v) {
  static_assert(type_code<T>() != 0, "gradix::checkpoint: this element type cannot be saved");
  field f;
  f.name = std::move(name);
  f.type = type_code<T>();
  f.extents = {std::int64_t(v.size())};
  f.bytes = [&v] { return std::pair<void const*, std::size_t>(v.data(), v.size() * sizeof(T)); };
  f.assign = [&v](unsigned char const* p) {
    if (!v.empty()) std::memcpy(v.data(), p, v.size() * sizeof(T));
  };
  return f;
}

template <class T>
field scalar_field(std::string name, T& x) {
  static_assert(type_code<T>() != 0, "gradix::checkpoint: this element type cannot be saved");
  field f;
  f.name = std::move(name);
  f.type = type_code<T>();
  f.bytes = [&x] { return std::pair<void const*, std::size_t>(&x, sizeof(T)); };
  f.assign = [&x](unsigned char const* p) { std::memcpy(&x, p, sizeof(T)); };
  return f;
}

/// A half-width parameter's count of rounded updates (the counter its stochastic rounding
/// draws from), saved so that a resumed run draws the bits an uninterrupted one would.
template <class P>
field rounding_field(std::string name, P& p) {
  field f;
  f.name = std::move(name);
  f.type = type_code<std::uint64_t>();
  auto held = std::make_shared<std::uint64_t>(0);
  f.bytes = [&p, held] {
    *held = p.rounded_updates();
    return std::pair<void const*, std::size_t>(held.get(), sizeof(std::uint64_t));
  };
  f.assign = [&p](unsigned char const* b) {
    std::uint64_t n = 0;
    std::memcpy(&n, b, sizeof n);
    p.set_rounded_updates(n);
  };
  return f;
}

template <class X>
struct is_param : std::false_type {};
template <class T, class S, class L, class G>
struct is_param<parameter<T, S, L, G>> : std::true_type {};
template <class X>
struct is_optional : std::false_type {};
template <class X>
struct is_optional<std::optional<X>> : std::true_type {};
template <class X>
struct is_vector : std::false_type {};
template <class X, class A>
struct is_vector<std::vector<X, A>> : std::true_type {};

template <class O>
concept has_state = requires(O& o) { o.visit_state([](std::string const&, auto&) {}); };

/// The fields of one piece of an optimizer's state (called by visit_state).
struct state_collector {
  std::string prefix;
  std::vector<field>* out;
  template <class X>
  void operator()(std::string const& name, X& x) const {
    if constexpr (is_tensor_v<X>) {
      out->push_back(tensor_field(prefix + name, x));
    } else if constexpr (is_optional<X>::value) {
      if (x) (*this)(name, *x);  // absent (no momentum): nothing to keep
    } else if constexpr (is_vector<X>::value) {
      out->push_back(vector_field(prefix + name, x));
    } else {
      out->push_back(scalar_field(prefix + name, x));
    }
  }
};

struct writer {
  std::string buf;
  template <class T>
  void put(T x) {
    char b[sizeof(T)];
    std::memcpy(b, &x, sizeof(T));
    buf.append(b, sizeof(T));
  }
};

struct reader {
  std::string const& buf;
  std::string const& path;
  std::size_t at = 0;
  std::size_t end;  // where the checksum starts
  void need(std::size_t n, char const* what) {
    if (n > end - at)
      fail("gradix::checkpoint::load: ", path, ": the file ends inside ", what, " (truncated or damaged)");
  }
  template <class T>
  T get(char const* what) {
    need(sizeof(T), what);
    T x;
    std::memcpy(&x, buf.data() + at, sizeof(T));
    at += sizeof(T);
    return x;
  }
};

inline std::string errno_text(int e) { return std::strerror(e); }

inline std::string read_all(std::string const& path, char const* what) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail(what, ": cannot open ", path, ": ", errno_text(errno));
  std::string buf;
  char chunk[1 << 16];
  std::size_t got;
  while ((got = std::fread(chunk, 1, sizeof chunk, f)) > 0) buf.append(chunk, got);
  bool const bad = std::ferror(f) != 0;
  std::fclose(f);
  if (bad) fail(what, ": cannot read ", path);
  return buf;
}

/// One record of a file: its header, and where its bytes are.
struct record {
  std::string name;
  std::uint8_t type = 0, layout = 0;
  std::vector<std::int64_t> extents;
  std::size_t offset = 0, bytes = 0;
};
/// A whole checkpoint file, checked (magic, version, checksum, record framing).
struct file {
  std::string buf;
  std::vector<record> records;
  unsigned char const* data(record const& r) const { return reinterpret_cast<unsigned char const*>(buf.data()) + r.offset; }
};
inline file parse_file(std::string const& path, char const* what) {
  file out;
  out.buf = read_all(path, what);
  std::string const& buf = out.buf;
  if (buf.size() < 8 + 4 + 4 + 8 || std::memcmp(buf.data(), magic, 8) != 0)
    fail(what, ": ", path, " is not a gradix checkpoint (no GRADIXCK header)");
  std::uint64_t stored;
  std::memcpy(&stored, buf.data() + buf.size() - 8, 8);
  reader r{buf, path, 8, buf.size() - 8};
  auto const version = r.get<std::uint32_t>("the header");
  if (version != format_version)
    fail(what, ": ", path, ": format version ", version, "; this gradix reads version ", format_version);
  if (fnv1a(reinterpret_cast<unsigned char const*>(buf.data()), buf.size() - 8) != stored)
    fail(what, ": ", path, ": the checksum does not match (the file is damaged or truncated)");
  auto const count = r.get<std::uint32_t>("the header");
  for (std::uint32_t k = 0; k < count; ++k) {
    record rec;
    auto const len = r.get<std::uint32_t>("a record's name");
    r.need(len, "a record's name");
    rec.name.assign(buf.data() + r.at, len);
    r.at += len;
    rec.type = r.get<std::uint8_t>("a record's header");
    rec.layout = r.get<std::uint8_t>("a record's header");
    auto const rank = r.get<std::uint8_t>("a record's header");
    (void)r.get<std::uint8_t>("a record's header");
    rec.extents.resize(rank);
    for (auto& e : rec.extents) e = r.get<std::int64_t>("a record's shape");
    auto const n = r.get<std::uint64_t>("a record's size");
    r.need(std::size_t(n), "a record's data");
    rec.offset = r.at;
    rec.bytes = std::size_t(n);
    r.at += std::size_t(n);
    out.records.push_back(std::move(rec));
  }
  if (r.at != r.end) fail(what, ": ", path, ": bytes after the last record (damaged)");
  return out;
}

}  // namespace detail::ckpt

/// Named state saved to and loaded from one file: parameter values, tensors and optimizer
/// state (docs/checkpoint.md). A checkpoint holds references: the objects must outlive it,
/// and each is registered once, before save or load.
class checkpoint {
 public:
  /// Registers a parameter (its value), a tensor, or an optimizer of gradix/optim.hpp (its
  /// options, step count and per-parameter state) under `name`. Names must be unique;
  /// an optimizer's records are `name.lr`, `name.m.0`, ... Returns *this.
  template <class X>
  checkpoint& add(std::string const& name, X& x) {
    if (name.empty()) detail::fail("gradix::checkpoint::add: an empty name");
    std::vector<detail::ckpt::field> fs;
    if constexpr (detail::ckpt::is_param<X>::value) {
      fs.push_back(detail::ckpt::tensor_field(name, x.value()));
      if constexpr (is_half_width_v<typename X::value_type>)
        fs.push_back(detail::ckpt::rounding_field(name + ".rounded_updates", x));
    } else if constexpr (is_tensor_v<X>) {
      fs.push_back(detail::ckpt::tensor_field(name, x));
    } else if constexpr (detail::ckpt::has_state<X>) {
      x.visit_state(detail::ckpt::state_collector{name + ".", &fs});
    } else {
      static_assert(detail::ckpt::has_state<X>,
                    "gradix::checkpoint::add: takes a gx::param, a gx::tensor or an optimizer of gradix/optim.hpp");
    }
    for (auto& f : fs) {
      if (index_.count(f.name)) detail::fail("gradix::checkpoint::add: the name '", f.name, "' is registered twice");
      index_.emplace(f.name, fields_.size());
      fields_.push_back(std::move(f));
    }
    return *this;
  }

  /// Registers a record made by hand (gradix::dist::checkpoint builds its files this way).
  checkpoint& add_field(detail::ckpt::field f) {
    if (f.name.empty()) detail::fail("gradix::checkpoint::add: an empty name");
    if (index_.count(f.name)) detail::fail("gradix::checkpoint::add: the name '", f.name, "' is registered twice");
    index_.emplace(f.name, fields_.size());
    fields_.push_back(std::move(f));
    return *this;
  }

  /// Writes every registered object to `path`: a temporary file next to it, flushed to the
  /// disk, then renamed over `path`. On failure throws `gradix::error` and leaves `path` as it
  /// was (the temporary file is removed).
  void save(std::string const& path) const {
    detail::ckpt::writer w;
    w.buf.append(detail::ckpt::magic, 8);
    w.put(detail::ckpt::format_version);
    w.put(std::uint32_t(fields_.size()));
    for (auto const& f : fields_) {
      w.put(std::uint32_t(f.name.size()));
      w.buf += f.name;
      w.put(f.type);
      w.put(f.layout);
      w.put(std::uint8_t(f.extents.size()));
      w.put(std::uint8_t(0));
      for (auto e : f.extents) w.put(e);
      auto [p, n] = f.bytes();
      w.put(std::uint64_t(n));
      w.buf.append(static_cast<char const*>(p), n);
    }
    w.put(detail::ckpt::fnv1a(reinterpret_cast<unsigned char const*>(w.buf.data()), w.buf.size()));
    write_atomically(path, w.buf);
  }

  /// Reads `path` and, once every check has passed, copies its records into the registered
  /// objects. Throws `gradix::error` (and changes nothing) when the file is not a gradix
  /// checkpoint, is of a newer format, fails its checksum, or when a record is missing, extra,
  /// or differs in element type, layout or shape.
  void load(std::string const& path) { prepare_load(path)(); }

  /// load() in two steps: every read and check happens here (and may throw, changing
  /// nothing); the returned function copies the records in and cannot fail. For loads that
  /// must succeed everywhere or nowhere (gradix::dist::checkpoint).
  std::function<void()> prepare_load(std::string const& path) {
    auto file = std::make_shared<detail::ckpt::file>(detail::ckpt::parse_file(path, "gradix::checkpoint::load"));
    std::vector<std::pair<std::size_t, std::size_t>> plan;  // (field, byte offset)
    std::vector<bool> seen(fields_.size(), false);
    for (auto const& rec : file->records) {
      auto const& name = rec.name;
      auto it = index_.find(name);
      if (it == index_.end())
        detail::fail("gradix::checkpoint::load: ", path, ": record '", name,
             "' is not registered in this checkpoint (the model differs from the one saved)");
      auto const& f = fields_[it->second];
      if (seen[it->second]) detail::fail("gradix::checkpoint::load: ", path, ": record '", name, "' appears twice");
      seen[it->second] = true;
      if (rec.type != f.type)
        detail::fail("gradix::checkpoint::load: ", path, ": record '", name, "' holds ", detail::ckpt::type_name(rec.type),
             " elements, the program's object ", detail::ckpt::type_name(f.type));
      if (rec.extents != f.extents)
        detail::fail("gradix::checkpoint::load: ", path, ": record '", name, "' has shape ",
             detail::ckpt::shape_text(rec.extents), ", the program's object ", detail::ckpt::shape_text(f.extents));
      if (rec.layout != f.layout)
        detail::fail("gradix::checkpoint::load: ", path, ": record '", name, "' is ", rec.layout ? "column" : "row",
             "-major, the program's object ", f.layout ? "column" : "row", "-major");
      if (rec.bytes != f.bytes().second)
        detail::fail("gradix::checkpoint::load: ", path, ": record '", name, "' has ", rec.bytes,
             " bytes of data, expected ", f.bytes().second);
      plan.emplace_back(it->second, rec.offset);
    }
    for (std::size_t i = 0; i < fields_.size(); ++i)
      if (!seen[i])
        detail::fail("gradix::checkpoint::load: ", path, ": no record '", fields_[i].name, "' (the model differs from the one saved)");
    // every check passed: nothing below can fail
    return [this, file, plan = std::move(plan)] {
      for (auto [i, at] : plan) fields_[i].assign(reinterpret_cast<unsigned char const*>(file->buf.data()) + at);
    };
  }

  /// The registered records (name, element type, shape, and how to read and write their
  /// bytes), in order.
  std::vector<detail::ckpt::field> const& fields() const { return fields_; }

  /// The registered record names, in order.
  std::vector<std::string> names() const {
    std::vector<std::string> r;
    for (auto const& f : fields_) r.push_back(f.name);
    return r;
  }

 private:
  public:
  /// Writes `data` to `path` through a temporary file, flushed, then renamed (save's method).
  static void write_atomically(std::string const& path, std::string const& data) {
#if defined(GRADIX_CHECKPOINT_POSIX)
    std::string const tmp = path + ".tmp." + std::to_string(long(::getpid()));
#else
    std::string const tmp = path + ".tmp";
#endif
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) detail::fail("gradix::checkpoint::save: cannot create ", tmp, ": ", detail::ckpt::errno_text(errno));
    bool ok = std::fwrite(data.data(), 1, data.size(), f) == data.size();
    int err = ok ? 0 : errno;
    ok = ok && std::fflush(f) == 0;
    if (!ok && !err) err = errno;
#if defined(GRADIX_CHECKPOINT_POSIX)
    ok = ok && ::fsync(::fileno(f)) == 0;
    if (!ok && !err) err = errno;
#endif
    ok = (std::fclose(f) == 0) && ok;
    if (!ok && !err) err = errno;
    if (!ok) {
      std::remove(tmp.c_str());
      detail::fail("gradix::checkpoint::save: writing ", tmp, " failed: ", detail::ckpt::errno_text(err), " (", path,
           " is unchanged)");
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      err = errno;
      std::remove(tmp.c_str());
      detail::fail("gradix::checkpoint::save: cannot rename ", tmp, " to ", path, ": ", detail::ckpt::errno_text(err));
    }
#if defined(GRADIX_CHECKPOINT_POSIX)
    // make the rename itself durable: flush the directory entry
    auto const slash = path.find_last_of('/');
    std::string const dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    int const d = ::open(dir.c_str(), O_RDONLY);
    if (d >= 0) {
      (void)::fsync(d);
      ::close(d);
    }
#endif
  }


 private:
  std::vector<detail::ckpt::field> fields_;
  std::unordered_map<std::string, std::size_t> index_;
};

/// `ck.save(path)`.
inline void save(std::string const& path, checkpoint const& ck) { ck.save(path); }
/// `ck.load(path)`.
inline void load(std::string const& path, checkpoint& ck) { ck.load(path); }

}  // namespace gradix
