// bench/soak_history.h
//
// What okl_soak expects each model to hold, and the check that it does. A History is a
// model's ledger: its config (one of SoakConfig's kinds) and the examples the server
// acknowledged into it, in the order it applied them, as segments of deterministic example
// streams (GenerateExamples: example k of stream s is a pure function of s and k, so a
// ledger of a million examples is a few numbers). At the end, CheckModel() feeds a core
// NormaModel -- the twin -- the ledger's examples and compares the server's model with it
// to the last bit: the whole state of its Snapshot and its predictions on probe points.
//
// Thread-compatible: a History has one owner at a time; CheckModel may run on several
// threads at once (each with its own models).
//
// Example:
//   History history(/*config_kind=*/0);
//   history.Append(/*stream=*/7, /*first=*/0, /*count=*/32);   // an acknowledged Observe
//   ModelCheck check = CheckModel(client, id, history, probes);
//   if (!check.exact()) { ... check.lost_examples, check.detail ... }
#ifndef OKL_BENCH_SOAK_HISTORY_H_
#define OKL_BENCH_SOAK_HISTORY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/client.h"
#include "core/config.h"
#include "core/norma.h"

namespace okl::soak {

// The input dimension of every soak model.
inline constexpr uint32_t kDim = 8;
// The number of model configs (SoakConfig's kinds).
inline constexpr int kConfigKinds = 3;

// Small kernel-expansion configs that together cover the model state a snapshot carries
// (see soak_history.cc): 0 gaussian/squared/OLDEST, 1 averaged epsilon-insensitive with a
// learned epsilon, an offset and a SMALLEST budget, 2 huber with MERGE and a regret window.
ModelConfig SoakConfig(int kind);

// Appends examples [first, first + count) of `stream` to xs (kDim values each) and ys.
// Inputs are uniform in [-1, 1]^kDim, labels a smooth function of them plus noise, so that
// every config's loss has a gradient and keeps adding terms.
void GenerateExamples(uint64_t stream, uint64_t first, uint64_t count, std::vector<double>* xs,
                      std::vector<double>* ys);

// Consecutive examples of one stream.
struct Segment {
  uint64_t stream = 0;
  uint64_t first = 0;
  uint64_t count = 0;
};

// One model's ledger: its config and its acknowledged examples, in order.
class History {
 public:
  explicit History(int config_kind) : config_kind_(config_kind) {}

  // Records `count` acknowledged examples from `first` on of `stream`, after the others
  // (merged into the last segment when they continue it).
  void Append(uint64_t stream, uint64_t first, uint64_t count);

  int config_kind() const { return config_kind_; }
  // The examples the model must hold, which is its step count.
  uint64_t size() const { return size_; }
  const std::vector<Segment>& segments() const { return segments_; }

 private:
  int config_kind_;
  uint64_t size_ = 0;
  std::vector<Segment> segments_;
};

// The twin: a NormaModel of the history's config fed its first `limit` examples (all of
// them by default), in order.
absl::StatusOr<std::unique_ptr<NormaModel>> Replay(const History& history,
                                                   uint64_t limit = UINT64_MAX);

// How one served model compares with its twin.
struct ModelCheck {
  bool present = false;       // the server has the model
  bool state_equal = false;   // its snapshot decodes to exactly the twin's ModelState
  bool predictions_equal = false;  // bit-identical predictions on the probes
  uint64_t expected_steps = 0;     // the ledger's examples
  uint64_t served_steps = 0;       // the snapshot's step count
  // Acknowledged examples the server does not verifiably hold: 0 for an exact model;
  // expected - served if the model holds exactly a prefix of its ledger (checked by
  // replaying that prefix); every acknowledged example if it matches no prefix, or is
  // missing.
  uint64_t lost_examples = 0;
  // Steps past the ledger: examples the server holds that were never acknowledged.
  uint64_t extra_examples = 0;
  // What differs, for the report; empty for an exact model.
  std::string detail;

  bool exact() const { return present && state_equal && predictions_equal; }
};

// Snapshots `id` and predicts `probes` (kDim values each) on the server and compares both
// with the twin of `history`. A failed call (other than NOT_FOUND) is reported in detail
// with the model counted as not exact.
ModelCheck CheckModel(const Client& client, const ModelId& id, const History& history,
                      absl::Span<const double> probes);

}  // namespace okl::soak

#endif  // OKL_BENCH_SOAK_HISTORY_H_
