// server/rpc/health_service.cc

#include "server/rpc/health_service.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace okl {

using ::grpc::health::v1::HealthCheckRequest;
using ::grpc::health::v1::HealthCheckResponse;

namespace {

HealthService::ServingStatus ToServingStatus(bool serving) {
  return serving ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
}

}  // namespace

// One Watch: sends the status it was registered with, then each change. One write at a
// time: a change that arrives while one is in flight is sent after it, only the latest.
// Its state is locked: changes come from any thread, the call's events from its queue's.
class HealthService::WatchCall final : public AsyncCall {
 public:
  explicit WatchCall(HealthService* health) : health_(health) {}

  // The service's status changed to `status`; with `end`, the stream then ends.
  void Update(ServingStatus status, bool end) ABSL_LOCKS_EXCLUDED(mu_) {
    PlainLock lock(&mu_);
    next_ = status;
    end_ = end_ || end;
    SendLocked();
  }

 private:
  void OnStart() override {
    PlainLock lock(&mu_);
    reading_ = true;
    StartRead();
  }

  void OnReadDone(bool ok) override {
    // A call's events come one at a time, on its queue's thread: done_ cannot change
    // until this returns, and a call already done is not registered.
    bool done = false;
    {
      PlainLock lock(&mu_);
      done = done_;
    }
    HealthCheckRequest request;
    const absl::Status parsed = TakeRequest(ok, &request);
    std::optional<ServingStatus> first;
    if (parsed.ok() && !done) first = health_->AddWatch(this, request.service());
    PlainLock lock(&mu_);
    reading_ = false;
    if (!parsed.ok()) {
      FinishLocked(ToGrpcStatus(parsed));
    } else if (!first.has_value()) {
      SendLocked();  // done, or the server is shutting down: ends the stream
    } else {
      if (!next_.has_value()) next_ = first;  // an Update may have come first
      SendLocked();
    }
  }

  void OnWriteDone(bool ok) override {
    PlainLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "the watch ended"));
      return;
    }
    SendLocked();
  }

  void OnDone() override {
    health_->RemoveWatch(this);
    PlainLock lock(&mu_);
    done_ = true;
    SendLocked();
  }

  // Writes the latest status if it is new; ends the stream once nothing is left to send
  // after Shutdown.
  void SendLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || reading_ || writing_) return;
    if (done_) {
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "the watch was cancelled"));
      return;
    }
    if (next_.has_value() && next_ != sent_) {
      sent_ = next_;
      HealthCheckResponse response;
      response.set_status(*next_);
      writing_ = true;
      StartWrite(response);
      return;
    }
    if (end_ || sent_ == std::nullopt) {  // nothing was sent: Shutdown() came first
      FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down"));
    }
  }

  // Finishes once, when no read or write is outstanding (their completions come back
  // here).
  void FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || reading_ || writing_) return;
    finished_ = true;
    Finish(status);
  }

  HealthService* const health_;
  PlainMutex mu_;
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool end_ ABSL_GUARDED_BY(mu_) = false;
  // gRPC reported the call done (cancelled, or finished): finish if not yet.
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<ServingStatus> next_ ABSL_GUARDED_BY(mu_);  // the latest status to send
  std::optional<ServingStatus> sent_ ABSL_GUARDED_BY(mu_);
};

HealthService::HealthService() {
  check_ = [this](CheckCall* call) {
    const ServingStatus status = Status(call->request().service());
    if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
      call->Reply(grpc::Status(grpc::StatusCode::NOT_FOUND,
                               absl::StrCat("unknown service \"", call->request().service(),
                                            "\"")));
      return;
    }
    call->response()->set_status(status);
    call->Reply(grpc::Status::OK);
  };
  AddRawMethod("/grpc.health.v1.Health/Check", [this] { return new CheckCall(&check_); });
  AddRawMethod("/grpc.health.v1.Health/Watch", [this] { return new WatchCall(this); });
}

void HealthService::SetServing(absl::string_view service, bool serving) {
  WriterLock lock(&mu_);
  serving_[service] = serving;
  for (const auto& [watch, watched] : watches_) {
    if (watched == service) watch->Update(ToServingStatus(serving), /*end=*/false);
  }
}

HealthService::ServingStatus HealthService::Status(absl::string_view service) const {
  ReaderLock lock(&mu_);
  auto it = serving_.find(service);
  if (it == serving_.end()) return HealthCheckResponse::SERVICE_UNKNOWN;
  return ToServingStatus(it->second);
}

void HealthService::Shutdown() {
  WriterLock lock(&mu_);
  shut_down_ = true;
  for (auto& [service, serving] : serving_) serving = false;
  for (const auto& [watch, watched] : watches_) {
    watch->Update(serving_.contains(watched) ? HealthCheckResponse::NOT_SERVING
                                             : HealthCheckResponse::SERVICE_UNKNOWN,
                  /*end=*/true);
  }
}

std::optional<HealthService::ServingStatus> HealthService::AddWatch(WatchCall* watch,
                                                                   const std::string& service) {
  WriterLock lock(&mu_);
  if (shut_down_) return std::nullopt;
  watches_[watch] = service;
  auto it = serving_.find(service);
  if (it == serving_.end()) return HealthCheckResponse::SERVICE_UNKNOWN;
  return ToServingStatus(it->second);
}

void HealthService::RemoveWatch(WatchCall* watch) {
  WriterLock lock(&mu_);
  watches_.erase(watch);
}

}  // namespace okl
