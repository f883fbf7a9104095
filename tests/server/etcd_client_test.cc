// tests/server/etcd_client_test.cc
//
// okl::etcd::EtcdClient against a real etcd 3.4 (tests/server/etcd_cluster.h): one
// single-member cluster per test process, each test under its own key prefix; the quorum
// test runs a cluster of three of its own.

#include "server/etcd/etcd_client.h"

#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/etcd_cluster.h"
#include "tests/server/free_port.h"

namespace okl::etcd {
namespace {

using ::okl::testing::EtcdCluster;
using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::HasSubstr;
using ::testing::Optional;

// Bounds every wait below for something that happens promptly on a healthy etcd; generous
// so that a loaded machine does not fail a test, and never reached when the test passes.
constexpr absl::Duration kPatience = absl::Seconds(10);

// Polls `condition` until it holds or kPatience passes; whether it held.
template <typename Condition>
bool Eventually(Condition condition) {
  const absl::Time deadline = absl::Now() + kPatience;
  while (!condition()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

class EtcdClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<EtcdCluster>> cluster = EtcdCluster::Start();
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = cluster->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(cluster_, nullptr) << "etcd did not start";
    client_ = NewClient();
    prefix_ = absl::StrCat(
        "test/", ::testing::UnitTest::GetInstance()->current_test_info()->name(), "/");
  }

  static std::unique_ptr<EtcdClient> NewClient(EtcdClientOptions options = {}) {
    if (options.endpoints.empty()) options.endpoints = cluster_->endpoints();
    absl::StatusOr<std::unique_ptr<EtcdClient>> client = EtcdClient::Create(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  // The test's own key `name`.
  std::string Key(absl::string_view name) const { return absl::StrCat(prefix_, name); }

  static EtcdCluster* cluster_;
  std::unique_ptr<EtcdClient> client_;
  std::string prefix_;
};

EtcdCluster* EtcdClientTest::cluster_ = nullptr;

TEST_F(EtcdClientTest, PutThenGetReturnsTheValueAndItsRevisions) {
  absl::StatusOr<int64_t> first = client_->Put(Key("a"), "one");
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::optional<KeyValue>> got = client_->Get(Key("a"));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->key, Key("a"));
  EXPECT_EQ((*got)->value, "one");
  EXPECT_EQ((*got)->create_revision, *first);
  EXPECT_EQ((*got)->mod_revision, *first);
  EXPECT_EQ((*got)->version, 1);
  EXPECT_EQ((*got)->lease, 0);

  absl::StatusOr<int64_t> second = client_->Put(Key("a"), std::string("two\0bytes", 9));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_GT(*second, *first);
  got = client_->Get(Key("a"));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->value, std::string("two\0bytes", 9));
  EXPECT_EQ((*got)->create_revision, *first);
  EXPECT_EQ((*got)->mod_revision, *second);
  EXPECT_EQ((*got)->version, 2);
}

TEST_F(EtcdClientTest, GetOfAMissingKeyIsNullopt) {
  absl::StatusOr<std::optional<KeyValue>> got = client_->Get(Key("never-written"));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->has_value());
}

TEST_F(EtcdClientTest, RangeReturnsThePrefixInKeyOrderUpToItsLimit) {
  for (const char* name : {"p/b", "p/a", "p/c", "q"}) {
    ASSERT_TRUE(client_->Put(Key(name), name).ok());
  }
  absl::StatusOr<RangeResult> all = client_->Range(Key("p/"));
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_THAT(all->kvs,
              ElementsAre(Field(&KeyValue::key, Key("p/a")), Field(&KeyValue::key, Key("p/b")),
                          Field(&KeyValue::key, Key("p/c"))));
  EXPECT_EQ(all->count, 3);
  EXPECT_FALSE(all->more);
  EXPECT_GT(all->revision, 0);

  absl::StatusOr<RangeResult> page = client_->Range(Key("p/"), /*limit=*/2);
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_THAT(page->kvs, ElementsAre(Field(&KeyValue::key, Key("p/a")),
                                     Field(&KeyValue::key, Key("p/b"))));
  EXPECT_EQ(page->count, 3);
  EXPECT_TRUE(page->more);
}

TEST_F(EtcdClientTest, DeleteRemovesTheKeyAndDeletePrefixItsRange) {
  for (const char* name : {"x", "d/1", "d/2", "e"}) {
    ASSERT_TRUE(client_->Put(Key(name), "v").ok());
  }
  absl::StatusOr<int64_t> deleted = client_->Delete(Key("x"));
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 1);
  deleted = client_->Delete(Key("x"));
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 0);

  deleted = client_->DeletePrefix(Key("d/"));
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 2);
  absl::StatusOr<RangeResult> left = client_->Range(prefix_);
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_THAT(left->kvs, ElementsAre(Field(&KeyValue::key, Key("e"))));

  EXPECT_EQ(client_->DeletePrefix("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(EtcdClientTest, TxnGuardedOnModRevisionSucceedsOnceAndFailsOnTheStaleRevision) {
  absl::StatusOr<int64_t> written = client_->Put(Key("log/head"), "1");
  ASSERT_TRUE(written.ok()) << written.status();

  absl::StatusOr<TxnResult> first =
      client_->Txn({Compare::ModRevisionIs(Key("log/head"), *written)},
                   {Write::Put(Key("log/head"), "2"), Write::Put(Key("log/2"), "entry 2")});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->succeeded);
  EXPECT_GT(first->revision, *written);

  // A second writer that read the head at the same revision loses, and writes nothing.
  absl::StatusOr<TxnResult> stale = client_->Txn(
      {Compare::ModRevisionIs(Key("log/head"), *written)},
      {Write::Put(Key("log/head"), "2"), Write::Put(Key("log/2"), "another entry 2")});
  ASSERT_TRUE(stale.ok()) << stale.status();
  EXPECT_FALSE(stale->succeeded);
  EXPECT_EQ(stale->revision, first->revision);

  absl::StatusOr<std::optional<KeyValue>> head = client_->Get(Key("log/head"));
  ASSERT_TRUE(head.ok()) << head.status();
  ASSERT_TRUE(head->has_value());
  EXPECT_EQ((*head)->value, "2");
  EXPECT_EQ((*head)->mod_revision, first->revision);
  absl::StatusOr<std::optional<KeyValue>> entry = client_->Get(Key("log/2"));
  ASSERT_TRUE(entry.ok()) << entry.status();
  ASSERT_TRUE(entry->has_value());
  EXPECT_EQ((*entry)->value, "entry 2");
}

TEST_F(EtcdClientTest, TxnOnCreateRevisionZeroCreatesOnlyIfAbsent) {
  const std::vector<Compare> absent = {Compare::CreateRevisionIs(Key("k"), 0)};
  absl::StatusOr<TxnResult> created = client_->Txn(absent, {Write::Put(Key("k"), "first")});
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_TRUE(created->succeeded);
  absl::StatusOr<TxnResult> again = client_->Txn(absent, {Write::Put(Key("k"), "second")});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->succeeded);

  // The value, and the key's own create_revision, guard as well; a delete inside one.
  absl::StatusOr<TxnResult> wrong_value =
      client_->Txn({Compare::ValueIs(Key("k"), "second")}, {Write::Delete(Key("k"))});
  ASSERT_TRUE(wrong_value.ok()) << wrong_value.status();
  EXPECT_FALSE(wrong_value->succeeded);
  absl::StatusOr<TxnResult> deleted =
      client_->Txn({Compare::ValueIs(Key("k"), "first"),
                    Compare::CreateRevisionIs(Key("k"), created->revision)},
                   {Write::Delete(Key("k"))});
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_TRUE(deleted->succeeded);
  absl::StatusOr<std::optional<KeyValue>> got = client_->Get(Key("k"));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->has_value());

  // A value comparison on a key that does not exist fails, even with "".
  absl::StatusOr<TxnResult> missing =
      client_->Txn({Compare::ValueIs(Key("k"), "")}, {Write::Put(Key("k"), "x")});
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_FALSE(missing->succeeded);
}

// Three values just under etcd's 1.5 MiB request limit: one Range of them is more than
// gRPC's default 4 MiB receive limit.
TEST_F(EtcdClientTest, RangesAboveFourMebibytesAreReceived) {
  const std::string value(1400 * 1024, 'v');
  for (const char* name : {"big/1", "big/2", "big/3"}) {
    absl::StatusOr<int64_t> put = client_->Put(Key(name), value);
    ASSERT_TRUE(put.ok()) << put.status();
  }
  absl::StatusOr<RangeResult> range = client_->Range(Key("big/"));
  ASSERT_TRUE(range.ok()) << range.status();
  EXPECT_EQ(range->kvs.size(), 3u);

  std::unique_ptr<EtcdClient> small = NewClient({.max_receive_message_bytes = 4 << 20});
  ASSERT_NE(small, nullptr);
  range = small->Range(Key("big/"));
  EXPECT_EQ(range.status().code(), absl::StatusCode::kResourceExhausted) << range.status();
  EXPECT_THAT(range.status().message(), HasSubstr("max_receive_message_bytes"));

  // A request above etcd's limit is refused, naming the flag: by etcd itself, or above
  // 2 MiB by its gRPC server first.
  for (const int bytes : {1800 << 10, 3 << 20}) {
    absl::StatusOr<int64_t> too_big = client_->Put(Key("big/4"), std::string(bytes, 'v'));
    EXPECT_EQ(too_big.status().code(), absl::StatusCode::kInvalidArgument) << too_big.status();
    EXPECT_THAT(too_big.status().message(), HasSubstr("--max-request-bytes"));
  }
}

TEST_F(EtcdClientTest, ALeasesKeyDisappearsAfterRevoke) {
  absl::StatusOr<Lease> lease = client_->LeaseGrant(30);
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_NE(lease->id, 0);
  EXPECT_EQ(lease->ttl_seconds, 30);
  ASSERT_TRUE(client_->Put(Key("owned"), "v", lease->id).ok());
  absl::StatusOr<std::optional<KeyValue>> got = client_->Get(Key("owned"));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->lease, lease->id);

  absl::StatusOr<int64_t> left = client_->LeaseTimeToLive(lease->id);
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_GT(*left, 0);
  EXPECT_LE(*left, 30);
  absl::StatusOr<int64_t> renewed = client_->LeaseKeepAliveOnce(lease->id);
  ASSERT_TRUE(renewed.ok()) << renewed.status();
  EXPECT_EQ(*renewed, 30);

  ASSERT_TRUE(client_->LeaseRevoke(lease->id).ok());
  got = client_->Get(Key("owned"));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->has_value());

  // A lease gone is NOT_FOUND to every lease call.
  EXPECT_EQ(client_->LeaseKeepAliveOnce(lease->id).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->LeaseTimeToLive(lease->id).status().code(), absl::StatusCode::kNotFound);
  absl::Status revoked = client_->LeaseRevoke(lease->id);
  EXPECT_EQ(revoked.code(), absl::StatusCode::kNotFound) << revoked;
  EXPECT_THAT(revoked.message(), HasSubstr("expired or was revoked"));
  // And a key cannot be put with it.
  EXPECT_EQ(client_->Put(Key("late"), "v", lease->id).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(EtcdClientTest, SecondCampaignerWaitsUntilTheFirstResigns) {
  const std::string election = Key("shard/7");
  std::unique_ptr<EtcdClient> other = NewClient();  // another replica
  ASSERT_NE(other, nullptr);
  absl::StatusOr<Lease> lease_a = client_->LeaseGrant(30);
  absl::StatusOr<Lease> lease_b = other->LeaseGrant(30);
  ASSERT_TRUE(lease_a.ok() && lease_b.ok()) << lease_a.status() << lease_b.status();

  absl::StatusOr<LeaderKey> a =
      client_->Campaign(election, lease_a->id, "a", absl::Now() + kPatience);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->name, election);
  EXPECT_EQ(a->lease, lease_a->id);
  EXPECT_THAT(a->key, ::testing::StartsWith(election + "/"));

  std::future<absl::StatusOr<LeaderKey>> b = std::async(std::launch::async, [&] {
    return other->Campaign(election, lease_b->id, "b", absl::Now() + kPatience);
  });
  // B waits while A leads.
  EXPECT_EQ(b.wait_for(std::chrono::milliseconds(500)), std::future_status::timeout);
  absl::StatusOr<KeyValue> leader = other->Leader(election);
  ASSERT_TRUE(leader.ok()) << leader.status();
  EXPECT_EQ(leader->value, "a");
  EXPECT_EQ(leader->create_revision, a->create_revision);

  ASSERT_TRUE(client_->Resign(*a).ok());
  ASSERT_EQ(b.wait_for(absl::ToChronoSeconds(kPatience)), std::future_status::ready);
  absl::StatusOr<LeaderKey> b_won = b.get();
  ASSERT_TRUE(b_won.ok()) << b_won.status();
  EXPECT_GT(b_won->create_revision, a->create_revision);  // a later epoch
  leader = client_->Leader(election);
  ASSERT_TRUE(leader.ok()) << leader.status();
  EXPECT_EQ(leader->value, "b");

  // A campaigns again once B resigns: a third epoch, later than both.
  ASSERT_TRUE(other->Resign(*b_won).ok());
  absl::StatusOr<LeaderKey> a_again =
      client_->Campaign(election, lease_a->id, "a again", absl::Now() + kPatience);
  ASSERT_TRUE(a_again.ok()) << a_again.status();
  EXPECT_GT(a_again->create_revision, b_won->create_revision);
}

TEST_F(EtcdClientTest, AnEpochGuardedWriteFailsOnceItsWriterIsNoLongerLeader) {
  const std::string election = Key("shard/1");
  absl::StatusOr<Lease> lease_a = client_->LeaseGrant(30);
  absl::StatusOr<Lease> lease_b = client_->LeaseGrant(30);
  ASSERT_TRUE(lease_a.ok() && lease_b.ok()) << lease_a.status() << lease_b.status();
  absl::StatusOr<LeaderKey> a =
      client_->Campaign(election, lease_a->id, "a", absl::Now() + kPatience);
  ASSERT_TRUE(a.ok()) << a.status();
  const Compare a_leads = Compare::CreateRevisionIs(a->key, a->create_revision);
  absl::StatusOr<TxnResult> append = client_->Txn({a_leads}, {Write::Put(Key("log/1"), "a")});
  ASSERT_TRUE(append.ok()) << append.status();
  EXPECT_TRUE(append->succeeded);

  ASSERT_TRUE(client_->Resign(*a).ok());
  absl::StatusOr<LeaderKey> b =
      client_->Campaign(election, lease_b->id, "b", absl::Now() + kPatience);
  ASSERT_TRUE(b.ok()) << b.status();
  append = client_->Txn({a_leads}, {Write::Put(Key("log/2"), "a")});
  ASSERT_TRUE(append.ok()) << append.status();
  EXPECT_FALSE(append->succeeded);
  // Nor can A proclaim any more.
  EXPECT_EQ(client_->Proclaim(*a, "a is back").code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(EtcdClientTest, ProclaimChangesTheLeadersValueAndKeepsItsEpoch) {
  const std::string election = Key("shard/2");
  absl::StatusOr<Lease> lease = client_->LeaseGrant(30);
  ASSERT_TRUE(lease.ok()) << lease.status();
  absl::StatusOr<LeaderKey> a =
      client_->Campaign(election, lease->id, "a:1", absl::Now() + kPatience);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(client_->Proclaim(*a, "a:2").ok());
  absl::StatusOr<KeyValue> leader = client_->Leader(election);
  ASSERT_TRUE(leader.ok()) << leader.status();
  EXPECT_EQ(leader->value, "a:2");
  EXPECT_EQ(leader->create_revision, a->create_revision);
}

TEST_F(EtcdClientTest, AnElectionWithoutCampaignersHasNoLeader) {
  absl::StatusOr<KeyValue> leader = client_->Leader(Key("shard/none"));
  EXPECT_EQ(leader.status().code(), absl::StatusCode::kNotFound) << leader.status();
  EXPECT_THAT(leader.status().message(), HasSubstr("no leader"));
}

TEST_F(EtcdClientTest, ACampaignPastItsDeadlineIsWithdrawn) {
  const std::string election = Key("shard/3");
  absl::StatusOr<Lease> lease_a = client_->LeaseGrant(30);
  absl::StatusOr<Lease> lease_c = client_->LeaseGrant(30);
  ASSERT_TRUE(lease_a.ok() && lease_c.ok()) << lease_a.status() << lease_c.status();
  absl::StatusOr<LeaderKey> a =
      client_->Campaign(election, lease_a->id, "a", absl::Now() + kPatience);
  ASSERT_TRUE(a.ok()) << a.status();

  absl::StatusOr<LeaderKey> c =
      client_->Campaign(election, lease_c->id, "c", absl::Now() + absl::Milliseconds(300));
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded) << c.status();
  EXPECT_THAT(c.status().message(), HasSubstr("Campaign"));
  // etcd deletes the withdrawn campaigner's key (asynchronously to our deadline).
  absl::StatusOr<RangeResult> keys;
  EXPECT_TRUE(Eventually([&] {
    keys = client_->Range(election + "/");
    return !keys.ok() || keys->kvs.size() == 1;
  }));
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_THAT(keys->kvs, ElementsAre(Field(&KeyValue::key, a->key)));
}

// A leader that stops renewing its lease loses leadership when the lease expires, and the
// next campaigner is elected: what happens when a replica dies.
TEST_F(EtcdClientTest, TheNextCampaignerIsElectedWhenTheLeadersLeaseExpires) {
  const std::string election = Key("shard/4");
  absl::StatusOr<Lease> short_lease = client_->LeaseGrant(1);  // etcd makes it its minimum
  absl::StatusOr<Lease> lease_b = client_->LeaseGrant(30);
  ASSERT_TRUE(short_lease.ok() && lease_b.ok()) << short_lease.status() << lease_b.status();
  EXPECT_GE(short_lease->ttl_seconds, 1);
  absl::StatusOr<LeaderKey> a =
      client_->Campaign(election, short_lease->id, "a", absl::Now() + kPatience);
  ASSERT_TRUE(a.ok()) << a.status();

  const absl::Time start = absl::Now();
  absl::StatusOr<LeaderKey> b =
      client_->Campaign(election, lease_b->id, "b", absl::Now() + kPatience);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_GT(b->create_revision, a->create_revision);
  // Not before A's lease could have expired (less a margin for the clocks' granularity).
  EXPECT_GE(absl::Now() - start, absl::Seconds(short_lease->ttl_seconds) - absl::Seconds(1));
  EXPECT_EQ(client_->LeaseKeepAliveOnce(short_lease->id).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(EtcdClientTest, StatusNamesTheMemberItsLeaderAndVersion) {
  absl::StatusOr<MemberStatus> status = client_->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->endpoint, cluster_->endpoint(0));
  EXPECT_THAT(status->version, ::testing::StartsWith("3."));
  EXPECT_NE(status->member_id, 0u);
  EXPECT_EQ(status->leader_id, status->member_id);  // one member: it leads
  EXPECT_GE(status->raft_term, 1u);
  EXPECT_GT(status->raft_index, 0u);
  EXPECT_GT(status->revision, 0);
  EXPECT_GT(status->db_size_bytes, 0);
  EXPECT_TRUE(status->errors.empty());
}

TEST_F(EtcdClientTest, AnUnreachableEndpointIsUnavailableAndNamed) {
  absl::StatusOr<int> port = okl::testing::PickUnusedPort();
  ASSERT_TRUE(port.ok()) << port.status();
  const std::string dead = absl::StrCat("127.0.0.1:", *port);
  std::unique_ptr<EtcdClient> client = NewClient({.endpoints = dead});
  ASSERT_NE(client, nullptr);
  for (absl::Status status : {client->Get("k").status(), client->Put("k", "v").status()}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
    EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("etcd at ", dead, " unreachable")));
  }
}

TEST_F(EtcdClientTest, ReadsMoveOnToTheNextEndpointAndWritesAfterTheirFailure) {
  absl::StatusOr<int> port = okl::testing::PickUnusedPort();
  ASSERT_TRUE(port.ok()) << port.status();
  const std::string dead = absl::StrCat("127.0.0.1:", *port);
  const std::string endpoints = absl::StrCat(dead, ",", cluster_->endpoints());
  ASSERT_TRUE(client_->Put(Key("k"), "v").ok());

  // A read tries the dead endpoint, then the live one.
  std::unique_ptr<EtcdClient> reader = NewClient({.endpoints = endpoints});
  ASSERT_NE(reader, nullptr);
  absl::StatusOr<std::optional<KeyValue>> got = reader->Get(Key("k"));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(*got, Optional(Field(&KeyValue::value, "v")));

  // A write is not sent twice: it fails on the dead endpoint, and the next call goes on to
  // the live one.
  std::unique_ptr<EtcdClient> writer = NewClient({.endpoints = endpoints});
  ASSERT_NE(writer, nullptr);
  absl::StatusOr<int64_t> put = writer->Put(Key("k"), "w");
  EXPECT_EQ(put.status().code(), absl::StatusCode::kUnavailable) << put.status();
  EXPECT_THAT(put.status().message(), HasSubstr(dead));
  put = writer->Put(Key("k"), "w");
  ASSERT_TRUE(put.ok()) << put.status();
}

TEST(EtcdClientCreateTest, MalformedEndpointsAreInvalidArgument) {
  for (const char* endpoints : {"", "127.0.0.1", "127.0.0.1:", ":2379", "127.0.0.1:2379,",
                                "127.0.0.1:99999", "https://127.0.0.1:2379"}) {
    absl::StatusOr<std::unique_ptr<EtcdClient>> client =
        EtcdClient::Create({.endpoints = endpoints});
    EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument) << endpoints;
  }
  absl::StatusOr<std::unique_ptr<EtcdClient>> client =
      EtcdClient::Create({.endpoints = " http://10.0.0.1:2379/ , etcd-2:2379"});
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_THAT((*client)->endpoints(), ElementsAre("10.0.0.1:2379", "etcd-2:2379"));
}

// Three members, two of them killed: the survivor has no quorum, which writes report at
// once (not at their deadline) and Status shows.
TEST(EtcdClientQuorumTest, AMemberWithoutQuorumSaysSo) {
  absl::StatusOr<std::unique_ptr<EtcdCluster>> cluster = EtcdCluster::Start({.members = 3});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_TRUE((*cluster)->Kill(1).ok());
  ASSERT_TRUE((*cluster)->Kill(2).ok());
  absl::StatusOr<std::unique_ptr<EtcdClient>> client =
      EtcdClient::Create({.endpoints = (*cluster)->endpoint(0)});
  ASSERT_TRUE(client.ok()) << client.status();

  // The survivor notices within an election timeout or two (1 s each by default).
  absl::StatusOr<MemberStatus> status;
  EXPECT_TRUE(Eventually([&] {
    status = (*client)->Status();
    return !status.ok() || status->leader_id == 0;
  }));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->leader_id, 0u);

  const absl::Time start = absl::Now();
  absl::StatusOr<int64_t> put = (*client)->Put("k", "v");
  EXPECT_EQ(put.status().code(), absl::StatusCode::kUnavailable) << put.status();
  EXPECT_THAT(put.status().message(),
              HasSubstr(absl::StrCat("etcd at ", (*cluster)->endpoint(0), " has no quorum")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));  // well before the 5 s deadline
}

}  // namespace
}  // namespace okl::etcd
