// server/rpc/service_label.cc: delayed feedback on the wire. A Predict with `remember` keeps
// its inputs and predictions under event ids; Label applies labels to them
// (server/events/event_book.h, docs/delayed-feedback.md).

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "server/rpc/async_rpc.h"
#include "server/rpc/service.h"
#include "server/rpc/service_internal.h"

namespace okl {
namespace {

v1::LabelOutcome ToProto(LabelOutcome outcome) {
  switch (outcome) {
    case LabelOutcome::kApplied:
      return v1::LABEL_APPLIED;
    case LabelOutcome::kDuplicate:
      return v1::LABEL_DUPLICATE;
    case LabelOutcome::kUnknown:
      return v1::LABEL_UNKNOWN;
  }
  return v1::LABEL_OUTCOME_UNSPECIFIED;
}

}  // namespace

void AddEventCounts(const EventCounts& counts, v1::ModelStats* stats) {
  stats->set_events_pending(counts.pending);
  stats->set_labels_applied(counts.applied);
  stats->set_events_expired(counts.expired);
  stats->set_labels_duplicate(counts.duplicates);
  stats->set_served_loss(counts.served_loss);
  stats->set_served_labels(counts.served_labels);
}

namespace {

// A Predict's `remember` as the book takes it; the book checks it (EventBook::Check).
EventBook::RememberOptions RememberOptionsOf(const v1::Remember& remember) {
  EventBook::RememberOptions options;
  options.event_ids.assign(remember.event_ids().begin(), remember.event_ids().end());
  // absl::Seconds saturates a huge wait to an infinite one; NaN becomes a negative one:
  // the book refuses both.
  const double wait = remember.wait_seconds();
  options.wait = std::isnan(wait) ? -absl::InfiniteDuration() : absl::Seconds(wait);
  if (remember.has_default_label()) options.default_label = remember.default_label();
  return options;
}

}  // namespace

absl::Status OklService::RememberPredicted(Admission& admission,
                                           const v1::PredictRequest& request,
                                           const InputBatch& inputs,
                                           v1::PredictResponse* response) {
  // The model that answered (Predict's WithModel may have found a newer one).
  OKL_ASSIGN_OR_RETURN(
      RememberWriter::Pending pending,
      remember_writer_.Check(*admission.model, inputs,
                             absl::MakeConstSpan(response->predictions().data(),
                                                 response->predictions_size()),
                             RememberOptionsOf(request.remember())));
  admission.deferred_reply = [this, pending = std::move(pending),
                              response](Admission::Reply reply) mutable {
    remember_writer_.Write(
        std::move(pending),
        [response, reply = std::move(reply)](
            absl::StatusOr<std::vector<std::string>> ids) mutable {
          if (!ids.ok()) return std::move(reply)(ids.status());
          for (std::string& id : *ids) response->add_event_ids(std::move(id));
          std::move(reply)(absl::OkStatus());
        });
  };
  return absl::OkStatus();
}

absl::Status OklService::AdmitLabel(const ActiveCall& call, const v1::LabelRequest& request,
                                    Admission* admission) {
  // It writes to the store: offloaded.
  OKL_RETURN_IF_ERROR(CheckBatchSize(request.labels_size(), "labels"));
  OKL_ASSIGN_OR_RETURN(admission->id,
                       AdmitModelCall(call, request.ref(), Role::kWrite, "Label"));
  OKL_ASSIGN_OR_RETURN(admission->model, host_->Find(*admission->id));
  return absl::OkStatus();
}

absl::Status OklService::Label(const ActiveCall&, Admission& admission,
                               const v1::LabelRequest& request, v1::LabelResponse* response) {
  std::vector<std::pair<std::string, double>> labels;
  labels.reserve(request.labels_size());
  for (const v1::EventLabel& label : request.labels()) {
    labels.emplace_back(label.event_id(), label.y());
  }
  EventBook::Labelled labelled;
  uint64_t steps = 0;
  OKL_RETURN_IF_ERROR(host_->WithModelForWrite(
      *admission.id, &admission.model, [&](HostedModel& hosted) -> absl::Status {
        ModelEntry& model = hosted.entry();
        OKL_ASSIGN_OR_RETURN(std::shared_ptr<EventBook> book, hosted.Book());
        OKL_ASSIGN_OR_RETURN(labelled, book->Label(model, labels, absl::Now()));
        OKL_ASSIGN_OR_RETURN(ModelSummary summary, model.Summary());
        steps = summary.stats.steps;
        return absl::OkStatus();
      }));
  for (LabelOutcome outcome : labelled.outcomes) response->add_outcomes(ToProto(outcome));
  for (const Observation& observation : labelled.observations) {
    response->add_predictions(observation.prediction);
    response->add_losses(observation.loss);
  }
  response->set_steps(steps);
  RecordObserved(labelled.observations);
  if (metrics_ != nullptr) {
    for (absl::Duration delay : labelled.delays) metrics_->RecordLabelDelay(delay);
  }
  return absl::OkStatus();
}

}  // namespace okl
