// bench/soak_caller.cc

#include "bench/soak_caller.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "proto/convert.h"
#include "proto/snapshot_codec.h"

namespace okl::soak {
namespace {

// The mix of operations, per mille of a caller's picks; Predict takes the rest. Reads
// dominate, as in service; writes come often enough that every model is written to
// several times a second. Restores roll a model back (or over to another model's
// state) every several seconds and resets empty it every half minute or so, so each
// model keeps a history of thousands of examples that the server has had to checkpoint
// and log, and the rollbacks test that what was logged after a snapshot cannot come back.
constexpr int kGetModelWeight = 150;
constexpr int kObserveWeight = 250;
constexpr int kObserveStreamWeight = 60;
constexpr int kListModelsWeight = 30;
constexpr int kSnapshotWeight = 60;
constexpr int kRestoreWeight = 20;
constexpr int kResetWeight = 5;

constexpr uint64_t kMaxObserveBatch = 32;
constexpr uint64_t kMaxPredictInputs = 8;
constexpr uint64_t kMaxStreamBatch = 64;
constexpr uint64_t kMaxStreamMessages = 8;
// Settling a step count after an ambiguous write: reads this far apart, at most this many.
constexpr absl::Duration kSettleInterval = absl::Milliseconds(100);
constexpr int kSettleReads = 50;
constexpr int kResetAttempts = 3;

std::string Name(const ModelId& id) { return absl::StrCat(id.tenant, "/", id.model); }

}  // namespace

ModelId Layout::Id(int index) const {
  return {.tenant = Tenant(index % tenants), .model = absl::StrFormat("m%04d", index)};
}

std::string Layout::Tenant(int tenant) const {
  return absl::StrFormat("%s-t%02d", prefix, tenant);
}

int Layout::IndexOf(int tenant, const std::string& model) const {
  int index = -1;
  if (model.size() < 2 || model[0] != 'm' ||
      !absl::SimpleAtoi(absl::string_view(model).substr(1), &index) || index < 0 ||
      index >= models || index % tenants != tenant || Id(index).model != model) {
    return -1;
  }
  return index;
}

Caller::Caller(int index, const Layout& layout, Client client, uint64_t seed,
               Progress* progress)
    : index_(index),
      layout_(layout),
      client_(std::move(client)),
      progress_(progress),
      bits_(seed ^ (0x9e3779b97f4a7c15u * static_cast<uint64_t>(index + 1))) {
  for (int i = index; i < layout.models; i += layout.callers) {
    models_.push_back({.index = i, .id = layout.Id(i), .history = History(layout.HomeConfig(i))});
  }
}

absl::Status Caller::CreateModels() {
  for (OwnedModel& model : models_) {
    absl::StatusOr<ModelSummary> created =
        client_.CreateModel(model.id, SoakConfig(model.history.config_kind()));
    if (!created.ok()) {
      return absl::Status(created.status().code(),
                          absl::StrCat("CreateModel ", Name(model.id), ": ",
                                       created.status().message()));
    }
  }
  return absl::OkStatus();
}

void Caller::Run(absl::Time until) {
  while (absl::Now() < until) {
    OwnedModel& mine = models_[Below(models_.size())];
    int pick = static_cast<int>(Below(1000));
    // A model in doubt is reset before anything else writes to it.
    const auto write = [&](auto&& op) { mine.in_doubt ? Reset(mine) : op(mine); };
    if ((pick -= kGetModelWeight) < 0) {
      GetModel();
    } else if ((pick -= kObserveWeight) < 0) {
      write([this](OwnedModel& m) { Observe(m); });
    } else if ((pick -= kObserveStreamWeight) < 0) {
      write([this](OwnedModel& m) { ObserveStream(m); });
    } else if ((pick -= kListModelsWeight) < 0) {
      ListModels();
    } else if ((pick -= kSnapshotWeight) < 0) {
      Snapshot();
    } else if ((pick -= kRestoreWeight) < 0) {
      Restore(mine);
    } else if ((pick -= kResetWeight) < 0) {
      Reset(mine);
    } else {
      Predict();
    }
  }
}

bool Caller::SettleDoubts() {
  bool settled = true;
  for (OwnedModel& model : models_) {
    for (int attempt = 0; attempt < kResetAttempts && model.in_doubt; ++attempt) Reset(model);
    settled = settled && !model.in_doubt;
  }
  return settled;
}

bool Caller::Finish(Method method, absl::Time start, const absl::Status& status,
                    const ModelId& id, bool absent_ok) {
  stats_[method].Record(absl::Now() - start);
  progress_->calls.fetch_add(1, std::memory_order_relaxed);
  if (status.ok()) return true;
  const std::string code = absl::StatusCodeToString(status.code());
  if (status.code() == absl::StatusCode::kResourceExhausted ||
      (absent_ok && status.code() == absl::StatusCode::kNotFound)) {
    // A limit (e.g. --max_concurrent_restores), or a read racing the model's owner
    // deleting and re-creating it: the server refused, and changed nothing.
    stats_.AddExpected(method, absl::StrCat(MethodName(method), " ", code));
    return false;
  }
  progress_->unexpected_errors.fetch_add(1, std::memory_order_relaxed);
  stats_.AddUnexpected(method, absl::StrCat(MethodName(method), " ", Name(id), ": ", code,
                                            ": ", status.message()));
  return false;
}

void Caller::Inconsistent(Method method, const ModelId& id, const std::string& what) {
  progress_->unexpected_errors.fetch_add(1, std::memory_order_relaxed);
  stats_.AddUnexpected(method,
                       absl::StrCat(MethodName(method), " ", Name(id), ": inconsistent: ", what));
}

int Caller::AnyModel(OwnedModel** owned) {
  const int index = static_cast<int>(Below(layout_.models));
  *owned = layout_.Owner(index) == index_ ? &models_[index / layout_.callers] : nullptr;
  return index;
}

std::vector<double> Caller::RandomInputs(size_t n) {
  std::vector<double> xs(n * kDim);
  for (double& x : xs) x = static_cast<double>(bits_.Next() >> 11) * 0x1.0p-53 * 2.0 - 1.0;
  return xs;
}

void Caller::Predict() {
  OwnedModel* owned = nullptr;
  const ModelId id = layout_.Id(AnyModel(&owned));
  const std::vector<double> xs = RandomInputs(1 + Below(kMaxPredictInputs));
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<double>> predictions = client_.Predict(id, xs, kDim);
  Finish(Method::kPredict, start, predictions.status(), id,
         owned == nullptr || owned->in_doubt);
}

void Caller::GetModel() {
  OwnedModel* owned = nullptr;
  const ModelId id = layout_.Id(AnyModel(&owned));
  const absl::Time start = absl::Now();
  absl::StatusOr<ModelSummary> summary = client_.GetModel(id);
  if (!Finish(Method::kGetModel, start, summary.status(), id,
              owned == nullptr || owned->in_doubt) ||
      owned == nullptr || owned->in_doubt) {
    return;
  }
  if (summary->stats.steps != owned->history.size()) {
    Inconsistent(Method::kGetModel, id,
                 absl::StrCat(summary->stats.steps, " steps, ", owned->history.size(),
                              " acknowledged"));
  } else if (!(summary->config == SoakConfig(owned->history.config_kind()))) {
    Inconsistent(Method::kGetModel, id,
                 absl::StrCat("not the config of kind ", owned->history.config_kind()));
  }
}

void Caller::ListModels() {
  const int tenant = static_cast<int>(Below(layout_.tenants));
  const std::string name = layout_.Tenant(tenant);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<ModelSummary>> listed = client_.ListModels(name);
  if (!Finish(Method::kListModels, start, listed.status(), {.tenant = name, .model = ""}, false)) return;
  // Only the soak's models, each at most once (a model being re-created may be absent).
  std::vector<int> seen;
  for (const ModelSummary& summary : *listed) {
    const int index = layout_.IndexOf(tenant, summary.model);
    if (summary.tenant != name || index < 0 ||
        std::find(seen.begin(), seen.end(), index) != seen.end()) {
      Inconsistent(Method::kListModels, {.tenant = name, .model = ""},
                   absl::StrCat("lists ", summary.tenant, "/", summary.model));
      return;
    }
    seen.push_back(index);
  }
}

void Caller::Snapshot() {
  OwnedModel* owned = nullptr;
  const ModelId id = layout_.Id(AnyModel(&owned));
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> bytes = client_.Snapshot(id);
  if (!Finish(Method::kSnapshot, start, bytes.status(), id,
              owned == nullptr || owned->in_doubt)) {
    return;
  }
  absl::StatusOr<ModelState> state = DecodeSnapshot(*bytes);
  if (!state.ok()) {
    Inconsistent(Method::kSnapshot, id, state.status().ToString());
    return;
  }
  if (owned == nullptr || owned->in_doubt) return;
  if (state->steps != owned->history.size() ||
      !(state->config == SoakConfig(owned->history.config_kind()))) {
    Inconsistent(Method::kSnapshot, id,
                 absl::StrCat(state->steps, " steps, ", owned->history.size(),
                              " acknowledged (or another config)"));
    return;
  }
  saved_ = SavedSnapshot{.source = static_cast<int>(owned - models_.data()),
                         .bytes = *std::move(bytes),
                         .history = owned->history};
}

void Caller::Observe(OwnedModel& model) {
  const uint64_t n = 1 + Below(kMaxObserveBatch);
  std::vector<double> xs, ys;
  GenerateExamples(model.index, model.next_example, n, &xs, &ys);
  const uint64_t first = model.next_example;
  model.next_example += n;
  const absl::Time start = absl::Now();
  absl::StatusOr<ObserveResult> result = client_.Observe(model.id, xs, ys);
  if (!Finish(Method::kObserve, start, result.status(), model.id, false)) {
    ResolveWrite(Method::kObserve, model, n);
    return;
  }
  model.history.Append(model.index, first, n);
  stats_[Method::kObserve].examples += n;
  progress_->examples.fetch_add(n, std::memory_order_relaxed);
  if (result->steps != model.history.size()) {
    Inconsistent(Method::kObserve, model.id,
                 absl::StrCat("answered steps ", result->steps, ", ",
                              model.history.size(), " acknowledged"));
  }
}

void Caller::ObserveStream(OwnedModel& model) {
  const uint64_t batch = 1 + Below(kMaxStreamBatch);
  const uint64_t n = 1 + Below(batch * kMaxStreamMessages);
  std::vector<double> xs, ys;
  GenerateExamples(model.index, model.next_example, n, &xs, &ys);
  const uint64_t first = model.next_example;
  model.next_example += n;
  // One stream: every message fits it (batches_per_stream), and Close() ends it.
  uint64_t acknowledged = 0;
  bool in_order = true;
  WriterOptions options;
  options.batch_size = batch;
  options.batches_per_stream = kMaxStreamMessages;
  options.on_ack = [&](const AckedBatch& ack) {
    in_order = in_order && ack.first == acknowledged;
    acknowledged = ack.first + ack.count;
  };
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<ObserveWriter>> writer =
      client_.OpenObserveWriter(model.id, options);
  if (!writer.ok()) {
    // Opening only reads the model (GetModel): nothing was sent.
    Finish(Method::kObserveStream, start, writer.status(), model.id, false);
    return;
  }
  // Add() fails only once the writer has, and Close() then returns that failure.
  (void)(*writer)->Add(xs, ys);
  const absl::Status status = (*writer)->Close();
  if (!Finish(Method::kObserveStream, start, status, model.id, false)) {
    ResolveWrite(Method::kObserveStream, model, n);
    return;
  }
  if ((*writer)->steps_at_open() != model.history.size() || acknowledged != n || !in_order) {
    Inconsistent(Method::kObserveStream, model.id,
                 absl::StrCat("opened at step ", (*writer)->steps_at_open(), " with ",
                              model.history.size(), " acknowledged; ", acknowledged, " of ", n,
                              " examples acknowledged", in_order ? "" : ", out of order"));
  }
  model.history.Append(model.index, first, n);
  stats_[Method::kObserveStream].examples += n;
  progress_->examples.fetch_add(n, std::memory_order_relaxed);
}

void Caller::Restore(OwnedModel& target) {
  if (!saved_.has_value()) {
    // Nothing to restore yet: take a snapshot of this model for a later Restore.
    if (target.in_doubt) return Reset(target);
    const absl::Time start = absl::Now();
    absl::StatusOr<std::string> bytes = client_.Snapshot(target.id);
    if (Finish(Method::kSnapshot, start, bytes.status(), target.id, false)) {
      saved_ = SavedSnapshot{.source = static_cast<int>(&target - models_.data()),
                             .bytes = *std::move(bytes),
                             .history = target.history};
    }
    return;
  }
  // Half the time roll the snapshot's own model back to it, dropping what it learned
  // since; else install it over another of this caller's models.
  OwnedModel& model = Below(2) == 0 ? models_[saved_->source] : target;
  const absl::Time start = absl::Now();
  absl::StatusOr<ModelSummary> restored = client_.Restore(model.id, saved_->bytes);
  if (!Finish(Method::kRestore, start, restored.status(), model.id, false)) {
    // On an error the server installs nothing; but one it did not answer (UNAVAILABLE, a
    // deadline) may have been installed, and step counts cannot tell which state is there.
    if (restored.status().code() != absl::StatusCode::kResourceExhausted) model.in_doubt = true;
    return;
  }
  model.history = saved_->history;
  model.in_doubt = false;
  if (restored->stats.steps != model.history.size()) {
    Inconsistent(Method::kRestore, model.id,
                 absl::StrCat("restored ", restored->stats.steps, " steps from a snapshot of ",
                              model.history.size()));
  }
}

void Caller::Reset(OwnedModel& model) {
  absl::Time start = absl::Now();
  const absl::Status deleted = client_.DeleteModel(model.id);
  // A model in doubt may be absent already (a CreateModel that failed).
  if (!Finish(Method::kDeleteModel, start, deleted, model.id, model.in_doubt) &&
      !(model.in_doubt && deleted.code() == absl::StatusCode::kNotFound)) {
    model.in_doubt = true;
    return;
  }
  model.in_doubt = true;  // until it exists again, empty
  start = absl::Now();
  const int kind = layout_.HomeConfig(model.index);
  absl::StatusOr<ModelSummary> created = client_.CreateModel(model.id, SoakConfig(kind));
  if (!Finish(Method::kCreateModel, start, created.status(), model.id, false)) return;
  model.history = History(kind);
  model.in_doubt = false;
}

absl::StatusOr<uint64_t> Caller::SettledSteps(const ModelId& id) {
  std::optional<uint64_t> last;
  for (int read = 0; read < kSettleReads; ++read) {
    if (read > 0) absl::SleepFor(kSettleInterval);
    const absl::Time start = absl::Now();
    absl::StatusOr<ModelSummary> summary = client_.GetModel(id);
    if (!Finish(Method::kGetModel, start, summary.status(), id, false)) {
      return summary.status();
    }
    if (last == summary->stats.steps) return *last;
    last = summary->stats.steps;
  }
  return absl::DeadlineExceededError("its step count did not settle");
}

void Caller::ResolveWrite(Method method, OwnedModel& model, uint64_t sent) {
  const uint64_t first = model.next_example - sent;
  absl::StatusOr<uint64_t> steps = SettledSteps(model.id);
  const uint64_t before = model.history.size();
  if (!steps.ok() || *steps < before || *steps > before + sent) {
    model.in_doubt = true;
    if (steps.ok()) {
      Inconsistent(method, model.id,
                   absl::StrCat("after a failed write of ", sent, " examples it has ", *steps,
                                " steps, ", before, " acknowledged before"));
    }
    return;
  }
  // The examples applied are a prefix of those sent, and now acknowledged.
  model.history.Append(model.index, first, *steps - before);
}

}  // namespace okl::soak
