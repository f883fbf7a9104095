// server/rpc/service_snapshot.cc
//
// Snapshot and Restore: a model's state as a stream of bytes out, and in (checked against
// the limits as it arrives, decoded, and installed in place of the model).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/model.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "proto/snapshot_codec.h"
#include "server/events/event_snapshot.h"
#include "server/base/failpoint.h"
#include "server/rpc/service.h"
#include "server/rpc/service_internal.h"
#include "server/rpc/status.h"

namespace okl {

using service_internal::Describe;
using service_internal::IdOf;
using service_internal::IsEmpty;
using service_internal::Names;
using service_internal::WithPrefix;

namespace {

// A Restore reads at most this many bytes before it must have found the snapshot's
// config (Snapshot's first chunk holds it in its first few hundred bytes).
constexpr size_t kMaxRestorePrefixBytes = 64 << 10;

}  // namespace

absl::StatusOr<OklService::ModelSnapshotParts> OklService::EncodeModelSnapshot(
    const ModelKey& id, std::shared_ptr<HostedModel>* found) {
  // WithModel: the model found may have been replaced (Restore) since.
  absl::StatusOr<ModelState> state;
  ModelSnapshotParts parts;
  OKL_RETURN_IF_ERROR(host_->WithModel(id, found, [&](HostedModel& model) -> absl::Status {
    auto export_model = [&] {
      state = model.entry().ExportState();
      return state.status();
    };
    std::shared_ptr<EventBook> book = model.existing_book();
    if (book == nullptr) return export_model();
    OKL_ASSIGN_OR_RETURN(parts.events, book->Capture(export_model));
    return absl::OkStatus();
  }));
  OKL_ASSIGN_OR_RETURN(parts.model, EncodeSnapshot(*state));
  return parts;
}

// Snapshot: the request is admitted on the queue's thread (its model found), the model
// copied and encoded on the offload pool (the copy waits for a batch being applied to
// it); the chunks are written one at a time.
class OklService::SnapshotCall final : public StreamCall {
 public:
  explicit SnapshotCall(OklService* service) : StreamCall(service) {}

 private:
  void OnReadDone(bool ok) override {
    if (absl::Status status = Admit(ok); !status.ok()) {
      Finish(ToGrpcStatus(status));
      return;
    }
    service_->offload_pool_.Schedule([this] {
      absl::StatusOr<ModelSnapshotParts> parts = service_->EncodeModelSnapshot(*id_, &model_);
      if (!parts.ok()) {
        Finish(ToGrpcStatus(parts.status()));
        return;
      }
      bytes_ = std::move(parts->model);
      events_ = std::move(parts->events);
      WriteNext();
    });
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(ToGrpcStatus(absl::CancelledError("the client stopped reading the snapshot")));
      return;
    }
    WriteNext();
  }

  absl::Status Admit(bool ok) {
    OKL_RETURN_IF_ERROR(TakeRequest(ok, &request_));
    OKL_ASSIGN_OR_RETURN(id_,
                         service_->AdmitModelCall(call(), request_, Role::kRead, "Snapshot"));
    OKL_ASSIGN_OR_RETURN(model_, service_->host_->Find(*id_));
    return absl::OkStatus();
  }

  // Writes the model's section chunk by chunk, then the event pages (read from the
  // captured events on the offload pool, one page a chunk: the reads are the store's).
  void WriteNext() {
    if (offset_ < bytes_.size()) {
      chunk_.set_data(bytes_.substr(offset_, kSnapshotChunkBytes));
      offset_ += chunk_.data().size();
      StartWrite(chunk_);
      return;
    }
    if (!events_.has_value()) {
      Finish(grpc::Status::OK);
      return;
    }
    service_->offload_pool_.Schedule([this] {
      absl::StatusOr<std::vector<StoredEvent>> page =
          events_->events->Next(kEventsPerSnapshotPage);
      if (!page.ok()) {
        Finish(ToGrpcStatus(page.status()));
        return;
      }
      // The first page carries the counts, even with no events.
      if (page->empty() && pages_ > 0) {
        events_.reset();
        Finish(grpc::Status::OK);
        return;
      }
      chunk_.set_data(EncodeEventPage(pages_ == 0 ? &events_->counts : nullptr, *page));
      ++pages_;
      StartWrite(chunk_);
    });
  }

  v1::ModelRef request_;
  std::optional<ModelKey> id_;         // admitted
  std::shared_ptr<HostedModel> model_;  // found at admission
  std::string bytes_;                  // the model's section
  size_t offset_ = 0;                  // of the next chunk in bytes_
  std::optional<EventBook::Captured> events_;  // to page after it
  size_t pages_ = 0;                           // event pages written
  v1::SnapshotChunk chunk_;
};

// Holds one of the --max_concurrent_restores slots for its scope, if it got one.
class OklService::RestoreSlot {
 public:
  explicit RestoreSlot(const OklService* service) : service_(service) {
    held_ =
        service_->restores_running_.fetch_add(1) < service_->options_.max_concurrent_restores;
    if (!held_) service_->restores_running_.fetch_sub(1);
  }
  ~RestoreSlot() {
    if (held_) service_->restores_running_.fetch_sub(1);
  }
  RestoreSlot(const RestoreSlot&) = delete;
  RestoreSlot& operator=(const RestoreSlot&) = delete;

  absl::Status status() const {
    if (held_) return absl::OkStatus();
    return absl::ResourceExhaustedError(absl::StrCat(
        "this server runs at most ", service_->options_.max_concurrent_restores,
        " Restores at once (--max_concurrent_restores); retry when one has finished"));
  }

 private:
  const OklService* const service_;
  bool held_ = false;
};

// The state of one Restore: the chunks are added as they arrive, each checked against
// the limits known so far, and Finish() decodes the snapshot and replaces the model.
// Not thread-safe; one per call.
class OklService::RestoreSession {
 public:
  explicit RestoreSession(OklService* service) : service_(service) {}

  // Checks and buffers one chunk, admitted by `call`; an error ends the call.
  absl::Status Add(const ActiveCall& call, const v1::RestoreChunk& chunk) {
    ++chunks_;
    if (chunks_ == 1) {
      absl::StatusOr<ModelKey> id = IdOf(chunk.ref());
      OKL_RETURN_IF_ERROR(WithPrefix("the first RestoreChunk: ", id.status()));
      id_ = *std::move(id);
      OKL_RETURN_IF_ERROR(call.Authorize(Role::kWrite, id_->tenant(), "Restore"));
      // Each Restore buffers one snapshot: bound how many do so at once, counting only
      // authorized ones.
      slot_.emplace(service_);
      OKL_RETURN_IF_ERROR(slot_->status());
      declared_ = chunk.snapshot_bytes();
      if (declared_ > kMaxSnapshotBytes) {
        return absl::ResourceExhaustedError(absl::StrCat("the snapshot declares ", declared_,
                                                         " bytes, over the limit of ",
                                                         kMaxSnapshotBytes));
      }
    } else if (!IsEmpty(chunk.ref()) && !Names(chunk.ref(), *id_)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "RestoreChunk ", chunks_, " names ", Describe(chunk.ref()), " but the first named ",
          id_->Describe(), "; leave ref empty after the first chunk"));
    }
    if (!config_.has_value()) {
      // Only the prefix up to the config is buffered before the limits are checked.
      bytes_.append(chunk.data().substr(0, kMaxRestorePrefixBytes));
      OKL_ASSIGN_OR_RETURN(config_, PeekSnapshotConfig(bytes_));
      if (!config_.has_value()) {
        if (bytes_.size() >= kMaxRestorePrefixBytes) {
          return absl::DataLossError(absl::StrCat("the snapshot's first ", bytes_.size(),
                                                  " bytes hold no config (not a snapshot?)"));
        }
        if (chunk.data().size() > kMaxRestorePrefixBytes) {
          return absl::DataLossError("the snapshot's first chunk holds no config");
        }
        return absl::OkStatus();
      }
      OKL_RETURN_IF_ERROR(WithPrefix("snapshot: ", service_->host_->CheckConfig(*config_)));
      OKL_ASSIGN_OR_RETURN(reservation_, service_->host_->Reserve(*id_, *config_));
      // The model's section, and the pages of as many events as a model may have.
      max_bytes_ = std::min<size_t>(
          kMaxSnapshotBytes,
          SaturatingAdd(
              MaxSnapshotBytes(*config_),
              MaxEventPagesBytes(*config_, service_->host_->event_limits().max_pending)));
      if (declared_ > 0) {
        if (declared_ > max_bytes_) {
          return absl::InvalidArgumentError(
              absl::StrCat("the snapshot declares ", declared_,
                           " bytes, more than a model of its config "
                           "can have (",
                           max_bytes_, "); it is not a snapshot of that config"));
        }
        max_bytes_ = declared_;
      }
      // The rest of this chunk (its prefix is in already).
      bytes_.resize(bytes_.size() - std::min(chunk.data().size(), kMaxRestorePrefixBytes));
      // A declared size (checked against the config's limits, its quota reserved) is
      // reserved whole: growing the buffer would copy what arrived so far, on the
      // queue's thread that every tenant's calls share. Pages are touched only as bytes
      // arrive. An undeclared snapshot grows from at most 64 MiB.
      bytes_.reserve(declared_ > 0 ? declared_
                                   : std::min<size_t>(max_bytes_, size_t{64} << 20));
    }
    if (chunk.data().size() > max_bytes_ - std::min(bytes_.size(), max_bytes_)) {
      return absl::InvalidArgumentError(
          absl::StrCat("the snapshot runs past ", max_bytes_, " bytes, ",
                       declared_ > 0 ? "the size its first chunk declared"
                                     : "the most a model of its config can have",
                       "; it is truncated or not one snapshot"));
    }
    bytes_.append(chunk.data());
    return absl::OkStatus();
  }

  // Once the client half-closed: decodes the snapshot and replaces the model with it.
  absl::Status Finish(grpc::ServerContextBase* context, v1::ModelInfo* response) {
    if (context->IsCancelled()) return absl::CancelledError("Restore cancelled by the client");
    if (chunks_ == 0) {
      return absl::InvalidArgumentError(
          "Restore received no chunks: the first must carry ref, and all of them the data of "
          "one Snapshot");
    }
    if (!config_.has_value()) {
      return absl::DataLossError(
          absl::StrCat("the snapshot is ", bytes_.size(),
                       " bytes, too short to hold its config (truncated?)"));
    }
    if (declared_ > 0 && bytes_.size() != declared_) {
      return absl::DataLossError(absl::StrCat("the snapshot declared ", declared_,
                                              " bytes but the stream carried ", bytes_.size(),
                                              " (truncated?)"));
    }
    Failpoint("restore.received");
    OKL_ASSIGN_OR_RETURN(const SnapshotSections sections, SplitSnapshot(bytes_));
    OKL_ASSIGN_OR_RETURN(ModelState state, DecodeSnapshot(sections.model));
    // Protobuf merges a repeated config field; the limits and quotas were checked against
    // the first one, so a snapshot must hold no other.
    if (CanonicalConfigBytes(state.config) != CanonicalConfigBytes(*config_)) {
      return absl::DataLossError(
          "the snapshot's config differs from the one at its start (a repeated config field)");
    }
    std::optional<SnapshotEvents> events;
    if (!sections.event_pages.empty()) {
      OKL_ASSIGN_OR_RETURN(events, DecodeEventPages(sections.event_pages, state.config));
      const uint64_t max_pending = service_->host_->event_limits().max_pending;
      if (events->counts.pending > max_pending) {
        return absl::ResourceExhaustedError(
            absl::StrCat("the snapshot holds ", events->counts.pending,
                         " pending events; this server keeps at most ", max_pending,
                         " a model (--max_pending_events)"));
      }
    }
    bytes_ = std::string();
    OKL_ASSIGN_OR_RETURN(std::shared_ptr<HostedModel> model,
                         service_->host_->Replace(*id_, state, std::move(reservation_),
                                                  events.has_value() ? &*events : nullptr));
    Failpoint("restore.installed");
    OKL_ASSIGN_OR_RETURN(ModelSummary summary, model->entry().Summary());
    *response = ToProto(summary);
    return absl::OkStatus();
  }

 private:
  OklService* const service_;
  size_t chunks_ = 0;
  std::optional<ModelKey> id_;  // the model the first chunk names
  std::string bytes_;
  // Known once the first bytes are in: the config, its quota reservation, and the most
  // bytes this snapshot may have.
  std::optional<ModelConfig> config_;
  QuotaReservation reservation_;
  uint64_t declared_ = 0;
  size_t max_bytes_ = kMaxRestorePrefixBytes;
  std::optional<RestoreSlot> slot_;
};

// Restore: each chunk is checked and buffered on the queue's thread as it is read (a
// copy, bounded by the limits checked so far); the decode and the store's write run on
// the offload pool.
class OklService::RestoreCall final : public StreamCall {
 public:
  explicit RestoreCall(OklService* service) : StreamCall(service) { session_.emplace(service); }

 private:
  void OnReadDone(bool ok) override {
    if (!ok) {  // the client half-closed (or the call was cancelled)
      service_->offload_pool_.Schedule(
          [this] { FinishWith(session_->Finish(context(), &response_)); });
      return;
    }
    absl::Status status = TakeMessage(&chunk_);
    if (status.ok()) status = session_->Add(call(), chunk_);
    if (!status.ok()) {
      FinishWith(status);
      return;
    }
    StartRead();
  }

  // Ends the session before the status is sent, so that its buffer, quota reservation and
  // --max_concurrent_restores slot are free by the time the client sees the answer.
  void FinishWith(const absl::Status& status) {
    session_.reset();
    Finish(ToGrpcStatus(status), &response_);
  }

  std::optional<RestoreSession> session_;
  v1::RestoreChunk chunk_;
  v1::ModelInfo response_;
};

AsyncCall* OklService::NewSnapshotCall() { return new SnapshotCall(this); }

AsyncCall* OklService::NewRestoreCall() { return new RestoreCall(this); }

}  // namespace okl
