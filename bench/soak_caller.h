// bench/soak_caller.h
//
// One of okl_soak's closed-loop callers. The soak's models are partitioned among the
// callers for writing: model i belongs to caller i % callers, which alone Observes into
// it, streams into it, Restores over it and deletes and re-creates it, one call at a
// time. So each model's ledger (bench/soak_history.h) is kept by one thread, without
// locks, in exactly the order the server applied its writes. Reads -- Predict, GetModel,
// ListModels, Snapshot -- go to any model, and a read of a model that another caller is
// deleting and re-creating may find it absent (NOT_FOUND, expected).
//
// A write that fails without saying what it did (UNAVAILABLE, DEADLINE_EXCEEDED, ...) is
// an unexpected error, and its effect is then read back, not guessed: for Observe and
// ObserveStream, from the model's step count once two reads 100 ms apart agree (this
// caller being its only writer, steps - ledger size is how many of the sent examples were
// applied, always a prefix); a model whose state cannot be told that way (a failed
// Restore, DeleteModel or CreateModel, a step count out of range) is "in doubt" until
// this caller deletes and re-creates it, which makes it empty again.
//
// Besides the final check, a caller checks what it reads of its own models against their
// ledgers as it goes: GetModel's and Snapshot's step counts and configs, Observe's step
// count, the stream's acknowledgements. A disagreement is an unexpected error.
//
// Not thread-safe: one thread calls a Caller's methods; different Callers run on
// different threads at once.
//
// Example:
//   Caller caller(/*index=*/3, layout, client, &progress);
//   OKL_RETURN_IF_ERROR(caller.CreateModels());
//   caller.Run(absl::Now() + absl::Minutes(10));
//   caller.SettleDoubts();
//   for (const OwnedModel& model : caller.models()) { ... CheckModel(..., model.history, ...) }
#ifndef OKL_BENCH_SOAK_CALLER_H_
#define OKL_BENCH_SOAK_CALLER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bench/soak_history.h"
#include "bench/soak_stats.h"
#include "client/client.h"
#include "core/split_mix.h"

namespace okl::soak {

// Where the soak's models live and who writes each.
struct Layout {
  std::string prefix;  // of every tenant name
  int models = 0;
  int tenants = 0;
  int callers = 0;

  // Model i is "m<i>" (4 digits at least) in tenant "<prefix>-t<i % tenants>".
  ModelId Id(int index) const;
  std::string Tenant(int tenant) const;
  // The model index a name of `tenant` stands for; -1 if it is none of the soak's.
  int IndexOf(int tenant, const std::string& model) const;
  int Owner(int index) const { return index % callers; }
  // The config a model is created with (a Restore may give it another).
  int HomeConfig(int index) const { return index % kConfigKinds; }
};

// A model a caller writes, and its ledger.
struct OwnedModel {
  int index = 0;
  ModelId id;
  History history;
  // The next unused example of the model's stream (stream = index): every write sends
  // new examples, so a ledger never holds one twice.
  uint64_t next_example = 0;
  // Its state could not be told after an error; reset (deleted and re-created) before
  // it is written or checked again.
  bool in_doubt = false;
};

class Caller {
 public:
  // `client` may share its channel with other callers'. `progress` outlives the caller.
  Caller(int index, const Layout& layout, Client client, uint64_t seed, Progress* progress);

  // Creates this caller's models, empty, with their home configs.
  absl::Status CreateModels();
  // Random operations, one at a time, until `until`.
  void Run(absl::Time until);
  // Resets the models left in doubt (a few attempts each). False if some still are.
  bool SettleDoubts();

  const std::vector<OwnedModel>& models() const { return models_; }
  const SoakStats& stats() const { return stats_; }

 private:
  // A snapshot of one of this caller's models and the ledger it holds, for Restore.
  struct SavedSnapshot {
    int source = 0;  // position in models_
    std::string bytes;
    History history;
  };

  // The operations (see kWeights in soak_caller.cc).
  void Predict();
  void GetModel();
  void ListModels();
  void Snapshot();
  void Observe(OwnedModel& model);
  void ObserveStream(OwnedModel& model);
  void Restore(OwnedModel& target);
  // DeleteModel then CreateModel: the model is empty again. Also how doubt is cleared.
  void Reset(OwnedModel& model);

  // Records a finished call: its latency since `start`, and, if `status` is an error,
  // whether it was expected. `absent_ok`: NOT_FOUND is expected (a read of a model this
  // caller does not write, or one in doubt). Returns status.ok().
  bool Finish(Method method, absl::Time start, const absl::Status& status, const ModelId& id,
              bool absent_ok);
  // Counts an answer that contradicts the model's ledger as an unexpected error.
  void Inconsistent(Method method, const ModelId& id, const std::string& what);
  // After a write of `sent` examples that failed: records in the ledger the prefix of them
  // that the model's settled step count says was applied, or puts the model in doubt.
  void ResolveWrite(Method method, OwnedModel& model, uint64_t sent);
  // The model's step count once two GetModels 100 ms apart agree.
  absl::StatusOr<uint64_t> SettledSteps(const ModelId& id);

  // Uniform in [0, n).
  uint64_t Below(uint64_t n) { return bits_.Next() % n; }
  // A model of the whole soak (any caller's); sets *owned to it being one of this caller's.
  int AnyModel(OwnedModel** owned);
  std::vector<double> RandomInputs(size_t n);

  const int index_;
  const Layout& layout_;
  const Client client_;
  Progress* const progress_;
  SplitMix64 bits_;
  std::vector<OwnedModel> models_;
  std::optional<SavedSnapshot> saved_;
  SoakStats stats_;
};

}  // namespace okl::soak

#endif  // OKL_BENCH_SOAK_CALLER_H_
