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

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
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
  std::printf("%ld words in %zu sentences, a vocabulary of %ld words (seen %d times or more)\n", total,
              sents.size(), long(V), min_count);

  // the model: input and output vectors, rows along axis 0, sparse gradients
  auto Win = gx::param(gx::uniform<float>(gx::dims(V, dim), 1, -0.5f / float(dim), 0.5f / float(dim)), gx::sparse_grad<0>);
  auto Wout = gx::param(gx::tensor<float, gx::shape<dyn, dyn>>(gx::dims(V, dim)), gx::sparse_grad<0>);
  gx::optim::sgd opt({.lr = lr0}, Win, Wout);

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
  make_pairs();
  long const pairs_per_epoch = long(centers.size());
  long const steps = (pairs_per_epoch + B - 1) / B;
  examples::training_log progress(epochs, steps, {"last_loss"}, log);

  // one step over pairs [a, e): the loss expression, backward, SGD
  std::vector<std::int32_t> c, o, cn, n;
  double first_loss = -1, loss_sum = 0;
  long loss_n = 0;
  for (int ep = 1; ep <= epochs; ++ep) {
    if (ep > 1) make_pairs();
    loss_sum = 0;
    loss_n = 0;
    long const epoch_steps = long((centers.size() + std::size_t(B) - 1) / std::size_t(B));  // (subsampling varies)
    for (long s = 0; s < epoch_steps; ++s) {
      std::size_t const a = std::size_t(s) * std::size_t(B), e = std::min(centers.size(), a + std::size_t(B));
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
