// server/rpc/service_internal.h
//
// What OklService's three source files share, and nothing outside them includes:
// the call's admission (ActiveCall), the base of the streaming calls, and the checks
// every handler makes. service.cc holds the unary calls and their registration;
// service_observe.cc Observe and ObserveStream; service_snapshot.cc Snapshot and Restore;
// service_label.cc a Predict's remember and Label.
#ifndef OKL_SERVER_RPC_SERVICE_INTERNAL_H_
#define OKL_SERVER_RPC_SERVICE_INTERNAL_H_

#include <grpcpp/grpcpp.h>

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/runtime/model_key.h"
#include "okl/v1/okl.pb.h"
#include "proto/bearer_token.h"
#include "server/rpc/async_rpc.h"
#include "server/rpc/service.h"

namespace okl {

// One okl call: counted in flight for its lifetime; checks, once counted, that the
// service is serving and that the call carries a valid token; then authorizes each
// tenant the call touches and takes it from the tenant's request rate. Movable, so that
// a unary call admitted on a queue's thread stays counted while it waits for the pool.
class OklService::ActiveCall {
 public:
  ActiveCall(const OklService* service, const grpc::ServerContextBase* context);
  ~ActiveCall();

  ActiveCall(ActiveCall&& other) noexcept;
  ActiveCall& operator=(ActiveCall&&) = delete;
  ActiveCall(const ActiveCall&) = delete;
  ActiveCall& operator=(const ActiveCall&) = delete;

  // UNAVAILABLE if the service is starting or draining, UNAUTHENTICATED without a valid
  // token.
  const absl::Status& status() const { return status_; }

  // PERMISSION_DENIED unless the token grants `needed` on `tenant` (`method` names the
  // call in the message); then RESOURCE_EXHAUSTED if the tenant is over its request rate.
  // Each message of a stream is authorized again: a token revoked (SIGHUP) while the
  // stream is open stops it at its next message.
  absl::Status Authorize(Role needed, absl::string_view tenant, absl::string_view method) const;

  // Authorize without taking from the tenant's request rate: for an admin's call, which a
  // tenant at its rate limit must not block.
  absl::Status CheckGrant(Role needed, absl::string_view tenant,
                          absl::string_view method) const;

  // True if the call may see `tenant`'s models (ListModels without a tenant).
  bool CanRead(absl::string_view tenant) const {
    return !grant_.has_value() || grant_->Allows(Role::kRead, tenant);
  }

 private:
  const OklService* service_;  // null once moved from
  absl::Status status_;
  // The call's authorization metadata (gRPC keeps it for the call's life).
  absl::string_view authorization_;
  mutable std::optional<Grant> grant_;  // none: authentication is off
  mutable int authorizations_ = 0;
};

// A streaming call of the service: in flight from its arrival, refused at once unless
// the service is serving and the token valid; then it reads its first message, and the
// subclass takes over in OnReadDone.
class OklService::StreamCall : public AsyncCall {
 protected:
  explicit StreamCall(OklService* service) : service_(service) {}

  // The call's admission; set from OnStart on.
  const ActiveCall& call() const { return *call_; }

  OklService* const service_;

 private:
  void OnStart() final;

  std::optional<ActiveCall> call_;  // in flight until the call is deleted
};

namespace service_internal {

bool IsEmpty(const v1::ModelRef& ref);
// True if `ref` names `id`.
bool Names(const v1::ModelRef& ref, const ModelKey& id);
std::string Describe(const v1::ModelRef& ref);
// The model `ref` names: InvalidArgument if it is missing or a name is invalid. Every
// name a request carries is checked here, once, at the edge.
absl::StatusOr<ModelKey> IdOf(const v1::ModelRef& ref);
// `status` with `prefix` before its message (OK stays OK).
absl::Status WithPrefix(absl::string_view prefix, const absl::Status& status);
// CANCELLED (or DEADLINE_EXCEEDED) once the client gave up on the call; `progress` says
// what was done.
absl::Status CheckNotCancelled(grpc::ServerContextBase* context, absl::string_view progress);

}  // namespace service_internal
// Sets the delayed-feedback fields of `stats` (events_pending ... served_labels).
void AddEventCounts(const EventCounts& counts, v1::ModelStats* stats);

}  // namespace okl

#endif  // OKL_SERVER_RPC_SERVICE_INTERNAL_H_
