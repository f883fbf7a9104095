// server/etcd/etcd_client.cc

#include "server/etcd/etcd_client.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "core/status_macros.h"
#include "etcd/etcdserver/api/v3election/v3electionpb/v3election.grpc.pb.h"
#include "etcd/etcdserver/api/v3election/v3electionpb/v3election.pb.h"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"
#include "etcd/etcdserver/etcdserverpb/rpc.pb.h"
#include "etcd/mvcc/mvccpb/kv.pb.h"
#include "grpcpp/grpcpp.h"

namespace okl::etcd {

struct EtcdClient::Endpoint {
  std::string address;  // HOST:PORT
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<etcdserverpb::KV::Stub> kv;
  std::unique_ptr<etcdserverpb::Lease::Stub> lease;
  std::unique_ptr<etcdserverpb::Maintenance::Stub> maintenance;
  std::unique_ptr<v3electionpb::Election::Stub> election;
};

namespace {

// gRPC's reconnect backoff grows to 120 s by default, and a call on a channel waiting out
// its backoff fails at once: a client that saw etcd down for a while would keep failing for
// up to two minutes after etcd came back. Leadership cannot wait that long.
constexpr int kMaxReconnectBackoffMs = 2000;

// What to say of a request etcd refuses as too large.
constexpr absl::string_view kRequestLimit =
    "etcd's --max-request-bytes bounds one request (1.5 MiB by default): write less per "
    "call, or raise it";

absl::StatusOr<std::vector<std::string>> ParseEndpoints(absl::string_view text) {
  std::vector<std::string> endpoints;
  for (absl::string_view piece : absl::StrSplit(text, ',')) {
    absl::string_view endpoint = absl::StripAsciiWhitespace(piece);
    if (absl::StartsWith(endpoint, "https://")) {
      return absl::InvalidArgumentError(
          absl::StrCat("etcd endpoint \"", endpoint,
                       "\": TLS to etcd is not supported yet; serve okl's clients on http://"));
    }
    absl::ConsumePrefix(&endpoint, "http://");
    absl::ConsumeSuffix(&endpoint, "/");
    const size_t colon = endpoint.rfind(':');
    int port = 0;
    if (colon == absl::string_view::npos || colon == 0 ||
        !absl::SimpleAtoi(endpoint.substr(colon + 1), &port) || port < 1 || port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat(
          "etcd endpoint \"", piece, "\" in \"", text,
          "\" is not HOST:PORT; give etcd's client addresses as HOST:PORT,HOST:PORT,... "
          "(e.g. 127.0.0.1:2379)"));
    }
    endpoints.emplace_back(endpoint);
  }
  return endpoints;
}

// The first key after every key that starts with `prefix` (etcd's range_end for a
// prefix): the prefix with its last byte below 0xff incremented and what follows dropped;
// "\0" (the end of the keyspace) for a prefix of 0xff bytes only, or an empty one.
std::string PrefixEnd(absl::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    unsigned char& last = reinterpret_cast<unsigned char&>(end.back());
    if (last < 0xff) {
      ++last;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

// A key in a message: quoted, with anything unprintable escaped.
std::string Quoted(absl::string_view key) {
  return absl::StrCat("\"", absl::CHexEscape(key), "\"");
}

std::string LeaseName(int64_t lease) { return absl::StrFormat("lease %x", lease); }

// etcd's answer as an absl::Status: its code, and a message that names the endpoint and
// the call and says what to do. Messages starting "etcdserver: " are etcd's own
// (etcdserver/api/v3rpc/rpctypes/error.go); other UNAVAILABLEs are gRPC's, from the
// connection.
absl::Status EtcdError(const grpc::Status& status, absl::string_view address,
                       absl::string_view what, absl::Duration timeout) {
  const std::string& message = status.error_message();
  const std::string where = absl::StrCat("etcd at ", address);
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      if (message == "etcdserver: no leader") {
        return absl::UnavailableError(absl::StrCat(
            where, " has no quorum (", message, "; ", what,
            "): a majority of the cluster's members must be up and reach each other"));
      }
      if (absl::StartsWith(message, "etcdserver: ")) {
        return absl::UnavailableError(
            absl::StrCat(where, ": ", what, ": ", message,
                         " (a leader election, or a cluster losing quorum); retry"));
      }
      return absl::UnavailableError(
          absl::StrCat(where, " unreachable (", what, ": ", message,
                       "): check that etcd runs there and serves clients at that address "
                       "(its --listen-client-urls)"));
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return absl::DeadlineExceededError(
          absl::StrCat(where, " did not complete ", what, " within ",
                       absl::FormatDuration(absl::Ceil(timeout, absl::Milliseconds(1)))));
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      // etcd's gRPC server (grpc-go) refuses a request above --max-request-bytes plus
      // 512 KiB before etcd sees it; gRPC C++ (this client) a response above our limit.
      if (absl::StartsWith(message, "grpc: received message larger than max")) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, " refused ", what, " as too large (", message, "): ", kRequestLimit));
      }
      if (absl::StrContains(message, "eceived message larger than max")) {
        return absl::ResourceExhaustedError(absl::StrCat(
            where, ": the response to ", what, " is too large (", message,
            "): raise EtcdClientOptions::max_receive_message_bytes, or read in pages "
            "(Range's limit)"));
      }
      break;
    case grpc::StatusCode::INVALID_ARGUMENT:
      if (message == "etcdserver: request is too large") {
        return absl::InvalidArgumentError(
            absl::StrCat(where, " refused ", what, " (", message, "): ", kRequestLimit));
      }
      break;
    case grpc::StatusCode::NOT_FOUND:
      if (message == "etcdserver: requested lease not found") {
        return absl::NotFoundError(absl::StrCat(
            where, ": ", what, ": the lease expired or was revoked (", message, ")"));
      }
      break;
    case grpc::StatusCode::UNKNOWN:
      // The election service returns its errors as plain Go errors
      // (clientv3/concurrency/election.go), which gRPC sends as UNKNOWN.
      if (message == "election: no leader") {
        return absl::NotFoundError(
            absl::StrCat(where, ": ", what, ": the election has no leader (", message, ")"));
      }
      if (message == "election: not leader") {
        return absl::FailedPreconditionError(
            absl::StrCat(where, ": ", what,
                         ": no longer the leader: its leader key is gone (resigned, or its "
                         "lease ended) (",
                         message, ")"));
      }
      break;
    default:
      break;
  }
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(where, ": ", what, ": ", message));
}

// What the lease calls say of a lease etcd does not know, as EtcdError says it for
// LeaseRevoke.
absl::Status LeaseGone(absl::string_view address, absl::string_view what) {
  return absl::NotFoundError(
      absl::StrCat("etcd at ", address, ": ", what, ": the lease expired or was revoked"));
}

KeyValue FromProto(const mvccpb::KeyValue& kv) {
  return {.key = kv.key(),
          .value = kv.value(),
          .create_revision = kv.create_revision(),
          .mod_revision = kv.mod_revision(),
          .version = kv.version(),
          .lease = kv.lease()};
}

etcdserverpb::Compare ToProto(const Compare& compare) {
  etcdserverpb::Compare proto;
  proto.set_key(compare.key);
  switch (compare.op) {
    case Compare::Op::kEqual:
      proto.set_result(etcdserverpb::Compare::EQUAL);
      break;
    case Compare::Op::kNotEqual:
      proto.set_result(etcdserverpb::Compare::NOT_EQUAL);
      break;
    case Compare::Op::kGreater:
      proto.set_result(etcdserverpb::Compare::GREATER);
      break;
    case Compare::Op::kLess:
      proto.set_result(etcdserverpb::Compare::LESS);
      break;
  }
  switch (compare.target) {
    case Compare::Target::kCreateRevision:
      proto.set_target(etcdserverpb::Compare::CREATE);
      proto.set_create_revision(compare.number);
      break;
    case Compare::Target::kModRevision:
      proto.set_target(etcdserverpb::Compare::MOD);
      proto.set_mod_revision(compare.number);
      break;
    case Compare::Target::kVersion:
      proto.set_target(etcdserverpb::Compare::VERSION);
      proto.set_version(compare.number);
      break;
    case Compare::Target::kValue:
      proto.set_target(etcdserverpb::Compare::VALUE);
      proto.set_value(compare.value);
      break;
  }
  return proto;
}

void ToProto(const Write& write, etcdserverpb::RequestOp* proto) {
  switch (write.kind) {
    case Write::Kind::kPut: {
      etcdserverpb::PutRequest* put = proto->mutable_request_put();
      put->set_key(write.key);
      put->set_value(write.value);
      put->set_lease(write.lease);
      break;
    }
    case Write::Kind::kDelete:
      proto->mutable_request_delete_range()->set_key(write.key);
      break;
    case Write::Kind::kDeletePrefix: {
      etcdserverpb::DeleteRangeRequest* del = proto->mutable_request_delete_range();
      del->set_key(write.key);
      del->set_range_end(PrefixEnd(write.key));
      break;
    }
  }
}

v3electionpb::LeaderKey ToProto(const LeaderKey& leader) {
  v3electionpb::LeaderKey proto;
  proto.set_name(leader.name);
  proto.set_key(leader.key);
  proto.set_rev(leader.create_revision);
  proto.set_lease(leader.lease);
  return proto;
}

}  // namespace

Compare Compare::CreateRevisionIs(absl::string_view key, int64_t revision) {
  return {.key = std::string(key), .target = Target::kCreateRevision, .number = revision};
}

Compare Compare::ModRevisionIs(absl::string_view key, int64_t revision) {
  return {.key = std::string(key), .target = Target::kModRevision, .number = revision};
}

Compare Compare::ValueIs(absl::string_view key, absl::string_view value) {
  return {.key = std::string(key), .target = Target::kValue, .value = std::string(value)};
}

Write Write::Put(absl::string_view key, absl::string_view value, int64_t lease) {
  return {
      .kind = Kind::kPut, .key = std::string(key), .value = std::string(value), .lease = lease};
}

Write Write::Delete(absl::string_view key) {
  return {.kind = Kind::kDelete, .key = std::string(key)};
}

Write Write::DeletePrefix(absl::string_view prefix) {
  return {.kind = Kind::kDeletePrefix, .key = std::string(prefix)};
}

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(EtcdClientOptions options) {
  OKL_ASSIGN_OR_RETURN(std::vector<std::string> addresses, ParseEndpoints(options.endpoints));
  if (options.call_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("EtcdClientOptions::call_timeout must be positive, got ",
                     absl::FormatDuration(options.call_timeout)));
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kMaxReconnectBackoffMs);
  // Connections of this client's own, not shared with other channels to the same address
  // in the process: a subchannel that another client saw fail would make our first call
  // there wait out its reconnect backoff instead of failing (and moving on) at once.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  std::vector<std::unique_ptr<Endpoint>> endpoints;
  for (std::string& address : addresses) {
    auto endpoint = std::make_unique<Endpoint>();
    endpoint->channel =
        grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
    endpoint->kv = etcdserverpb::KV::NewStub(endpoint->channel);
    endpoint->lease = etcdserverpb::Lease::NewStub(endpoint->channel);
    endpoint->maintenance = etcdserverpb::Maintenance::NewStub(endpoint->channel);
    endpoint->election = v3electionpb::Election::NewStub(endpoint->channel);
    endpoint->address = std::move(address);
    endpoints.push_back(std::move(endpoint));
  }
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(options), std::move(endpoints)));
}

EtcdClient::EtcdClient(EtcdClientOptions options,
                       std::vector<std::unique_ptr<Endpoint>> endpoints)
    : options_(std::move(options)), endpoints_(std::move(endpoints)) {}

EtcdClient::~EtcdClient() = default;

std::vector<std::string> EtcdClient::endpoints() const {
  std::vector<std::string> addresses;
  for (const std::unique_ptr<Endpoint>& endpoint : endpoints_) {
    addresses.push_back(endpoint->address);
  }
  return addresses;
}

template <typename Call>
absl::Status EtcdClient::Run(absl::string_view what, bool read, absl::Time deadline,
                             Call call) {
  const absl::Time started = absl::Now();
  const size_t count = endpoints_.size();
  // Start at the preferred endpoint, or after it at the first whose connection is not
  // failing: nothing has been sent to one passed over, so any call may skip it.
  size_t first = preferred_.load(std::memory_order_relaxed) % count;
  for (size_t i = 0; i < count; ++i) {
    const size_t index = (first + i) % count;
    if (endpoints_[index]->channel->GetState(/*try_to_connect=*/false) !=
        GRPC_CHANNEL_TRANSIENT_FAILURE) {
      first = index;
      break;
    }
  }
  absl::Status error;
  for (size_t attempt = 0; attempt < count; ++attempt) {
    const size_t index = (first + attempt) % count;
    const Endpoint& endpoint = *endpoints_[index];
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(deadline));
    grpc::Status status = call(endpoint, &context);
    if (status.ok()) {
      preferred_.store(index, std::memory_order_relaxed);
      return absl::OkStatus();
    }
    error = EtcdError(status, endpoint.address, what, deadline - started);
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return error;
    // This endpoint is down or without quorum: the next call starts at the next one (unless
    // another call already moved on).
    size_t expected = index;
    preferred_.compare_exchange_strong(expected, (index + 1) % count,
                                       std::memory_order_relaxed);
    if (!read || absl::Now() >= deadline) return error;
  }
  return error;
}

namespace {

// Every call but Status asks etcd to refuse it at once on a member without a leader
// ("etcdserver: no leader", etcdserver/api/v3rpc/interceptor.go), instead of waiting out
// the deadline; a read then moves on to another member.
void RequireLeader(grpc::ClientContext* context) { context->AddMetadata("hasleader", "true"); }

}  // namespace

absl::StatusOr<std::optional<KeyValue>> EtcdClient::Get(absl::string_view key) {
  etcdserverpb::RangeRequest request;
  request.set_key(std::string(key));
  etcdserverpb::RangeResponse response;
  OKL_RETURN_IF_ERROR(Run(absl::StrCat("Get(", Quoted(key), ")"), /*read=*/true,
                          absl::Now() + options_.call_timeout,
                          [&](const Endpoint& endpoint, grpc::ClientContext* context) {
                            RequireLeader(context);
                            return endpoint.kv->Range(context, request, &response);
                          }));
  if (response.kvs_size() == 0) return std::nullopt;
  return FromProto(response.kvs(0));
}

absl::StatusOr<RangeResult> EtcdClient::Range(absl::string_view prefix, int64_t limit) {
  etcdserverpb::RangeRequest request;
  // etcd reads "\0" as "from the first key" as a range's start, and as "to the last" as
  // its end.
  request.set_key(prefix.empty() ? std::string(1, '\0') : std::string(prefix));
  request.set_range_end(PrefixEnd(prefix));
  request.set_limit(limit);
  etcdserverpb::RangeResponse response;
  OKL_RETURN_IF_ERROR(Run(absl::StrCat("Range(", Quoted(prefix), ")"), /*read=*/true,
                          absl::Now() + options_.call_timeout,
                          [&](const Endpoint& endpoint, grpc::ClientContext* context) {
                            RequireLeader(context);
                            return endpoint.kv->Range(context, request, &response);
                          }));
  RangeResult result;
  result.kvs.reserve(response.kvs_size());
  for (const mvccpb::KeyValue& kv : response.kvs()) result.kvs.push_back(FromProto(kv));
  result.count = response.count();
  result.more = response.more();
  result.revision = response.header().revision();
  return result;
}

absl::StatusOr<int64_t> EtcdClient::Put(absl::string_view key, absl::string_view value,
                                        int64_t lease) {
  etcdserverpb::PutRequest request;
  request.set_key(std::string(key));
  request.set_value(std::string(value));
  request.set_lease(lease);
  etcdserverpb::PutResponse response;
  OKL_RETURN_IF_ERROR(Run(absl::StrCat("Put(", Quoted(key), ")"), /*read=*/false,
                          absl::Now() + options_.call_timeout,
                          [&](const Endpoint& endpoint, grpc::ClientContext* context) {
                            RequireLeader(context);
                            return endpoint.kv->Put(context, request, &response);
                          }));
  return response.header().revision();
}

absl::StatusOr<int64_t> EtcdClient::Delete(absl::string_view key) {
  etcdserverpb::DeleteRangeRequest request;
  request.set_key(std::string(key));
  etcdserverpb::DeleteRangeResponse response;
  OKL_RETURN_IF_ERROR(Run(absl::StrCat("Delete(", Quoted(key), ")"), /*read=*/false,
                          absl::Now() + options_.call_timeout,
                          [&](const Endpoint& endpoint, grpc::ClientContext* context) {
                            RequireLeader(context);
                            return endpoint.kv->DeleteRange(context, request, &response);
                          }));
  return response.deleted();
}

absl::StatusOr<int64_t> EtcdClient::DeletePrefix(absl::string_view prefix) {
  if (prefix.empty()) {
    return absl::InvalidArgumentError(
        "DeletePrefix needs a prefix: \"\" would delete every key");
  }
  etcdserverpb::DeleteRangeRequest request;
  request.set_key(std::string(prefix));
  request.set_range_end(PrefixEnd(prefix));
  etcdserverpb::DeleteRangeResponse response;
  OKL_RETURN_IF_ERROR(Run(absl::StrCat("DeletePrefix(", Quoted(prefix), ")"), /*read=*/false,
                          absl::Now() + options_.call_timeout,
                          [&](const Endpoint& endpoint, grpc::ClientContext* context) {
                            RequireLeader(context);
                            return endpoint.kv->DeleteRange(context, request, &response);
                          }));
  return response.deleted();
}

absl::StatusOr<TxnResult> EtcdClient::Txn(absl::Span<const Compare> compares,
                                          absl::Span<const Write> writes) {
  etcdserverpb::TxnRequest request;
  for (const Compare& compare : compares) *request.add_compare() = ToProto(compare);
  for (const Write& write : writes) {
    if (write.kind == Write::Kind::kDeletePrefix && write.key.empty()) {
      return absl::InvalidArgumentError(
          "Write::DeletePrefix needs a prefix: \"\" would delete every key");
    }
    ToProto(write, request.add_success());
  }
  etcdserverpb::TxnResponse response;
  const std::string what =
      absl::StrCat("Txn(", compares.size(), " compares, ", writes.size(), " writes",
                   writes.empty() ? "" : absl::StrCat(", first ", Quoted(writes[0].key)), ")");
  OKL_RETURN_IF_ERROR(Run(what, /*read=*/false, absl::Now() + options_.call_timeout,
                          [&](const Endpoint& endpoint, grpc::ClientContext* context) {
                            RequireLeader(context);
                            return endpoint.kv->Txn(context, request, &response);
                          }));
  return TxnResult{.succeeded = response.succeeded(), .revision = response.header().revision()};
}

absl::StatusOr<Lease> EtcdClient::LeaseGrant(int64_t ttl_seconds) {
  if (ttl_seconds <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("LeaseGrant: the TTL must be positive, got ", ttl_seconds, " s"));
  }
  etcdserverpb::LeaseGrantRequest request;
  request.set_ttl(ttl_seconds);
  etcdserverpb::LeaseGrantResponse response;
  const std::string what = absl::StrCat("LeaseGrant(", ttl_seconds, " s)");
  OKL_RETURN_IF_ERROR(Run(what, /*read=*/false, absl::Now() + options_.call_timeout,
                          [&](const Endpoint& endpoint, grpc::ClientContext* context) {
                            RequireLeader(context);
                            return endpoint.lease->LeaseGrant(context, request, &response);
                          }));
  if (!response.error().empty()) {
    return absl::InternalError(absl::StrCat("etcd: ", what, ": ", response.error()));
  }
  return Lease{.id = response.id(), .ttl_seconds = response.ttl()};
}

absl::StatusOr<int64_t> EtcdClient::LeaseKeepAliveOnce(int64_t lease) {
  etcdserverpb::LeaseKeepAliveRequest request;
  request.set_id(lease);
  etcdserverpb::LeaseKeepAliveResponse response;
  const std::string what = absl::StrCat("LeaseKeepAlive(", LeaseName(lease), ")");
  std::string address;
  // A renewal repeated is a renewal: safe to retry on another member.
  OKL_RETURN_IF_ERROR(
      Run(what, /*read=*/true, absl::Now() + options_.call_timeout,
          [&](const Endpoint& endpoint, grpc::ClientContext* context) {
            address = endpoint.address;
            RequireLeader(context);
            std::unique_ptr<grpc::ClientReaderWriter<etcdserverpb::LeaseKeepAliveRequest,
                                                     etcdserverpb::LeaseKeepAliveResponse>>
                stream = endpoint.lease->LeaseKeepAlive(context);
            // After our half-close etcd ends the stream once it has answered the request.
            if (!stream->Write(request) || !stream->WritesDone() || !stream->Read(&response)) {
              grpc::Status status = stream->Finish();
              if (!status.ok()) return status;
              return grpc::Status(grpc::StatusCode::INTERNAL,
                                  "the keep-alive stream ended without an answer");
            }
            return stream->Finish();
          }));
  // etcd answers a lease it does not know with TTL 0 rather than an error.
  if (response.ttl() <= 0) return LeaseGone(address, what);
  return response.ttl();
}

absl::StatusOr<int64_t> EtcdClient::LeaseTimeToLive(int64_t lease) {
  etcdserverpb::LeaseTimeToLiveRequest request;
  request.set_id(lease);
  etcdserverpb::LeaseTimeToLiveResponse response;
  const std::string what = absl::StrCat("LeaseTimeToLive(", LeaseName(lease), ")");
  std::string address;
  OKL_RETURN_IF_ERROR(Run(what, /*read=*/true, absl::Now() + options_.call_timeout,
                          [&](const Endpoint& endpoint, grpc::ClientContext* context) {
                            address = endpoint.address;
                            RequireLeader(context);
                            return endpoint.lease->LeaseTimeToLive(context, request, &response);
                          }));
  // etcd answers a lease it does not know with TTL -1 rather than an error.
  if (response.ttl() < 0) return LeaseGone(address, what);
  return response.ttl();
}

absl::Status EtcdClient::LeaseRevoke(int64_t lease) {
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(lease);
  etcdserverpb::LeaseRevokeResponse response;
  return Run(absl::StrCat("LeaseRevoke(", LeaseName(lease), ")"), /*read=*/false,
             absl::Now() + options_.call_timeout,
             [&](const Endpoint& endpoint, grpc::ClientContext* context) {
               RequireLeader(context);
               return endpoint.lease->LeaseRevoke(context, request, &response);
             });
}

absl::StatusOr<LeaderKey> EtcdClient::Campaign(absl::string_view name, int64_t lease,
                                               absl::string_view value, absl::Time deadline) {
  v3electionpb::CampaignRequest request;
  request.set_name(std::string(name));
  request.set_lease(lease);
  request.set_value(std::string(value));
  v3electionpb::CampaignResponse response;
  OKL_RETURN_IF_ERROR(Run(absl::StrCat("Campaign(", Quoted(name), ", ", LeaseName(lease), ")"),
                          /*read=*/false, deadline,
                          [&](const Endpoint& endpoint, grpc::ClientContext* context) {
                            RequireLeader(context);
                            return endpoint.election->Campaign(context, request, &response);
                          }));
  const v3electionpb::LeaderKey& leader = response.leader();
  return LeaderKey{.name = leader.name(),
                   .key = leader.key(),
                   .create_revision = leader.rev(),
                   .lease = leader.lease()};
}

absl::Status EtcdClient::Proclaim(const LeaderKey& leader, absl::string_view value) {
  v3electionpb::ProclaimRequest request;
  *request.mutable_leader() = ToProto(leader);
  request.set_value(std::string(value));
  v3electionpb::ProclaimResponse response;
  return Run(absl::StrCat("Proclaim(", Quoted(leader.key), ")"), /*read=*/false,
             absl::Now() + options_.call_timeout,
             [&](const Endpoint& endpoint, grpc::ClientContext* context) {
               RequireLeader(context);
               return endpoint.election->Proclaim(context, request, &response);
             });
}

absl::Status EtcdClient::Resign(const LeaderKey& leader) {
  v3electionpb::ResignRequest request;
  *request.mutable_leader() = ToProto(leader);
  v3electionpb::ResignResponse response;
  return Run(absl::StrCat("Resign(", Quoted(leader.key), ")"), /*read=*/false,
             absl::Now() + options_.call_timeout,
             [&](const Endpoint& endpoint, grpc::ClientContext* context) {
               RequireLeader(context);
               return endpoint.election->Resign(context, request, &response);
             });
}

absl::StatusOr<KeyValue> EtcdClient::Leader(absl::string_view name) {
  v3electionpb::LeaderRequest request;
  request.set_name(std::string(name));
  v3electionpb::LeaderResponse response;
  OKL_RETURN_IF_ERROR(Run(absl::StrCat("Leader(", Quoted(name), ")"), /*read=*/true,
                          absl::Now() + options_.call_timeout,
                          [&](const Endpoint& endpoint, grpc::ClientContext* context) {
                            RequireLeader(context);
                            return endpoint.election->Leader(context, request, &response);
                          }));
  return FromProto(response.kv());
}

absl::StatusOr<MemberStatus> EtcdClient::Status() {
  etcdserverpb::StatusRequest request;
  etcdserverpb::StatusResponse response;
  std::string address;
  // Not RequireLeader: a member without a leader is what one asks its status to find out.
  OKL_RETURN_IF_ERROR(Run("Status", /*read=*/true, absl::Now() + options_.call_timeout,
                          [&](const Endpoint& endpoint, grpc::ClientContext* context) {
                            address = endpoint.address;
                            return endpoint.maintenance->Status(context, request, &response);
                          }));
  MemberStatus status;
  status.endpoint = std::move(address);
  status.version = response.version();
  status.member_id = response.header().member_id();
  status.leader_id = response.leader();
  status.raft_term = response.raftterm();
  status.raft_index = response.raftindex();
  status.revision = response.header().revision();
  status.db_size_bytes = response.dbsize();
  status.errors.assign(response.errors().begin(), response.errors().end());
  return status;
}

}  // namespace okl::etcd
