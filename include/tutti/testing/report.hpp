/// \file
/// `tutti::testing::report`: what a conformance check found. Every check counts; a check that
/// fails adds a finding (which check, on which rank, what happened), so a transport's author
/// reads exactly what broke the contract. Framework-free: a test passes `report.ok()` to its own
/// assertion and prints `report.text()`.
#pragma once

#include <cstddef>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace tutti::testing {

/// One check that failed.
struct finding {
  std::string check;  ///< "all_reduce(ring) on 3 ranks, count 7, float max"
  int rank = -1;      ///< the rank that saw it (-1: the run as a whole)
  std::string what;   ///< what was expected and what happened
};

class report {
 public:
  report() = default;
  report(const report& o) {
    std::lock_guard lk(o.mu_);
    checks_ = o.checks_;
    findings_ = o.findings_;
    notes_ = o.notes_;
  }
  report& operator=(const report& o) {
    if (this == &o) return *this;
    std::scoped_lock lk(mu_, o.mu_);
    checks_ = o.checks_;
    findings_ = o.findings_;
    notes_ = o.notes_;
    return *this;
  }

  /// Records a check; adds a finding when `ok` is false.
  bool check(bool ok, const std::string& check, int rank, const std::string& what) {
    std::lock_guard lk(mu_);
    ++checks_;
    if (!ok) findings_.push_back({check, rank, what});
    return ok;
  }
  void fail(const std::string& check, int rank, const std::string& what) { (void)this->check(false, check, rank, what); }

  /// Records a measurement or remark that is not a check ("abort returned after 0.4 ms").
  void note(const std::string& text) {
    std::lock_guard lk(mu_);
    notes_.push_back(text);
  }
  std::vector<std::string> notes() const {
    std::lock_guard lk(mu_);
    return notes_;
  }

  /// Adds another report's checks and findings.
  void merge(const report& o) {
    std::scoped_lock lk(mu_, o.mu_);
    checks_ += o.checks_;
    findings_.insert(findings_.end(), o.findings_.begin(), o.findings_.end());
    notes_.insert(notes_.end(), o.notes_.begin(), o.notes_.end());
  }

  bool ok() const {
    std::lock_guard lk(mu_);
    return findings_.empty();
  }
  std::size_t checks() const {
    std::lock_guard lk(mu_);
    return checks_;
  }
  std::vector<finding> findings() const {
    std::lock_guard lk(mu_);
    return findings_;
  }

  /// "12345 checks, 2 failed:", one line per finding (at most `max` of them), then the notes.
  std::string text(std::size_t max = 50) const {
    std::lock_guard lk(mu_);
    std::string s = std::to_string(checks_) + " checks, " + std::to_string(findings_.size()) + " failed";
    for (std::size_t i = 0; i < findings_.size() && i < max; ++i) {
      const auto& f = findings_[i];
      s += "\n  " + f.check + (f.rank >= 0 ? " [rank " + std::to_string(f.rank) + "]" : std::string()) + ": " + f.what;
    }
    if (findings_.size() > max) s += "\n  ... and " + std::to_string(findings_.size() - max) + " more";
    for (const auto& n : notes_) s += "\n  note: " + n;
    return s;
  }

  /// The findings as lines ("check\trank\twhat", notes as "\tnote\ttext"), and back: how a
  /// process runner gathers them.
  std::string serialize() const {
    std::lock_guard lk(mu_);
    std::string s = std::to_string(checks_) + "\n";
    for (const auto& f : findings_) s += flat(f.check) + "\t" + std::to_string(f.rank) + "\t" + flat(f.what) + "\n";
    for (const auto& n : notes_) s += "\tnote\t" + flat(n) + "\n";
    return s;
  }
  void merge_serialized(const std::string& s) {
    std::lock_guard lk(mu_);
    std::size_t at = s.find('\n');
    if (at == std::string::npos) return;
    checks_ += std::stoull(s.substr(0, at));
    while (++at < s.size()) {
      const std::size_t end = s.find('\n', at), t1 = s.find('\t', at), t2 = t1 == std::string::npos ? t1 : s.find('\t', t1 + 1);
      if (end == std::string::npos || t2 == std::string::npos || t2 > end) break;
      if (t1 == at && s.compare(t1 + 1, t2 - t1 - 1, "note") == 0) notes_.push_back(s.substr(t2 + 1, end - t2 - 1));
      else findings_.push_back({s.substr(at, t1 - at), std::stoi(s.substr(t1 + 1, t2 - t1 - 1)), s.substr(t2 + 1, end - t2 - 1)});
      at = end;
    }
  }

 private:
  static std::string flat(std::string s) {
    for (char& c : s)
      if (c == '\n' || c == '\t') c = ' ';
    return s;
  }
  mutable std::mutex mu_;
  std::size_t checks_ = 0;
  std::vector<finding> findings_;
  std::vector<std::string> notes_;
};

}  // namespace tutti::testing
