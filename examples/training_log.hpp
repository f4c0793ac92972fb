#pragma once
// Progress output and a CSV log for the training examples (not part of gradix).
//
// On a terminal, a bar redrawn in place at most ten times a second:
//   epoch 3/10 [##########..........] 51%  loss 0.4213  81.2k ex/s  ETA 0:07
// and one line per epoch. Not on a terminal (a pipe, a file, the tests), only the per-epoch
// lines. With a CSV path, one row per epoch:
//   epoch,examples,seconds,examples_per_s,train_loss,<metric names...>
// which tools/plot_log.py draws. Also the examples' command-line helpers and the byte corpus
// of the character-level language models (transformer, char_rnn).
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

namespace examples {

class training_log {
 public:
  /// epochs and steps per epoch (for the bar and the ETA); metric names for the CSV header;
  /// csv: a path, or empty for no log.
  training_log(int epochs, long steps_per_epoch, std::vector<std::string> metrics, std::string const& csv)
      : epochs_(epochs), steps_(steps_per_epoch), metrics_(std::move(metrics)), tty_(isatty(fileno(stdout)) != 0) {
    if (!csv.empty()) {
      csv_ = std::fopen(csv.c_str(), "w");
      if (!csv_) {
        std::fprintf(stderr, "cannot write %s\n", csv.c_str());
      } else {
        std::fprintf(csv_, "epoch,examples,seconds,examples_per_s,train_loss");
        for (auto const& m : metrics_) std::fprintf(csv_, ",%s", m.c_str());
        std::fprintf(csv_, "\n");
      }
    }
    start_ = last_draw_ = clock::now();
  }
  training_log(training_log const&) = delete;
  training_log& operator=(training_log const&) = delete;
  ~training_log() {
    if (csv_) std::fclose(csv_);
  }

  /// After step `step` (from 0) of epoch `epoch` (from 1): the step's mean loss and the
  /// number of examples it used.
  void step(int epoch, long step, double loss, long examples) {
    examples_ += examples;
    epoch_examples_ += examples;
    loss_sum_ += loss * double(examples);
    if (!tty_) return;
    auto now = clock::now();
    if (step + 1 < steps_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    double const el = seconds(now);
    double const done = double(epoch - 1) + double(step + 1) / double(steps_);
    double const eta = done > 0 ? el * (double(epochs_) - done) / done : 0;
    int const width = 20, fill = int(width * double(step + 1) / double(steps_));
    std::printf("\repoch %d/%d [", epoch, epochs_);
    for (int k = 0; k < width; ++k) std::putchar(k < fill ? '#' : '.');
    std::printf("] %3d%%  loss %.4f  %s ex/s  ETA %d:%02d   ", int(100.0 * double(step + 1) / double(steps_)), loss,
                rate(double(examples_) / (el > 0 ? el : 1e-9)).c_str(), int(eta) / 60, int(eta) % 60);
    std::fflush(stdout);
  }
  /// At the end of an epoch: prints its line and writes its CSV row; values: one per metric.
  void epoch_end(int epoch, std::vector<double> const& values) {
    double const el = seconds(clock::now());
    double const train = epoch_examples_ > 0 ? loss_sum_ / double(epoch_examples_) : 0;
    if (tty_) std::printf("\r%*s\r", 100, "");
    std::printf("epoch %d/%d  train loss %.4f", epoch, epochs_, train);
    for (std::size_t k = 0; k < metrics_.size() && k < values.size(); ++k)
      std::printf("  %s %.4f", metrics_[k].c_str(), values[k]);
    std::printf("  %s ex/s  %.1f s\n", rate(double(examples_) / (el > 0 ? el : 1e-9)).c_str(), el);
    std::fflush(stdout);
    if (csv_) {
      std::fprintf(csv_, "%d,%ld,%.3f,%.1f,%.6g", epoch, examples_, el, double(examples_) / (el > 0 ? el : 1e-9), train);
      for (double v : values) std::fprintf(csv_, ",%.6g", v);
      std::fprintf(csv_, "\n");
      std::fflush(csv_);
    }
    epoch_examples_ = 0;
    loss_sum_ = 0;
  }
  /// Examples per second over the whole run so far.
  double examples_per_second() const {
    double el = seconds(clock::now());
    return double(examples_) / (el > 0 ? el : 1e-9);
  }

 private:
  using clock = std::chrono::steady_clock;
  double seconds(clock::time_point t) const { return std::chrono::duration<double>(t - start_).count(); }
  static std::string rate(double r) {
    char b[32];
    if (r >= 1e6) std::snprintf(b, sizeof b, "%.2fM", r / 1e6);
    else if (r >= 1e3) std::snprintf(b, sizeof b, "%.1fk", r / 1e3);
    else std::snprintf(b, sizeof b, "%.0f", r);
    return b;
  }
  int epochs_;
  long steps_;
  std::vector<std::string> metrics_;
  bool tty_;
  std::FILE* csv_ = nullptr;
  long examples_ = 0, epoch_examples_ = 0;
  double loss_sum_ = 0;
  clock::time_point start_, last_draw_;
};

/// The non-empty pieces of s between separators c.
inline std::vector<std::string> split(std::string const& s, char c) {
  std::vector<std::string> r;
  std::string x;
  for (char ch : s) {
    if (ch == c) {
      if (!x.empty()) r.push_back(x);
      x.clear();
    } else {
      x += ch;
    }
  }
  if (!x.empty()) r.push_back(x);
  return r;
}

/// "--name value" from argv, or def.
inline std::string arg(int argc, char** argv, char const* name, std::string def) {
  for (int a = 1; a + 1 < argc; ++a)
    if (std::string(argv[a]) == name) return argv[a + 1];
  return def;
}

/// A fortune file's text: every line plus a newline, the "%" line between quotes as an
/// empty line.
inline std::string read_quotes(std::string const& path) {
  std::ifstream in(path);
  std::string r;
  for (std::string line; std::getline(in, line);) {
    if (line == "%") r += "\n";  // quotes separated by an empty line
    else r += line + "\n";
  }
  return r;
}

/// The fortune files' bytes as tokens (the vocabulary: every byte the text holds, in order of
/// first appearance), split 90 / 10, and the loss of a model that ignores context (the
/// entropy of the training bytes, nats per character).
struct byte_corpus {
  std::vector<unsigned char> byte_of;  // token -> byte
  std::vector<std::int32_t> tokens;
  std::size_t n_train = 0;
  double unigram = 0;
  std::int64_t vocabulary() const { return std::int64_t(byte_of.size()); }
};
inline byte_corpus read_byte_corpus(std::string const& dir, std::vector<std::string> const& files) {
  std::string text;
  for (auto const& f : files) text += read_quotes(dir + "/" + f);
  byte_corpus c;
  std::vector<int> id_of(256, -1);
  for (unsigned char ch : text)
    if (id_of[ch] < 0) {
      id_of[ch] = int(c.byte_of.size());
      c.byte_of.push_back(ch);
    }
  c.tokens.resize(text.size());
  for (std::size_t k = 0; k < text.size(); ++k) c.tokens[k] = id_of[static_cast<unsigned char>(text[k])];
  c.n_train = c.tokens.size() * 9 / 10;
  std::vector<double> count(c.byte_of.size(), 0);
  for (std::size_t k = 0; k < c.n_train; ++k) count[std::size_t(c.tokens[k])] += 1;
  for (double n : count)
    if (n > 0) c.unigram -= n / double(c.n_train) * std::log(n / double(c.n_train));
  return c;
}

}  // namespace examples
