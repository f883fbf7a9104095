// server/etcd/etcd_client.h
//
// EtcdClient is a thin client of etcd's v3 gRPC API (Debian 12's etcd 3.4), the groundwork
// that okl's replication builds shard leadership and its replicated log on: keys and
// prefixes, transactions guarded on a key's revisions or value, leases, elections (etcd's
// v3election service) and a member's status. Each call is one RPC (a keep-alive renews a
// lease once), bounded by a deadline; nothing runs in the background, so a lease lives only
// as long as its holder keeps renewing it.
//
// Endpoints are "HOST:PORT,HOST:PORT,..." (etcd's --advertise-client-urls; an "http://"
// before each is accepted), plaintext. A call goes to the endpoint that answered last
// (passing over any whose connection is failing). If that endpoint turns out to be
// unreachable or without quorum, a read (Get, Range, LeaseTimeToLive, Leader, Status) tries
// the next ones within its deadline; any other call returns UNAVAILABLE, since it may have
// been applied, and the next call starts at the next endpoint. Retrying a write is the
// caller's decision: a transaction guarded on a revision is safe to retry.
//
// Revisions are etcd's: the store's revision counts its write transactions. A key's
// create_revision is the revision that created it (0 for a key that does not exist; a key
// deleted and put again is created anew), its mod_revision that of its last write. A
// leader's epoch is the create_revision of its leader key: every later leader of the
// election has a larger one, so a write guarded on the leader key's create_revision fails
// once its writer is no longer the leader.
//
// Errors are absl::Status with etcd's gRPC code, the message naming the endpoint, the call
// and what to fix: UNAVAILABLE "etcd at HOST:PORT unreachable" or "... has no quorum";
// DEADLINE_EXCEEDED when it did not answer in time (for Campaign: not elected in time);
// NOT_FOUND for a lease that expired or was revoked, and for an election without a leader;
// FAILED_PRECONDITION for a Proclaim by a campaigner whose leader key is gone;
// RESOURCE_EXHAUSTED for a response above max_receive_message_bytes; INVALID_ARGUMENT for a
// request above etcd's --max-request-bytes.
//
// Thread-safe: any number of threads may call one EtcdClient at once, including calls that
// block (a Campaign waiting to be elected blocks only its own thread).
//
// Example:
//   OKL_ASSIGN_OR_RETURN(std::unique_ptr<etcd::EtcdClient> etcd,
//                        etcd::EtcdClient::Create({.endpoints = "127.0.0.1:2379"}));
//   OKL_ASSIGN_OR_RETURN(etcd::Lease lease, etcd->LeaseGrant(/*ttl_seconds=*/10));
//   OKL_ASSIGN_OR_RETURN(etcd::LeaderKey leader,
//                        etcd->Campaign("okl/g1/shard/7", lease.id, "replica-a:50051",
//                                       absl::Now() + absl::Seconds(30)));
//   // Append entry 42 of the shard's log while still its leader (epoch
//   // leader.create_revision) and only if no other entry 42 exists:
//   OKL_ASSIGN_OR_RETURN(
//       etcd::TxnResult appended,
//       etcd->Txn({etcd::Compare::CreateRevisionIs(leader.key, leader.create_revision),
//                  etcd::Compare::CreateRevisionIs("okl/g1/log/7/42", 0)},
//                 {etcd::Write::Put("okl/g1/log/7/42", entry)}));
//   // appended.succeeded is false if leadership or entry 42 moved on.
//   OKL_ASSIGN_OR_RETURN(int64_t ttl_left, etcd->LeaseKeepAliveOnce(lease.id));
//   OKL_RETURN_IF_ERROR(etcd->Resign(leader));
#ifndef OKL_SERVER_ETCD_ETCD_CLIENT_H_
#define OKL_SERVER_ETCD_ETCD_CLIENT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace okl::etcd {

struct EtcdClientOptions {
  // "HOST:PORT,HOST:PORT,...", at least one; each may start with "http://" (TLS is not
  // supported yet, so "https://" is refused).
  std::string endpoints = "";
  // The deadline of every call but Campaign (which takes its own): from the call's start,
  // over all the endpoints a read tries.
  absl::Duration call_timeout = absl::Seconds(5);
  // The largest response accepted. gRPC's default, 4 MiB, is less than a Range over a
  // few log entries near etcd's 1.5 MiB request limit; page larger ranges with `limit`.
  int max_receive_message_bytes = 64 << 20;
};

// A key as etcd stores it (mvccpb.KeyValue).
struct KeyValue {
  std::string key = "";
  std::string value = "";
  int64_t create_revision = 0;  // the revision that created the key
  int64_t mod_revision = 0;     // the revision of its last write
  int64_t version = 0;          // its writes since it was created: 1 after the first
  int64_t lease = 0;            // the lease it goes with; 0 for none
};

struct RangeResult {
  std::vector<KeyValue> kvs = {};  // in key order
  int64_t count = 0;               // the keys in the range, `limit` or not
  bool more = false;               // `limit` cut the result: more keys follow kvs.back()
  int64_t revision = 0;            // the store's revision the range was read at
};

// One condition of a transaction, on one key (etcdserverpb.Compare). A key that does not
// exist has revisions and version 0, and fails every comparison of its value.
struct Compare {
  enum class Target { kCreateRevision, kModRevision, kVersion, kValue };
  enum class Op { kEqual, kNotEqual, kGreater, kLess };

  std::string key = "";
  Target target = Target::kModRevision;
  Op op = Op::kEqual;
  int64_t number = 0;      // the revision or version compared with (the numeric targets)
  std::string value = "";  // the value compared with (kValue)

  // The key was created at `revision`; 0: it does not exist.
  static Compare CreateRevisionIs(absl::string_view key, int64_t revision);
  // The key was last written at `revision`; 0: it does not exist.
  static Compare ModRevisionIs(absl::string_view key, int64_t revision);
  // The key exists and holds `value`.
  static Compare ValueIs(absl::string_view key, absl::string_view value);
};

// One write of a transaction.
struct Write {
  enum class Kind { kPut, kDelete, kDeletePrefix };

  Kind kind = Kind::kPut;
  std::string key = "";    // the key, or the prefix for kDeletePrefix
  std::string value = "";  // kPut
  int64_t lease = 0;       // kPut: the lease the key goes with; 0 for none

  static Write Put(absl::string_view key, absl::string_view value, int64_t lease = 0);
  static Write Delete(absl::string_view key);
  // Every key that starts with `prefix` (which must not be empty).
  static Write DeletePrefix(absl::string_view prefix);
};

struct TxnResult {
  bool succeeded = false;  // every comparison held, so the writes were applied
  int64_t revision = 0;    // the store's revision after the transaction
};

struct Lease {
  int64_t id = 0;
  int64_t ttl_seconds = 0;  // as granted: etcd raises a TTL below its minimum (~2 s)
};

// A campaign's win (v3electionpb.LeaderKey): the key, under the election's name, whose
// existence is the leadership.
struct LeaderKey {
  std::string name = "";        // the election
  std::string key = "";         // "<name>/<lease id in hex>"
  int64_t create_revision = 0;  // the leader's epoch: larger for every later leader
  int64_t lease = 0;            // the key goes when this lease does
};

// One member's view of the cluster (etcdserverpb.StatusResponse).
struct MemberStatus {
  std::string endpoint = "";  // the endpoint that answered
  std::string version = "";   // etcd's, e.g. "3.4.23"
  uint64_t member_id = 0;     // the member that answered
  uint64_t leader_id = 0;     // the raft leader it knows; 0 for none (no quorum)
  uint64_t raft_term = 0;
  uint64_t raft_index = 0;  // the last raft log index it has committed
  int64_t revision = 0;     // the store's revision
  int64_t db_size_bytes = 0;
  std::vector<std::string> errors = {};  // alarms, e.g. "NOSPACE"
};

class EtcdClient {
 public:
  // Parses options.endpoints and makes a channel to each. Connects lazily: an unreachable
  // endpoint shows at the first call. INVALID_ARGUMENT for a malformed endpoint list.
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(EtcdClientOptions options);

  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;
  ~EtcdClient();

  // The endpoints, as HOST:PORT, in the order given.
  std::vector<std::string> endpoints() const;

  // The key, or nullopt if it does not exist.
  absl::StatusOr<std::optional<KeyValue>> Get(absl::string_view key);
  // The keys that start with `prefix` (all keys for ""), in key order; at most `limit` of
  // them (0: no limit).
  absl::StatusOr<RangeResult> Range(absl::string_view prefix, int64_t limit = 0);
  // Writes the key (with `lease`, 0 for none); returns the store's revision after it,
  // which is the key's new mod_revision.
  absl::StatusOr<int64_t> Put(absl::string_view key, absl::string_view value,
                              int64_t lease = 0);
  // Deletes the key; returns how many keys went (0 or 1).
  absl::StatusOr<int64_t> Delete(absl::string_view key);
  // Deletes every key that starts with `prefix` (which must not be empty); returns how many.
  absl::StatusOr<int64_t> DeletePrefix(absl::string_view prefix);
  // If every comparison holds (none: always), applies `writes` atomically, in order. A key
  // may be written at most once per transaction (etcd's rule).
  absl::StatusOr<TxnResult> Txn(absl::Span<const Compare> compares,
                                absl::Span<const Write> writes);

  // A new lease of `ttl_seconds` (> 0); its keys go when it expires or is revoked.
  absl::StatusOr<Lease> LeaseGrant(int64_t ttl_seconds);
  // Renews the lease once (one message on a LeaseKeepAlive stream); returns the TTL it has
  // now, its granted TTL. NOT_FOUND if it expired or was revoked.
  absl::StatusOr<int64_t> LeaseKeepAliveOnce(int64_t lease);
  // The seconds the lease has left. NOT_FOUND if it expired or was revoked.
  absl::StatusOr<int64_t> LeaseTimeToLive(int64_t lease);
  // Ends the lease and deletes its keys. NOT_FOUND if it expired or was revoked before.
  absl::Status LeaseRevoke(int64_t lease);

  // Campaigns in the election `name` with `lease` (from LeaseGrant), offering `value`:
  // blocks until this campaigner is the leader (the campaigners ahead of it resigned or
  // lost their leases) or `deadline` passes (DEADLINE_EXCEEDED; etcd then withdraws the
  // campaign). A campaign again with the same lease resumes the one it has, which is also
  // the way out of the one race: elected just as the deadline passed, so that the leader
  // key stays, unknown to the caller (until its lease ends).
  absl::StatusOr<LeaderKey> Campaign(absl::string_view name, int64_t lease,
                                     absl::string_view value, absl::Time deadline);
  // Replaces the value the leader offers, keeping its epoch. FAILED_PRECONDITION if its
  // leader key is gone (it resigned, or its lease ended).
  absl::Status Proclaim(const LeaderKey& leader, absl::string_view value);
  // Gives up leadership (deletes the leader key; its lease stays), so the next campaigner
  // is elected. A no-op for a key already gone.
  absl::Status Resign(const LeaderKey& leader);
  // The election's leader key: its value is the leader's, its create_revision the epoch.
  // NOT_FOUND if the election has no leader.
  absl::StatusOr<KeyValue> Leader(absl::string_view name);

  // The status of the member that answers.
  absl::StatusOr<MemberStatus> Status();

 private:
  struct Endpoint;  // a channel and its stubs (etcd_client.cc)

  EtcdClient(EtcdClientOptions options, std::vector<std::unique_ptr<Endpoint>> endpoints);

  // Runs `call` on one endpoint after another, as the header comment says; `call` returns
  // a grpc::Status. `what` names the call in errors.
  template <typename Call>
  absl::Status Run(absl::string_view what, bool read, absl::Time deadline, Call call);

  const EtcdClientOptions options_;
  const std::vector<std::unique_ptr<Endpoint>> endpoints_;
  // The endpoint calls start at: the one that answered last. The only state that calls
  // share, and a hint, so an atomic (relaxed) is enough: no lock.
  std::atomic<size_t> preferred_{0};
};

}  // namespace okl::etcd

#endif  // OKL_SERVER_ETCD_ETCD_CLIENT_H_
