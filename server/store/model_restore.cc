// server/store/model_restore.cc
//
// RestoreModels and CheckpointEntry (model_store.h): the store's models back at start-up,
// and one model's checkpoint.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/create_model.h"
#include "core/model.h"
#include "core/norma.h"
#include "core/status_macros.h"
#include "server/store/model_store.h"

namespace okl {

absl::StatusOr<RestoreStats> RestoreModels(ModelStore* store, ModelRegistry* registry,
                                           const RestoreOptions& options) {
  return RestoreModels(store, options,
                       [registry](const ModelKey& id, std::unique_ptr<Model> learner,
                                  std::shared_ptr<ModelLog> log) {
                         return registry->Put(id, std::move(learner), std::move(log)).status();
                       });
}

absl::StatusOr<RestoreStats> RestoreModels(ModelStore* store, const RestoreOptions& options,
                                           const RestoredModelSink& install) {
  const absl::Time start = absl::Now();
  RestoreStats stats;
  auto damaged = [&](absl::string_view tenant, absl::string_view model,
                     absl::string_view what) -> absl::Status {
    if (!options.skip_damaged) {
      return absl::DataLossError(
          absl::StrCat("model ", tenant, "/", model, " is damaged: ", what,
                       "; refusing to start (--skip_damaged_models skips it)"));
    }
    ++stats.skipped;
    if (options.warn) {
      options.warn(absl::StrCat("warning: model ", tenant, "/", model, " is damaged: ", what,
                                "; skipped (--skip_damaged_models), its data is left in the "
                                "store"));
    }
    return absl::OkStatus();
  };
  std::vector<Observation> observations;
  auto restore = [&](StoredModel model) -> absl::Status {
    const absl::StatusOr<ModelKey> key = ModelKey::Make(model.tenant, model.model);
    if (!key.ok()) return damaged(model.tenant, model.model, key.status().message());
    absl::StatusOr<std::unique_ptr<Model>> learner =
        model.checkpoint ? ModelFromState(*model.checkpoint) : CreateModel(model.config);
    if (!learner.ok()) {
      return damaged(model.tenant, model.model,
                     absl::StrCat(model.checkpoint ? "checkpoint state is inconsistent: "
                                                   : "config is invalid: ",
                                  learner.status().message()));
    }
    for (const StoredModel::Batch& batch : model.log) {
      observations.clear();
      // The live path's batch, so a batch that diverged live (FailedPrecondition after
      // some examples) diverges at the same example now.
      absl::StatusOr<ValidatedBatch> valid =
          (*learner)->Validate(batch.inputs(model.config.dim), batch.ys, batch.class_labels);
      absl::Status status = valid.ok() ? (*learner)->ObserveValidated(*valid, &observations)
                                       : valid.status();
      if (!status.ok() && status.code() != absl::StatusCode::kFailedPrecondition) {
        return damaged(
            model.tenant, model.model,
            absl::StrCat("log record ", batch.seq, " does not apply: ", status.message()));
      }
      ++stats.log_batches;
      stats.log_examples += batch.ys.size();
    }
    if (absl::Status installed = install(*key, *std::move(learner), store->OpenLog(model));
        !installed.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot restore model ", model.tenant, "/", model.model, ": ", installed.message()));
    }
    ++stats.models;
    return absl::OkStatus();
  };
  OKL_RETURN_IF_ERROR(store->LoadModels(restore, damaged));
  stats.elapsed = absl::Now() - start;
  return stats;
}

absl::StatusOr<bool> CheckpointEntry(const ModelEntry& entry, ModelLog* log) {
  if (log == nullptr || !log->HasLog()) return false;
  ModelLog::Position at;
  // The entry's lock keeps batches from being logged or applied while the state is
  // copied, so `at` is exactly the log position of this state.
  absl::StatusOr<ModelState> state = entry.ExportState([&] { at = log->position(); });
  if (absl::IsNotFound(state.status())) return false;  // deleted meanwhile
  OKL_RETURN_IF_ERROR(state.status());
  OKL_RETURN_IF_ERROR(log->Checkpoint(*state, at));
  return true;
}

}  // namespace okl
