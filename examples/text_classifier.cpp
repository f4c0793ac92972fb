// Which file of the `fortunes` package a quote comes from: a bag-of-words classifier,
// embedding_bag (the mean of the quote's word vectors) + a linear layer + cross_entropy,
// trained with lazy Adam (a step touches only the rows of the words its batch holds).
// Quotes are split 80 / 20 per file (seeded); the vocabulary is the training words seen at
// least --min-count times. Prints the held-out accuracy each epoch and, at the end, against
// the majority-class baseline; exits 1 unless it beats the baseline by 15 points.
//
//   build/examples/text_classifier --data DIR [--files a,b,c] [--epochs E] [--dim D]
//                                  [--batch B] [--min-count K] [--log run.csv] [--threads T]
//
// DIR holds fortune files (quotes separated by lines holding one '%'): Debian's `fortunes`
// package installs them in /usr/share/games/fortunes; the tests use the sample in
// tests/data/fortunes.
#include <gradix/gradix.hpp>
#include <gradix/optim.hpp>

#include "training_log.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::index_t;

namespace {
struct doc {
  std::vector<std::int32_t> words;  // vocabulary ids
  std::int64_t label;
};

// lower-case words of letters (and inner apostrophes), two letters or more
std::vector<std::string> tokens(std::string const& text) {
  std::vector<std::string> r;
  std::string w;
  auto flush = [&] {
    while (!w.empty() && w.back() == '\'') w.pop_back();
    if (w.size() >= 2) r.push_back(w);
    w.clear();
  };
  for (char ch : text) {
    unsigned char u = static_cast<unsigned char>(ch);
    if (std::isalpha(u)) w += char(std::tolower(u));
    else if (ch == '\'' && !w.empty()) w += ch;
    else flush();
  }
  flush();
  return r;
}
std::vector<std::string> read_quotes(std::string const& path) {
  std::ifstream in(path);
  std::vector<std::string> r;
  std::string q;
  for (std::string line; std::getline(in, line);) {
    if (line == "%") {
      if (!q.empty()) r.push_back(q);
      q.clear();
    } else {
      q += line + "\n";
    }
  }
  if (!q.empty()) r.push_back(q);
  return r;
}
}  // namespace

int main(int argc, char** argv) {
  std::string const dir = examples::arg(argc, argv, "--data", "");
  auto const files = examples::split(examples::arg(argc, argv, "--files", "computers,politics,science,songs-poems"), ',');
  int const epochs = std::stoi(examples::arg(argc, argv, "--epochs", "12"));
  index_t const dim = std::stol(examples::arg(argc, argv, "--dim", "64"));
  index_t const B = std::stol(examples::arg(argc, argv, "--batch", "32"));
  int const min_count = std::stoi(examples::arg(argc, argv, "--min-count", "2"));
  std::string const log = examples::arg(argc, argv, "--log", "");
  if (int t = std::stoi(examples::arg(argc, argv, "--threads", "0")); t > 0) gx::set_num_threads(t);
  if (dir.empty()) {
    std::fprintf(stderr, "text_classifier: give --data DIR (a folder of fortune files)\n");
    return 2;
  }
  index_t const C = index_t(files.size());

  // quotes per file, a seeded 80 / 20 split per file
  std::vector<std::pair<std::vector<std::string>, std::int64_t>> train_text, test_text;
  std::uint64_t state = 1;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return state >> 33;
  };
  for (index_t c = 0; c < C; ++c) {
    auto q = read_quotes(dir + "/" + files[std::size_t(c)]);
    if (q.empty()) {
      std::fprintf(stderr, "text_classifier: no quotes in %s/%s\n", dir.c_str(), files[std::size_t(c)].c_str());
      return 2;
    }
    for (std::size_t k = q.size(); k > 1; --k) std::swap(q[k - 1], q[next() % k]);
    std::size_t const n_test = q.size() / 5;
    for (std::size_t k = 0; k < q.size(); ++k)
      (k < n_test ? test_text : train_text).push_back({tokens(q[k]), c});
  }
  // the vocabulary: training words seen min_count times or more
  std::map<std::string, int> counts;
  for (auto const& d : train_text)
    for (auto const& w : d.first) ++counts[w];
  std::unordered_map<std::string, std::int32_t> vocab;
  for (auto const& [w, n] : counts)
    if (n >= min_count) vocab.emplace(w, std::int32_t(vocab.size()));
  auto encode = [&](auto const& text) {
    std::vector<doc> r;
    for (auto const& [t, y] : text) {
      doc d{{}, y};
      for (auto const& w : t)
        if (auto it = vocab.find(w); it != vocab.end()) d.words.push_back(it->second);
      r.push_back(std::move(d));
    }
    return r;
  };
  auto train = encode(train_text), test = encode(test_text);
  index_t const V = index_t(vocab.size());
  std::printf("%zu training and %zu held-out quotes from %ld files, %ld words in the vocabulary\n", train.size(),
              test.size(), long(C), long(V));

  // the model
  auto E = gx::param(gx::randn<float>(gx::dims(V, dim), 2, 0.0f, 0.1f), gx::sparse_grad<0>);
  auto W = gx::param(gx::tensor<float, gx::shape<dyn, dyn>>(gx::dims(dim, C)));
  auto b = gx::param(gx::tensor<float, gx::shape<dyn>>(gx::dims(C)));
  gx::init::xavier_uniform(W, 3);
  gx::optim::lazy_adam opt({.lr = 0.01}, E, W, b);

  // a batch: the words of its quotes one after another, each quote's offset, the labels
  std::vector<std::int32_t> words, offsets;
  gx::tensor<std::int64_t, gx::shape<dyn>> labels;
  auto gather_batch = [&](std::vector<doc> const& ds, std::vector<std::size_t> const& order, std::size_t a, std::size_t e) {
    words.clear();
    offsets.clear();
    labels = gx::tensor<std::int64_t, gx::shape<dyn>>(gx::dims(index_t(e - a)));
    for (std::size_t k = a; k < e; ++k) {
      auto const& d = ds[order[k]];
      offsets.push_back(std::int32_t(words.size()));
      words.insert(words.end(), d.words.begin(), d.words.end());
      labels(index_t(k - a)) = d.label;
    }
  };
  // doc-snippet: logits
  auto logits = [&] { return gx::matmul(gx::embedding_bag(E, words, offsets, gx::bag_mode::mean), W) + b; };
  // end doc-snippet
  auto accuracy = [&](std::vector<doc> const& ds) {
    std::vector<std::size_t> all(ds.size());
    for (std::size_t k = 0; k < all.size(); ++k) all[k] = k;
    gather_batch(ds, all, 0, ds.size());
    return double(gx::value(gx::mean(gx::cast<float>(gx::argmax<1>(logits()) == labels))));
  };

  std::vector<std::size_t> order(train.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
  long const steps = long((train.size() + std::size_t(B) - 1) / std::size_t(B));
  examples::training_log progress(epochs, steps, {"test_accuracy"}, log);
  double acc = 0;
  for (int ep = 1; ep <= epochs; ++ep) {
    for (std::size_t k = order.size(); k > 1; --k) std::swap(order[k - 1], order[next() % k]);
    for (long s = 0; s < steps; ++s) {
      std::size_t const a = std::size_t(s) * std::size_t(B), e = std::min(train.size(), a + std::size_t(B));
      gather_batch(train, order, a, e);
      // doc-snippet: step
      opt.zero_grad();
      float loss = gx::backward(gx::cross_entropy(logits(), labels));
      opt.step();
      // end doc-snippet
      progress.step(ep, s, double(loss), long(e - a));
    }
    acc = accuracy(test);
    progress.epoch_end(ep, {acc});
  }
  std::vector<std::size_t> per_class(std::size_t(C), 0);
  for (auto const& d : test) ++per_class[std::size_t(d.label)];
  double const majority = double(*std::max_element(per_class.begin(), per_class.end())) / double(test.size());
  std::printf("held-out accuracy %.1f%%, majority class %.1f%% (%ld classes)\n", 100 * acc, 100 * majority, long(C));
  return acc >= majority + 0.15 ? 0 : 1;
}
