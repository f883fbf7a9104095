// server/rpc/status.h
//
// The one mapping from absl::Status (core and the conversions) to grpc::Status (the
// wire): the canonical codes are the same numbers in both, so the code is cast and the
// message kept. Thread-safe.
//
// Example:
//   grpc::Status Get(...) override { return okl::ToGrpcStatus(DoGet(...)); }
#ifndef OKL_SERVER_RPC_STATUS_H_
#define OKL_SERVER_RPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace okl {

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace okl

#endif  // OKL_SERVER_RPC_STATUS_H_
