// client/client_internal.h
//
// What client.cc and observe_writer.cc share, and nothing outside them includes: the
// generated stubs behind a Client, and the rules every call follows (its context, the
// retry backoff, what a refused write's trailers say).
#ifndef OKL_CLIENT_CLIENT_INTERNAL_H_
#define OKL_CLIENT_CLIENT_INTERNAL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "okl/v1/okl.grpc.pb.h"

namespace okl {

class Client::Stub {
 public:
  explicit Stub(const std::shared_ptr<grpc::Channel>& channel)
      : okl(v1::OnlineKernelLearning::NewStub(channel)),
        health(grpc::health::v1::Health::NewStub(channel)) {}

  // Generated stubs are thread-safe; their methods are merely not const.
  const std::unique_ptr<v1::OnlineKernelLearning::Stub> okl;
  const std::unique_ptr<grpc::health::v1::Health::Stub> health;
};

namespace client_internal {

// The codes are the same numbers on both sides; the message is kept as it is.
absl::Status FromGrpcStatus(const grpc::Status& status);
// gRPC rejects metadata values outside printable ASCII.
bool IsPrintableAscii(absl::string_view value);
// The deadline, the tenant for routing and the credentials of one call.
void PrepareContext(const ClientOptions& options, absl::string_view tenant, absl::Time deadline,
                    grpc::ClientContext* context);
// `backoff` give or take 20%, so that clients refused together do not retry together.
absl::Duration Jittered(absl::Duration backoff);
// How many of a failed call's messages were applied, when that is known; -1 otherwise
// (see client.cc).
int64_t BatchesApplied(const grpc::ClientContext& context, const grpc::Status& status);
std::vector<double> ToVector(const google::protobuf::RepeatedField<double>& values);

}  // namespace client_internal
}  // namespace okl

#endif  // OKL_CLIENT_CLIENT_INTERNAL_H_
