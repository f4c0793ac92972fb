// Skip-gram with negative sampling (word2vec) on the glosses of WordNet: each word predicts
// the words around it, against `--negatives` words drawn from the unigram distribution to the
// power 3/4. One step is one expression over a batch of (word, context) pairs, its gradients
// by backward into two sparse-gradient tables (a step touches only the rows of its words),
// and an SGD step with a linearly decaying rate, as the original word2vec. Frequent words are
// subsampled. At the end it prints the nearest neighbours (cosine) of a few words.
//
//   build/examples/word2vec --wordnet DIR | --text FILE [--epochs E] [--dim D] [--window W]
//       [--negatives K] [--batch B] [--min-count M] [--lr A] [--words w1,w2,..]
//       [--log run.csv] [--threads T]
//
// DIR is WordNet's dict folder (Debian: apt-get install wordnet-base, which installs it in
// /usr/share/wordnet); the glosses of data.noun, data.verb, data.adj and data.adv are the
// corpus (1.4 million words). FILE is plain text, one sentence per line (the tests use
// tests/data/glosses.txt, a sample). Exits 1 unless the loss fell by a fifth.
#include <gradix/gradix.hpp>
#include <gradix/optim.hpp>

#include "training_log.hpp"

#if defined(GRADIX_EXAMPLE_MPI)
#include <gradix/dist.hpp>
#endif

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::index_t;

namespace {
// lower-case words of letters, one sentence
std::vector<std::string> words_of(std::string const& text) {
  std::vector<std::string> r;
  std::string w;
  for (char ch : text) {
    unsigned char u = static_cast<unsigned char>(ch);
    if (std::isalpha(u)) {
      w += char(std::tolower(u));
    } else if (!w.empty()) {
      r.push_back(w);
      w.clear();
    }
  }
  if (!w.empty()) r.push_back(w);
  return r;
}
// sentences: the glosses of WordNet's data files (after "| " on each synset line), or lines
std::vector<std::vector<std::string>> read_corpus(std::string const& wordnet, std::string const& text) {
  std::vector<std::vector<std::string>> r;
  auto add_lines = [&](std::string const& path, bool gloss) {
    std::ifstream in(path);
    if (!in) {
      std::fprintf(stderr, "word2vec: cannot read %s\n", path.c_str());
      return false;
    }
    for (std::string line; std::getline(in, line);) {
      if (gloss) {
        if (line.empty() || line[0] == ' ') continue;  // the license header
        auto bar = line.find("| ");
        if (bar == std::string::npos) continue;
        line = line.substr(bar + 2);
      }
      auto w = words_of(line);
      if (w.size() >= 2) r.push_back(std::move(w));
    }
    return true;
  };
  if (!wordnet.empty()) {
    for (char const* f : {"data.noun", "data.verb", "data.adj", "data.adv"})
      if (!add_lines(wordnet + "/" + f, true)) return {};
  } else if (!add_lines(text, false)) {
    return {};
  }
  return r;
}
struct rng {
  std::uint64_t s;
  std::uint64_t next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return s >> 33;
  }
  double uniform() { return double(next()) / 2147483648.0; }
};
}  // namespace

int main(int argc, char** argv) {
  std::string const wordnet = examples::arg(argc, argv, "--wordnet", "");
  std::string const text = examples::arg(argc, argv, "--text", "");
  int const epochs = std::stoi(examples::arg(argc, argv, "--epochs", "3"));
  index_t const dim = std::stol(examples::arg(argc, argv, "--dim", "64"));
  int const window = std::stoi(examples::arg(argc, argv, "--window", "4"));
  index_t const K = std::stol(examples::arg(argc, argv, "--negatives", "5"));
  index_t const B = std::stol(examples::arg(argc, argv, "--batch", "512"));
  int const min_count = std::stoi(examples::arg(argc, argv, "--min-count", "5"));
  double const lr0 = std::stod(examples::arg(argc, argv, "--lr", "0.05"));
  auto const queries = examples::split(examples::arg(argc, argv, "--words", "king,water,music,red,doctor,dog,run"), ',');
  std::string const log = examples::arg(argc, argv, "--log", "");
  if (int t = std::stoi(examples::arg(argc, argv, "--threads", "0")); t > 0) gx::set_num_threads(t);
  int const shards = std::stoi(examples::arg(argc, argv, "--shards", "0"));
  index_t const block = std::stol(examples::arg(argc, argv, "--block", "64"));
#if defined(GRADIX_EXAMPLE_MPI)
  std::optional<gx::dist::environment> env;
  std::optional<gx::dist::communicator> world;
  if (shards > 0) {
    env.emplace(argc, argv);
    world.emplace();
    if (world->size() != shards) {
      if (world->rank() == 0)
        std::fprintf(stderr, "word2vec: --shards %d needs as many ranks (mpirun -np %d); this run has %d\n", shards,
                     shards, world->size());
      return 2;
    }
  }
  bool const rank0 = !world || world->rank() == 0;
#else
  if (shards > 0) {
    std::fprintf(stderr, "word2vec: --shards needs a build with MPI (Debian: libopenmpi-dev)\n");
    return 2;
  }
  bool const rank0 = true;
#endif
  if (wordnet.empty() == text.empty()) {
    std::fprintf(stderr, "word2vec: give --wordnet DIR or --text FILE\n");
    return 2;
  }
  auto const corpus = read_corpus(wordnet, text);
  if (corpus.empty()) return 2;

  // the vocabulary (words seen min_count times), by decreasing count
  std::unordered_map<std::string, long> counts;
  long total = 0;
  for (auto const& s : corpus)
    for (auto const& w : s) ++counts[w], ++total;
  std::vector<std::pair<long, std::string>> by_count;
  for (auto const& [w, n] : counts)
    if (n >= min_count) by_count.push_back({n, w});
  std::sort(by_count.begin(), by_count.end(), [](auto const& a, auto const& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::unordered_map<std::string, std::int32_t> id;
  std::vector<std::string> word;
  std::vector<double> freq;
  for (auto const& [n, w] : by_count) {
    id.emplace(w, std::int32_t(word.size()));
    word.push_back(w);
    freq.push_back(double(n) / double(total));
  }
  index_t const V = index_t(word.size());
  // sentences as ids; the negative-sampling table (unigram^(3/4))
  std::vector<std::vector<std::int32_t>> sents;
  for (auto const& s : corpus) {
    std::vector<std::int32_t> ids;
    for (auto const& w : s)
      if (auto it = id.find(w); it != id.end()) ids.push_back(it->second);
    if (ids.size() >= 2) sents.push_back(std::move(ids));
  }
  std::vector<std::int32_t> table;
  {
    double z = 0;
    for (double f : freq) z += std::pow(f, 0.75);
    for (index_t v = 0; v < V; ++v) {
      long n = long(std::lround(std::pow(freq[std::size_t(v)], 0.75) / z * 2e6));
      for (long k = 0; k < std::max(1L, n); ++k) table.push_back(std::int32_t(v));
    }
  }
  if (rank0)
    std::printf("%ld words in %zu sentences, a vocabulary of %ld words (seen %d times or more)\n", total,
                sents.size(), long(V), min_count);

  // pairs of one epoch: subsampled words, a random window shrink per word (word2vec's)
  rng r{7};
  std::vector<std::int32_t> centers, contexts;
  auto make_pairs = [&] {
    centers.clear();
    contexts.clear();
    std::vector<std::int32_t> kept;
    for (auto const& s : sents) {
      kept.clear();
      for (std::int32_t w : s) {
        double f = freq[std::size_t(w)], keep = (std::sqrt(f / 1e-3) + 1) * 1e-3 / f;
        if (keep >= 1 || r.uniform() < keep) kept.push_back(w);
      }
      for (std::size_t i = 0; i < kept.size(); ++i) {
        int const b = 1 + int(r.next() % std::uint64_t(window));
        for (int d = -b; d <= b; ++d) {
          long j = long(i) + d;
          if (d == 0 || j < 0 || j >= long(kept.size())) continue;
          centers.push_back(kept[i]);
          contexts.push_back(kept[std::size_t(j)]);
        }
      }
    }
    for (std::size_t k = centers.size(); k > 1; --k) {
      std::size_t q = r.next() % k;
      std::swap(centers[k - 1], centers[q]);
      std::swap(contexts[k - 1], contexts[q]);
    }
  };
  // the pairs [a, e) of a step and their negatives: c, o (nb each), cn, n (nb K each)
  std::vector<std::int32_t> c, o, cn, n;
  auto draw_step = [&](std::size_t a, std::size_t e) {
    index_t const nb = index_t(e - a);
    c.assign(centers.begin() + long(a), centers.begin() + long(e));
    o.assign(contexts.begin() + long(a), contexts.begin() + long(e));
    cn.resize(std::size_t(nb * K));
    n.resize(std::size_t(nb * K));
    for (index_t i = 0; i < nb; ++i)
      for (index_t k = 0; k < K; ++k) {
        cn[std::size_t(i * K + k)] = c[std::size_t(i)];
        n[std::size_t(i * K + k)] = table[r.next() % table.size()];
      }
    return nb;
  };
#if defined(GRADIX_EXAMPLE_MPI)
  if (world) {
    // the model: both tables sharded by rows (modulo placement); SGD on each rank's rows
    auto init_in = [&](index_t id, std::span<float> row) {  // uniform in +-0.5/dim, from (id, x) only
      for (std::size_t x = 0; x < row.size(); ++x) {
        rng h{std::uint64_t(id) * 1000003u + x};
        h.next();
        row[x] = float((h.uniform() - 0.5) / double(dim));
      }
    };
    gx::dist::sharded_table<float> Win(*world, V, dim, gx::dist::placement::modulo, init_in);
    gx::dist::sharded_table<float> Wout(*world, V, dim, gx::dist::placement::modulo);
    gx::optim::sgd opt({.lr = lr0}, Win.local(), Wout.local());
    make_pairs();
    long const steps = (long(centers.size()) + B - 1) / B;
    std::optional<examples::training_log> progress;
    if (rank0) progress.emplace(epochs, steps, std::vector<std::string>{"last_loss"}, log);
    double first_loss = -1, loss_sum = 0;
    long loss_n = 0;
    std::vector<std::int32_t> in_ids, out_ids;
    std::vector<index_t> offsets;
    world->reset_traffic();
    for (int ep = 1; ep <= epochs; ++ep) {
      if (ep > 1) make_pairs();
      loss_sum = 0;
      loss_n = 0;
      long const epoch_steps = long((centers.size() + std::size_t(B) - 1) / std::size_t(B));
      for (long s = 0; s < epoch_steps; ++s) {
        std::size_t const a = std::size_t(s) * std::size_t(B), e = std::min(centers.size(), a + std::size_t(B));
        index_t const nb = draw_step(a, e);
        double const progress_frac = (double(ep - 1) * double(steps) + double(s)) / (double(epochs) * double(steps));
        opt.options().lr = lr0 * std::max(1e-4, 1.0 - progress_frac) * double(nb);
        // doc-snippet: sharded-step
        gx::dist::block_split split(*world, nb, block);
        // this rank's blocks: per block its centers then their copies for the negatives (Win),
        // its contexts then the negatives (Wout)
        in_ids.clear();
        out_ids.clear();
        offsets.assign(1, 0);
        for (index_t j = split.first_block(); j < split.end_block(); ++j) {
          index_t const lo = split.block_begin(j), hi = split.block_end(j);
          in_ids.insert(in_ids.end(), c.begin() + lo, c.begin() + hi);
          in_ids.insert(in_ids.end(), cn.begin() + lo * K, cn.begin() + hi * K);
          out_ids.insert(out_ids.end(), o.begin() + lo, o.begin() + hi);
          out_ids.insert(out_ids.end(), n.begin() + lo * K, n.begin() + hi * K);
          offsets.push_back(index_t(in_ids.size()));
        }
        auto in = Win.fetch(in_ids, offsets, split);
        auto out = Wout.fetch(out_ids, offsets, split);
        std::vector<double> block_losses;
        for (index_t j = split.first_block(); j < split.end_block(); ++j) {
          std::size_t const m = std::size_t(split.block_end(j) - split.block_begin(j));
          auto ci = in.block(j), oi = out.block(j);
          auto pos = gx::sum<1>(gx::gather<0>(in.rows(), ci.first(m)) * gx::gather<0>(out.rows(), oi.first(m)));
          auto neg = gx::sum<1>(gx::gather<0>(in.rows(), ci.subspan(m)) * gx::gather<0>(out.rows(), oi.subspan(m)));
          block_losses.push_back(
              gx::backward(-(gx::sum(gx::log_sigmoid(pos)) + gx::sum(gx::log_sigmoid(-neg))) / float(nb)));
        }
        Win.push(in);
        Wout.push(out);
        opt.step();
        opt.zero_grad();
        double const loss = gx::dist::ordered_sum(*world, split, block_losses);
        // end doc-snippet
        if (first_loss < 0) first_loss = loss;
        loss_sum += loss;
        ++loss_n;
        if (progress) progress->step(ep, std::min(s, steps - 1), loss, long(nb));
      }
      if (progress) progress->epoch_end(ep, {loss_sum / double(loss_n)});
    }
    double const last_loss = loss_sum / double(loss_n);
    auto const& t = world->traffic();
    if (rank0)
      std::printf("rank 0 sent %.1f KiB in %llu messages per step (%d ranks, %ld pairs per step)\n",
                  double(t.bytes_sent) / 1024.0 / double(epochs * steps), (unsigned long long)(t.messages_sent / std::uint64_t(epochs * steps)),
                  world->size(), long(B));
    // nearest neighbours: each rank scores its own rows, rank 0 merges the ranks' best 9
    auto const& local = Win.local().value();
    std::vector<float> norms(std::size_t(Win.owned()));
    for (index_t k = 0; k < Win.owned(); ++k) {
      double s2 = 0;
      for (index_t x = 0; x < dim; ++x) s2 += double(local(k, x)) * double(local(k, x));
      norms[std::size_t(k)] = float(std::sqrt(s2)) + 1e-8f;
    }
    for (auto const& q : queries) {
      auto it = id.find(q);
      if (it == id.end()) {
        if (rank0) std::printf("%-8s (not in the vocabulary)\n", q.c_str());
        continue;
      }
      std::vector<std::int32_t> one = {it->second};
      auto const qv = Win.read_rows(one);
      std::vector<std::pair<double, std::int64_t>> mine;
      for (index_t k = 0; k < Win.owned(); ++k) {
        double dot = 0;
        for (index_t x = 0; x < dim; ++x) dot += double(local(k, x)) * double(qv(0, x));
        mine.push_back({dot / norms[std::size_t(k)], Win.global_row(k)});
      }
      auto better = [](auto const& x, auto const& y) { return x.first != y.first ? x.first > y.first : x.second < y.second; };
      std::size_t const top = std::min<std::size_t>(9, mine.size());
      std::partial_sort(mine.begin(), mine.begin() + long(top), mine.end(), better);
      std::vector<double> flat(18, -std::numeric_limits<double>::infinity());
      for (std::size_t k = 0; k < top; ++k) flat[2 * k] = mine[k].first, flat[2 * k + 1] = double(mine[k].second);
      auto const all = world->allgather(std::span<double const>(flat), "word2vec neighbours");
      if (!rank0) continue;
      std::vector<std::pair<double, std::int64_t>> best;
      for (std::size_t k = 0; k < all.size(); k += 2)
        if (all[k] > -std::numeric_limits<double>::infinity()) best.push_back({all[k], std::int64_t(all[k + 1])});
      std::sort(best.begin(), best.end(), better);
      std::printf("%-8s", q.c_str());
      int shown = 0;
      for (auto const& [sim, w] : best)
        if (w != it->second && shown < 8) {
          std::printf(" %s", word[std::size_t(w)].c_str());
          ++shown;
        }
      std::printf("\n");
    }
    if (rank0)
      std::printf("loss %.4f at the first step, %.4f over the last epoch (its bits: %a)\n", first_loss, last_loss,
                  last_loss);
    return last_loss <= 0.8 * first_loss ? 0 : 1;
  }
#endif

  // the model: input and output vectors, rows along axis 0, sparse gradients
  auto Win = gx::param(gx::uniform<float>(gx::dims(V, dim), 1, -0.5f / float(dim), 0.5f / float(dim)), gx::sparse_grad<0>);
  auto Wout = gx::param(gx::tensor<float, gx::shape<dyn, dyn>>(gx::dims(V, dim)), gx::sparse_grad<0>);
  gx::optim::sgd opt({.lr = lr0}, Win, Wout);

  make_pairs();
  long const pairs_per_epoch = long(centers.size());
  long const steps = (pairs_per_epoch + B - 1) / B;
  examples::training_log progress(epochs, steps, {"last_loss"}, log);

  // one step over pairs [a, e): the loss expression, backward, SGD
  double first_loss = -1, loss_sum = 0;
  long loss_n = 0;
  for (int ep = 1; ep <= epochs; ++ep) {
    if (ep > 1) make_pairs();
    loss_sum = 0;
    loss_n = 0;
    long const epoch_steps = long((centers.size() + std::size_t(B) - 1) / std::size_t(B));  // (subsampling varies)
    for (long s = 0; s < epoch_steps; ++s) {
      std::size_t const a = std::size_t(s) * std::size_t(B), e = std::min(centers.size(), a + std::size_t(B));
      index_t const nb = draw_step(a, e);
      double const progress_frac = (double(ep - 1) * double(steps) + double(s)) / (double(epochs) * double(steps));
      opt.options().lr = lr0 * std::max(1e-4, 1.0 - progress_frac) * double(nb);  // the loss is a mean
      // doc-snippet: step
      auto pos = gx::sum<1>(gx::gather<0>(Win, c) * gx::gather<0>(Wout, o));
      auto neg = gx::sum<1>(gx::gather<0>(Win, cn) * gx::gather<0>(Wout, n));
      opt.zero_grad();
      float loss = gx::backward(-(gx::sum(gx::log_sigmoid(pos)) + gx::sum(gx::log_sigmoid(-neg))) / float(nb));
      opt.step();
      // end doc-snippet
      if (first_loss < 0) first_loss = loss;
      loss_sum += loss;
      ++loss_n;
      progress.step(ep, std::min(s, steps - 1), double(loss), long(nb));
    }
    progress.epoch_end(ep, {loss_sum / double(loss_n)});
  }
  double const last_loss = loss_sum / double(loss_n);

  // nearest neighbours by cosine: sims = (Win q) / (|Win rows| |q|)
  auto norms = gx::eval(gx::sqrt(gx::sum<1>(Win * Win)) + 1e-8f);
  for (auto const& q : queries) {
    auto it = id.find(q);
    if (it == id.end()) {
      std::printf("%-8s (not in the vocabulary)\n", q.c_str());
      continue;
    }
    std::vector<std::int32_t> one = {it->second};
    auto sims = gx::eval(gx::matmul(Win.value(), gx::select<0>(gx::gather<0>(Win, one), 0)) / norms);
    std::vector<index_t> best;
    for (index_t v = 0; v < V; ++v) best.push_back(v);
    std::partial_sort(best.begin(), best.begin() + std::min<index_t>(9, V), best.end(),
                      [&](index_t x, index_t y) { return sims(x) > sims(y); });
    std::printf("%-8s", q.c_str());
    for (index_t k = 0, shown = 0; k < std::min<index_t>(9, V) && shown < 8; ++k)
      if (best[std::size_t(k)] != it->second) {
        std::printf(" %s", word[std::size_t(best[std::size_t(k)])].c_str());
        ++shown;
      }
    std::printf("\n");
  }
  std::printf("loss %.4f at the first step, %.4f over the last epoch\n", first_loss, last_loss);
  return last_loss <= 0.8 * first_loss ? 0 : 1;
}
