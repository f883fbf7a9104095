// tests/core/reference_multiclass.h
//
// A plain implementation of multi-class NORMA (core/multiclass_norma.h) from its
// definition, to check MulticlassNormaModel against: every coefficient is stored as it is
// (no common scale), the losses are written out from their formulas, and MERGE searches
// every partner's h on a fine grid. It shares nothing with core/ beyond the config structs
// and ReferenceKernel (tests/core/reference_norma.h).
#ifndef OKL_TESTS_CORE_REFERENCE_MULTICLASS_H_
#define OKL_TESTS_CORE_REFERENCE_MULTICLASS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"

namespace okl::testing {

struct ReferenceClassStep {
  double score = 0.0;   // the predicted class's score, 0 with no class known
  double loss = 0.0;
  int predicted = -1;   // the predicted class's index, -1 with no class known
};

class ReferenceMulticlass {
 public:
  explicit ReferenceMulticlass(const ModelConfig& config) : config_(config) {}

  ReferenceClassStep Observe(const std::vector<double>& x, const std::string& label);
  // f_c(x) for each known class.
  std::vector<double> Scores(const std::vector<double>& x) const;
  size_t size() const { return terms_.size(); }
  const std::vector<std::string>& classes() const { return classes_; }

 private:
  struct Term {
    std::vector<double> x;
    std::vector<double> alpha;  // one per class known when it last changed; missing = 0
    uint64_t added_at = 0;
  };
  double Alpha(const Term& term, size_t c) const {
    return c < term.alpha.size() ? term.alpha[c] : 0.0;
  }
  double Norm(const Term& term) const;
  // The index of the term of least |alpha|, the oldest within a relative 1e-9 of it.
  size_t Smallest() const;
  void Merge();

  ModelConfig config_;
  std::vector<std::string> classes_;
  std::vector<Term> terms_;
  uint64_t t_ = 0;
};

}  // namespace okl::testing

#endif  // OKL_TESTS_CORE_REFERENCE_MULTICLASS_H_
