// tests/server/tenant_limits_test.cc
//
// What a tenant may take of a real okl_server, and what the server refuses before it
// buffers anything: the quotas (models, bytes and request rate, per tenant and in all),
// junk Restores and the bound on concurrent Restores, and the Restore protocol's checks
// (declared sizes, a stream without a config, tiny chunks, the limits of the snapshot's
// config). The shared helpers are in isolation_util.h.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/norma.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "okl/v1/okl.grpc.pb.h"
#include "okl/v1/okl.pb.h"
#include "proto/convert.h"
#include "proto/inputs.h"
#include "proto/snapshot_codec.h"
#include "tests/server/e2e_test_util.h"
#include "tests/server/isolation_util.h"
#include "tests/server/server_process.h"
#include "tests/server/state_builder.h"

namespace okl::testing {
namespace {

using Code = ::grpc::StatusCode;
using ::testing::AllOf;
using ::testing::HasSubstr;

// ====================================================================================
// Junk Restores and the bound on concurrent Restores.
// ====================================================================================

TEST(RestoreProtocolTest, ConcurrentJunkRestoresAreRefusedAtTheFirstChunkWithoutBuffering) {
  std::unique_ptr<ServerProcess> server = StartServer();
  ASSERT_NE(server, nullptr);
  const uint64_t peak_before = PeakRssBytes(server->pid());
  const std::string junk = Junk(kMiB, 1);
  // Each stream would be 512 MiB if the server kept reading (the old server buffered
  // both whole: 1.1 GB).
  constexpr size_t kChunks = 512;
  grpc::Status statuses[2];
  size_t written[2] = {0, 0};
  absl::Duration took[2];
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      std::unique_ptr<Stub> stub = OwnStub(*server);
      RestoreCall call(*stub);
      v1::RestoreChunk first;
      *first.mutable_ref() = Ref("junk", absl::StrCat("model-", i));
      first.set_data(junk);
      const absl::Time start = absl::Now();
      statuses[i] = StreamUntilRefused(call, first, junk, kChunks);
      took[i] = absl::Now() - start;
      written[i] = call.written();
    });
  }
  for (std::thread& t : threads) t.join();
  const uint64_t peak_after = PeakRssBytes(server->pid());
  if (Verbose()) {
    std::cerr << "junk Restores: the clients got " << written[0] << " and " << written[1]
              << " of " << kChunks << " 1 MiB chunks out, refused in " << took[0] << " and "
              << took[1] << "; server peak RSS " << Mb(peak_before) << " before, "
              << Mb(peak_after) << " after\n";
  }
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(HasCode(statuses[i], Code::DATA_LOSS)) << "stream " << i;
    // The server answered after the first chunk; what the client got out beyond it is
    // what gRPC's flow control windows let through meanwhile.
    EXPECT_LT(written[i], 64u) << "stream " << i;
  }
  EXPECT_LT(peak_after - peak_before, 100 * kMiB)
      << "peak RSS " << Mb(peak_before) << " -> " << Mb(peak_after);
  v1::ListModelsResponse list;
  ASSERT_TRUE(IsOk(ListModels(server->stub(), "", &list)));
  EXPECT_EQ(list.models_size(), 0);
  // Both slots are free again.
  const v1::ModelConfig config = ParseConfig(kSmallConfig);
  absl::StatusOr<std::string> bytes = RandomSnapshot(config, 10, 2);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_TRUE(IsOk(Restore(server->stub(), Ref("valid", "m"), *bytes)));
}

TEST(RestoreProtocolTest, RestoreBeyondMaxConcurrentRestoresIsResourceExhausted) {
  std::unique_ptr<ServerProcess> server = StartServer({"--max_concurrent_restores=2"});
  ASSERT_NE(server, nullptr);
  const v1::ModelConfig config = ParseConfig(kSmallConfig);
  absl::StatusOr<std::string> bytes = RandomSnapshot(config, 30, 1);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const uint64_t reserved = WorstCaseBytes(config);

  // Two Restores held open after their first chunk (the config: the server reserves its
  // quota then, which shows it is inside both).
  std::unique_ptr<Stub> stubs[2] = {OwnStub(*server), OwnStub(*server)};
  std::unique_ptr<RestoreCall> held[2];
  const size_t first_size = 256;
  ASSERT_GT(bytes->size(), first_size);
  for (int i = 0; i < 2; ++i) {
    held[i] = std::make_unique<RestoreCall>(*stubs[i]);
    v1::RestoreChunk first;
    *first.mutable_ref() = Ref("acme", absl::StrCat("held-", i));
    first.set_data(bytes->substr(0, first_size));
    ASSERT_TRUE(held[i]->Write(first));
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (MetricOrFail(*server, "okl_quota_reserved_bytes") < 2.0 * reserved &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(MetricOrFail(*server, "okl_quota_reserved_bytes"), 2.0 * reserved)
      << "the held Restores did not reach the server";

  // The third, valid, is refused at once.
  const absl::Time start = absl::Now();
  const grpc::Status third = Restore(server->stub(), Ref("acme", "third"), *bytes);
  EXPECT_TRUE(HasCode(third, Code::RESOURCE_EXHAUSTED));
  EXPECT_THAT(third.error_message(),
              AllOf(HasSubstr("--max_concurrent_restores"), HasSubstr("2")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  v1::ModelInfo info;
  EXPECT_TRUE(HasCode(GetModel(server->stub(), Ref("acme", "third"), &info), Code::NOT_FOUND));

  // Meanwhile the rest of the server serves.
  EXPECT_TRUE(IsOk(CreateModel(server->stub(), Ref("other", "m"), config)));

  // The held ones finish and succeed; then a Restore runs again.
  for (int i = 0; i < 2; ++i) {
    v1::RestoreChunk rest;
    rest.set_data(bytes->substr(first_size));
    ASSERT_TRUE(held[i]->Write(rest));
    EXPECT_TRUE(IsOk(held[i]->Finish())) << "held " << i;
  }
  EXPECT_TRUE(IsOk(Restore(server->stub(), Ref("acme", "third"), *bytes)));
  for (const char* name : {"held-0", "held-1", "third"}) {
    EXPECT_TRUE(IsOk(GetModel(server->stub(), Ref("acme", name), &info))) << name;
    EXPECT_EQ(info.stats().expansion_size(), 30u) << name;
  }
}

// ====================================================================================
// Quotas.
// ====================================================================================

TEST(QuotaTest, MaxModelsRefusesTheNextModelUntilOneIsDeleted) {
  std::unique_ptr<ServerProcess> server = StartServer({"--max_models=2"});
  ASSERT_NE(server, nullptr);
  const v1::ModelConfig config = ParseConfig(kSmallConfig);
  ASSERT_TRUE(IsOk(CreateModel(server->stub(), Ref("a", "1"), config)));
  ASSERT_TRUE(IsOk(CreateModel(server->stub(), Ref("b", "1"), config)));
  EXPECT_EQ(MetricOrFail(*server, "okl_quota_limit{quota=\"models\"}"), 2);

  const grpc::Status status = CreateModel(server->stub(), Ref("c", "1"), config);
  EXPECT_TRUE(HasCode(status, Code::RESOURCE_EXHAUSTED));
  EXPECT_THAT(status.error_message(), AllOf(HasSubstr("--max_models"), HasSubstr("2")));
  v1::ModelInfo info;
  EXPECT_TRUE(HasCode(GetModel(server->stub(), Ref("c", "1"), &info), Code::NOT_FOUND));
  // A Restore of a new model is a new model too.
  const std::string bytes = SnapshotOf(server->stub(), Ref("a", "1"));
  EXPECT_TRUE(HasCode(Restore(server->stub(), Ref("c", "2"), bytes), Code::RESOURCE_EXHAUSTED));
  EXPECT_EQ(MetricOrFail(*server, Rejections("models")), 2);
  // Over an existing one it is not.
  EXPECT_TRUE(IsOk(Restore(server->stub(), Ref("b", "1"), bytes)));

  ASSERT_TRUE(IsOk(DeleteModel(server->stub(), Ref("a", "1"))));
  EXPECT_TRUE(IsOk(CreateModel(server->stub(), Ref("c", "1"), config)));
  EXPECT_EQ(MetricOrFail(*server, Rejections("models")), 2);
}

TEST(QuotaTest, MaxModelsPerTenantLimitsEachTenantAlone) {
  std::unique_ptr<ServerProcess> server = StartServer({"--max_models_per_tenant=2"});
  ASSERT_NE(server, nullptr);
  const v1::ModelConfig config = ParseConfig(kSmallConfig);
  ASSERT_TRUE(IsOk(CreateModel(server->stub(), Ref("a", "1"), config)));
  ASSERT_TRUE(IsOk(CreateModel(server->stub(), Ref("a", "2"), config)));
  const grpc::Status status = CreateModel(server->stub(), Ref("a", "3"), config);
  EXPECT_TRUE(HasCode(status, Code::RESOURCE_EXHAUSTED));
  // The flag, its limit, the tenant and what it holds.
  EXPECT_THAT(status.error_message(),
              AllOf(HasSubstr("--max_models_per_tenant=2"), HasSubstr("\"a\" holds 2")));
  v1::ModelInfo info;
  EXPECT_TRUE(HasCode(GetModel(server->stub(), Ref("a", "3"), &info), Code::NOT_FOUND));
  EXPECT_EQ(MetricOrFail(*server, Rejections("models_per_tenant")), 1);
  EXPECT_EQ(MetricOrFail(*server, Rejections("models")), 0);

  // Another tenant is not affected.
  EXPECT_TRUE(IsOk(CreateModel(server->stub(), Ref("b", "1"), config)));
  EXPECT_TRUE(IsOk(CreateModel(server->stub(), Ref("b", "2"), config)));

  // Restore: as a new model it counts, over an existing one it does not.
  const std::string bytes = SnapshotOf(server->stub(), Ref("a", "1"));
  const grpc::Status restored = Restore(server->stub(), Ref("a", "3"), bytes);
  EXPECT_TRUE(HasCode(restored, Code::RESOURCE_EXHAUSTED));
  EXPECT_THAT(restored.error_message(), HasSubstr("--max_models_per_tenant=2"));
  EXPECT_TRUE(HasCode(GetModel(server->stub(), Ref("a", "3"), &info), Code::NOT_FOUND));
  EXPECT_TRUE(IsOk(Restore(server->stub(), Ref("a", "2"), bytes)));
  EXPECT_EQ(MetricOrFail(*server, Rejections("models_per_tenant")), 2);

  // Deleting frees the quota.
  ASSERT_TRUE(IsOk(DeleteModel(server->stub(), Ref("a", "1"))));
  EXPECT_TRUE(IsOk(Restore(server->stub(), Ref("a", "3"), bytes)));
  EXPECT_TRUE(
      HasCode(CreateModel(server->stub(), Ref("a", "4"), config), Code::RESOURCE_EXHAUSTED));
}

TEST(QuotaTest, MaxBytesPerTenantCountsEachModelAtItsWorstCase) {
  const v1::ModelConfig config = ParseConfig(kSmallConfig);
  const uint64_t one = WorstCaseBytes(config);
  // Room for two and a half models of `config` per tenant.
  const uint64_t limit = one * 5 / 2;
  std::unique_ptr<ServerProcess> server =
      StartServer({absl::StrCat("--max_bytes_per_tenant=", limit)});
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(IsOk(CreateModel(server->stub(), Ref("a", "1"), config)));
  ASSERT_TRUE(IsOk(CreateModel(server->stub(), Ref("a", "2"), config)));
  EXPECT_EQ(MetricOrFail(*server, "okl_quota_reserved_bytes"), 2.0 * one);

  const grpc::Status status = CreateModel(server->stub(), Ref("a", "3"), config);
  EXPECT_TRUE(HasCode(status, Code::RESOURCE_EXHAUSTED));
  // The flag and its limit, what the model may take and what the tenant has reserved.
  EXPECT_THAT(status.error_message(),
              AllOf(HasSubstr(absl::StrCat("--max_bytes_per_tenant=", limit)),
                    HasSubstr(absl::StrCat(one)), HasSubstr(absl::StrCat(2 * one))));
  v1::ModelInfo info;
  EXPECT_TRUE(HasCode(GetModel(server->stub(), Ref("a", "3"), &info), Code::NOT_FOUND));
  EXPECT_EQ(MetricOrFail(*server, "okl_quota_reserved_bytes"), 2.0 * one);
  EXPECT_EQ(MetricOrFail(*server, Rejections("bytes_per_tenant")), 1);
  EXPECT_EQ(MetricOrFail(*server, "okl_quota_limit{quota=\"bytes_per_tenant\"}"),
            static_cast<double>(limit));

  // A smaller model still fits in the half left.
  EXPECT_TRUE(IsOk(CreateModel(server->stub(), Ref("a", "small"), WithMaxTerms(config, 16))));
  // Another tenant has its own bytes.
  EXPECT_TRUE(IsOk(CreateModel(server->stub(), Ref("b", "1"), config)));
  EXPECT_TRUE(IsOk(CreateModel(server->stub(), Ref("b", "2"), config)));

  // Deleting frees the model's bytes.
  ASSERT_TRUE(IsOk(DeleteModel(server->stub(), Ref("a", "1"))));
  EXPECT_TRUE(IsOk(CreateModel(server->stub(), Ref("a", "3"), config)));
}

TEST(QuotaTest, MaxMemoryBytesCountsEveryTenantsModels) {
  const v1::ModelConfig config = ParseConfig(kSmallConfig);
  const uint64_t one = WorstCaseBytes(config);
  const uint64_t limit = one * 5 / 2;
  std::unique_ptr<ServerProcess> server =
      StartServer({absl::StrCat("--max_memory_bytes=", limit)});
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(IsOk(CreateModel(server->stub(), Ref("a", "1"), config)));
  ASSERT_TRUE(IsOk(CreateModel(server->stub(), Ref("b", "1"), config)));
  const grpc::Status status = CreateModel(server->stub(), Ref("c", "1"), config);
  EXPECT_TRUE(HasCode(status, Code::RESOURCE_EXHAUSTED));
  EXPECT_THAT(status.error_message(),
              AllOf(HasSubstr(absl::StrCat("--max_memory_bytes=", limit)),
                    HasSubstr(absl::StrCat(one)), HasSubstr(absl::StrCat(2 * one))));
  v1::ModelInfo info;
  EXPECT_TRUE(HasCode(GetModel(server->stub(), Ref("c", "1"), &info), Code::NOT_FOUND));
  EXPECT_EQ(MetricOrFail(*server, Rejections("memory_bytes")), 1);
  EXPECT_EQ(MetricOrFail(*server, "okl_quota_reserved_bytes"), 2.0 * one);
  EXPECT_EQ(MetricOrFail(*server, "okl_quota_limit{quota=\"memory_bytes\"}"),
            static_cast<double>(limit));
  ASSERT_TRUE(IsOk(DeleteModel(server->stub(), Ref("a", "1"))));
  EXPECT_EQ(MetricOrFail(*server, "okl_quota_reserved_bytes"), 1.0 * one);
  EXPECT_TRUE(IsOk(CreateModel(server->stub(), Ref("c", "1"), config)));
}

// A Restore reserves its config's worst case at the first chunk: as a new model, or over
// an existing one, whose reservation it then replaces.
TEST(QuotaTest, RestoreReservesItsConfigsBytesAndSwapsTheReplacedModels) {
  const v1::ModelConfig small = ParseConfig(kSmallConfig);
  const v1::ModelConfig larger = WithMaxTerms(small, 128);
  const uint64_t small_bytes = WorstCaseBytes(small);
  const uint64_t larger_bytes = WorstCaseBytes(larger);
  ASSERT_GT(larger_bytes, small_bytes);
  const uint64_t limit = small_bytes + larger_bytes + small_bytes / 2;
  std::unique_ptr<ServerProcess> server =
      StartServer({absl::StrCat("--max_bytes_per_tenant=", limit)});
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(IsOk(CreateModel(server->stub(), Ref("a", "1"), small)));
  absl::StatusOr<std::string> larger_snapshot = RandomSnapshot(larger, 100, 1);
  ASSERT_TRUE(larger_snapshot.ok()) << larger_snapshot.status();

  // Over the existing model: its bytes become the larger config's.
  ASSERT_TRUE(IsOk(Restore(server->stub(), Ref("a", "1"), *larger_snapshot)));
  EXPECT_EQ(MetricOrFail(*server, "okl_quota_reserved_bytes"),
            static_cast<double>(larger_bytes));
  // As a new model: larger + larger is over the limit.
  const grpc::Status status = Restore(server->stub(), Ref("a", "2"), *larger_snapshot);
  EXPECT_TRUE(HasCode(status, Code::RESOURCE_EXHAUSTED));
  EXPECT_THAT(status.error_message(), HasSubstr("--max_bytes_per_tenant"));
  v1::ModelInfo info;
  EXPECT_TRUE(HasCode(GetModel(server->stub(), Ref("a", "2"), &info), Code::NOT_FOUND));
  EXPECT_EQ(MetricOrFail(*server, Rejections("bytes_per_tenant")), 1);
  EXPECT_EQ(MetricOrFail(*server, "okl_quota_reserved_bytes"),
            static_cast<double>(larger_bytes));
  // A small one fits beside it.
  const std::string small_snapshot = [&] {
    absl::StatusOr<std::string> bytes = RandomSnapshot(small, 10, 2);
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    return bytes.ok() ? *bytes : std::string();
  }();
  EXPECT_TRUE(IsOk(Restore(server->stub(), Ref("a", "2"), small_snapshot)));
  EXPECT_EQ(MetricOrFail(*server, "okl_quota_reserved_bytes"),
            static_cast<double>(larger_bytes + small_bytes));
  // While a Restore runs the model it replaces still serves, so it needs room for both:
  // even the small config over the larger model does not fit now (larger + small +
  // small is over the limit), though the result would take less.
  const grpc::Status over = Restore(server->stub(), Ref("a", "1"), small_snapshot);
  EXPECT_TRUE(HasCode(over, Code::RESOURCE_EXHAUSTED));
  EXPECT_THAT(over.error_message(), HasSubstr("--max_bytes_per_tenant"));
  EXPECT_EQ(MetricOrFail(*server, "okl_quota_reserved_bytes"),
            static_cast<double>(larger_bytes + small_bytes));
  v1::ModelInfo larger_info;
  ASSERT_TRUE(IsOk(GetModel(server->stub(), Ref("a", "1"), &larger_info)));
  EXPECT_EQ(larger_info.config().budget().max_terms(), 128u)
      << "the refused Restore changed it";
  // With a/2 deleted there is room, and the small config gives the larger's bytes back.
  ASSERT_TRUE(IsOk(DeleteModel(server->stub(), Ref("a", "2"))));
  EXPECT_EQ(MetricOrFail(*server, "okl_quota_reserved_bytes"),
            static_cast<double>(larger_bytes));
  EXPECT_TRUE(IsOk(Restore(server->stub(), Ref("a", "1"), small_snapshot)));
  EXPECT_EQ(MetricOrFail(*server, "okl_quota_reserved_bytes"),
            static_cast<double>(small_bytes));
  ASSERT_TRUE(IsOk(DeleteModel(server->stub(), Ref("a", "1"))));
  EXPECT_EQ(MetricOrFail(*server, "okl_quota_reserved_bytes"), 0);
}

TEST(QuotaTest, RequestRateLimitsEachTenantAlone) {
  std::unique_ptr<ServerProcess> server =
      StartServer({"--max_requests_per_second_per_tenant=5"});
  ASSERT_NE(server, nullptr);
  const v1::ModelConfig config = ParseConfig(kSmallConfig);
  // One request from each tenant's burst of 5.
  ASSERT_TRUE(IsOk(CreateModel(server->stub(), Ref("busy", "m"), config)));
  ASSERT_TRUE(IsOk(CreateModel(server->stub(), Ref("quiet", "m"), config)));

  // The busy tenant calls 30 times at once; the quiet one 3 times in between.
  size_t admitted = 0;
  size_t refused = 0;
  grpc::Status refusal;
  const absl::Time start = absl::Now();
  for (int i = 0; i < 30; ++i) {
    v1::ModelInfo info;
    const grpc::Status status = GetModel(server->stub(), Ref("busy", "m"), &info);
    if (status.ok()) {
      ++admitted;
    } else {
      EXPECT_TRUE(HasCode(status, Code::RESOURCE_EXHAUSTED));
      ++refused;
      refusal = status;
    }
    if (i % 10 == 5) {
      EXPECT_TRUE(IsOk(GetModel(server->stub(), Ref("quiet", "m"), &info))) << "call " << i;
    }
  }
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
  // The burst (4 left after CreateModel) and what refilled meanwhile at 5/s.
  EXPECT_GE(admitted, 4u);
  EXPECT_LE(admitted, 5 + static_cast<size_t>(5 * elapsed)) << "over " << elapsed << " s";
  ASSERT_GT(refused, 0u) << "30 calls in " << elapsed << " s were all admitted";
  EXPECT_THAT(refusal.error_message(), AllOf(HasSubstr("--max_requests_per_second_per_tenant"),
                                             HasSubstr("5"), HasSubstr("\"busy\"")));
  EXPECT_EQ(MetricOrFail(*server, Rejections("requests_per_second_per_tenant")),
            static_cast<double>(refused));
  EXPECT_EQ(MetricOrFail(*server, "okl_quota_limit{quota=\"requests_per_second_per_tenant\"}"),
            5);

  // A second later the bucket has refilled.
  absl::SleepFor(absl::Milliseconds(1100));
  v1::ModelInfo info;
  EXPECT_TRUE(IsOk(GetModel(server->stub(), Ref("busy", "m"), &info)));
}

// Each ObserveStream message is one request: a stream faster than the rate is cut off,
// with the messages before the refused one applied.
TEST(QuotaTest, EachObserveStreamMessageCountsAgainstTheRate) {
  std::unique_ptr<ServerProcess> server =
      StartServer({"--max_requests_per_second_per_tenant=5"});
  ASSERT_NE(server, nullptr);
  const v1::ModelConfig config = ParseConfig(kSmallConfig);
  const v1::ModelRef ref = Ref("busy", "m");
  ASSERT_TRUE(IsOk(CreateModel(server->stub(), ref, config)));
  const std::vector<v1::Example> stream = MakeStream(config, 20, 1);
  v1::ObserveResponse response;
  const absl::Time start = absl::Now();
  const grpc::Status status = ObserveStream(
      server->stub(), ref, SplitIntoBatches(stream, std::vector<size_t>{1}), &response);
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
  EXPECT_TRUE(HasCode(status, Code::RESOURCE_EXHAUSTED));
  EXPECT_THAT(status.error_message(), HasSubstr("--max_requests_per_second_per_tenant"));
  absl::SleepFor(absl::Milliseconds(1100));
  v1::ModelInfo info;
  ASSERT_TRUE(IsOk(GetModel(server->stub(), ref, &info)));
  // The 4 tokens CreateModel left, and what refilled while the stream ran.
  EXPECT_GE(info.stats().steps(), 4u);
  EXPECT_LE(info.stats().steps(), 5 + static_cast<uint64_t>(5 * elapsed));
  EXPECT_LT(info.stats().steps(), stream.size());
  std::unique_ptr<CoreTwin> twin = CoreTwin::Create(config);
  ASSERT_NE(twin, nullptr);
  twin->Observe(absl::MakeConstSpan(stream).first(info.stats().steps()));
  EXPECT_TRUE(MatchesTwin(server->stub(), ref, *twin, MakeProbes(4, 8, 2)));
}

// ====================================================================================
// The Restore protocol.
// ====================================================================================

class RestoreStreamTest : public ::testing::Test {
 protected:
  // The server's --max_pending_events: a Restore takes a model's snapshot and the pages
  // of at most this many events.
  static constexpr uint64_t kMaxPendingEvents = 1000;

  void SetUp() override {
    server_ = StartServer({absl::StrCat("--max_pending_events=", kMaxPendingEvents)});
    ASSERT_NE(server_, nullptr);
    ASSERT_TRUE(IsOk(CreateModel(server_->stub(), source_, config_)));
    ASSERT_TRUE(IsOk(ObserveOk(server_->stub(), source_, MakeStream(config_, 300, 1))));
    bytes_ = SnapshotOf(server_->stub(), source_);
    ASSERT_GT(bytes_.size(), 2000u);
  }

  // Nothing was created under `ref`.
  void ExpectAbsent(const v1::ModelRef& ref) {
    v1::ModelInfo info;
    EXPECT_TRUE(HasCode(GetModel(server_->stub(), ref, &info), Code::NOT_FOUND))
        << RefName(ref);
  }

  const v1::ModelConfig config_ = ParseConfig(kSmallConfig);
  const v1::ModelRef source_ = Ref("acme", "source");
  const v1::ModelRef target_ = Ref("acme", "target");
  std::unique_ptr<ServerProcess> server_;
  std::string bytes_;
};

TEST_F(RestoreStreamTest, DeclaredSizeMustMatchTheStream) {
  // Exactly: restored.
  EXPECT_TRUE(IsOk(RestoreDeclared(server_->stub(), target_, bytes_, 1000, bytes_.size())));
  ASSERT_TRUE(IsOk(DeleteModel(server_->stub(), target_)));

  // Declared more than the stream carried: DATA_LOSS at its end.
  grpc::Status status =
      RestoreDeclared(server_->stub(), target_, bytes_, 1000, bytes_.size() + 100);
  EXPECT_TRUE(HasCode(status, Code::DATA_LOSS));
  EXPECT_THAT(status.error_message(), HasSubstr(absl::StrCat(bytes_.size() + 100)));
  ExpectAbsent(target_);

  // A stream running past what it declared: refused at the chunk that does.
  status = RestoreDeclared(server_->stub(), target_, bytes_, 1000, bytes_.size() - 100);
  EXPECT_TRUE(HasCode(status, Code::INVALID_ARGUMENT));
  EXPECT_THAT(status.error_message(), HasSubstr("runs past"));
  ExpectAbsent(target_);
}

TEST_F(RestoreStreamTest, DeclaredSizeOverTheLimitsIsRefusedAtTheFirstChunk) {
  const std::string filler = Junk(kMiB, 2);
  // Over 2 GiB, protobuf's limit on any snapshot.
  {
    RestoreCall call(server_->stub());
    v1::RestoreChunk first;
    *first.mutable_ref() = target_;
    first.set_snapshot_bytes(uint64_t{3} << 30);
    first.set_data(bytes_.substr(0, 1000));
    const grpc::Status status = StreamUntilRefused(call, first, filler, 512);
    EXPECT_TRUE(HasCode(status, Code::RESOURCE_EXHAUSTED));
    EXPECT_THAT(status.error_message(), HasSubstr(absl::StrCat(uint64_t{3} << 30)));
    EXPECT_LT(call.written(), 64u);
  }
  // More than any snapshot of its config can take, with as many events as a model may
  // have remembered.
  {
    const uint64_t most = MaxSnapshotBytes(CoreConfig(config_)) +
                          MaxEventPagesBytes(CoreConfig(config_), kMaxPendingEvents);
    RestoreCall call(server_->stub());
    v1::RestoreChunk first;
    *first.mutable_ref() = target_;
    first.set_snapshot_bytes(most + 1);
    first.set_data(bytes_.substr(0, 1000));
    const grpc::Status status = StreamUntilRefused(call, first, filler, 512);
    EXPECT_TRUE(HasCode(status, Code::INVALID_ARGUMENT));
    EXPECT_THAT(status.error_message(),
                AllOf(HasSubstr(absl::StrCat(most + 1)), HasSubstr(absl::StrCat(most))));
    EXPECT_LT(call.written(), 64u);
  }
  ExpectAbsent(target_);
}

// Bytes that stop before the config ends, or never reach one: DATA_LOSS.
TEST_F(RestoreStreamTest, StreamWithoutAConfigIsDataLoss) {
  // The snapshot's first 5 bytes: format_version and the start of the config.
  grpc::Status status = Restore(server_->stub(), target_, bytes_.substr(0, 5));
  EXPECT_TRUE(HasCode(status, Code::DATA_LOSS));
  ExpectAbsent(target_);

  // format_version, then a "config" 1 MiB long, in a 512 MiB stream: the server reads no
  // further than 64 KiB before giving up on finding its end.
  std::string prefix = "\x08\x01\x12";
  for (uint32_t length = 1 << 20; length != 0; length >>= 7) {
    prefix.push_back(static_cast<char>((length & 0x7f) | (length >= 0x80 ? 0x80 : 0)));
  }
  RestoreCall call(server_->stub());
  v1::RestoreChunk first;
  *first.mutable_ref() = target_;
  first.set_data(prefix + std::string(4096, 'x'));
  status = StreamUntilRefused(call, first, std::string(kMiB, 'x'), 512);
  EXPECT_TRUE(HasCode(status, Code::DATA_LOSS));
  EXPECT_THAT(status.error_message(), HasSubstr("config"));
  EXPECT_LT(call.written(), 64u) << "the server kept reading";
  ExpectAbsent(target_);

  // format_version, then something else.
  status = Restore(server_->stub(), target_, std::string("\x08\x01\x1a\x02hi") + bytes_);
  EXPECT_TRUE(HasCode(status, Code::DATA_LOSS));
  ExpectAbsent(target_);
}

// The config may arrive over many chunks: 10-byte chunks (and a 1-byte first one)
// restore the same model.
TEST_F(RestoreStreamTest, TinyChunksStillRestore) {
  ASSERT_TRUE(IsOk(Restore(server_->stub(), target_, bytes_, /*chunk_bytes=*/10)));
  EXPECT_EQ(SnapshotOf(server_->stub(), target_), bytes_);
  // 1 byte, then 7, then the rest whole; with the size declared.
  RestoreCall call(server_->stub());
  const v1::ModelRef other = Ref("acme", "target-2");
  v1::RestoreChunk chunk;
  *chunk.mutable_ref() = other;
  chunk.set_snapshot_bytes(bytes_.size());
  chunk.set_data(bytes_.substr(0, 1));
  ASSERT_TRUE(call.Write(chunk));
  chunk.Clear();
  chunk.set_data(bytes_.substr(1, 7));
  ASSERT_TRUE(call.Write(chunk));
  chunk.set_data(bytes_.substr(8));
  ASSERT_TRUE(call.Write(chunk));
  ASSERT_TRUE(IsOk(call.Finish()));
  EXPECT_EQ(SnapshotOf(server_->stub(), other), bytes_);
  // And it learns on as the source does.
  const std::vector<v1::Example> more = MakeStream(config_, 50, 9);
  v1::ObserveResponse a;
  v1::ObserveResponse b;
  ASSERT_TRUE(IsOk(Observe(server_->stub(), source_, more, &a)));
  ASSERT_TRUE(IsOk(Observe(server_->stub(), other, more, &b)));
  EXPECT_EQ(a.SerializeAsString(), b.SerializeAsString());
}

// The config is all a Restore needs to be refused for the server's limits or the
// tenant's quota: the server answers after the first chunk of a 300 MiB stream,
// without buffering it.
TEST(RestoreLimitsTest, SnapshotOverTheServersLimitsIsRefusedBeforeTheRestIsRead) {
  const v1::ModelConfig quota_breaker = ParseConfig(R"pb(
    dim: 1024
    kernel { gaussian { gamma: 0.01 } }
    loss { squared {} }
    learning_rate { eta0: 0.1 }
    budget { max_terms: 1000 }
  )pb");
  std::unique_ptr<ServerProcess> server =
      StartServer({"--max_dim=1024", "--max_terms=1000",
                   absl::StrCat("--max_bytes_per_tenant=", WorstCaseBytes(quota_breaker) - 1)});
  ASSERT_NE(server, nullptr);
  struct Case {
    std::string what;
    v1::ModelConfig config;
    Code code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"dim over --max_dim", ParseConfig(kDim4096Config), Code::INVALID_ARGUMENT, "--max_dim"},
      {"max_terms over --max_terms", WithMaxTerms(quota_breaker, 5000), Code::INVALID_ARGUMENT,
       "--max_terms"},
      {"over --max_bytes_per_tenant", quota_breaker, Code::RESOURCE_EXHAUSTED,
       "--max_bytes_per_tenant"},
  };
  const std::string filler = Junk(kMiB, 3);
  const uint64_t peak_before = PeakRssBytes(server->pid());
  for (const Case& c : cases) {
    // A real snapshot's first chunk (20 terms), declared and continued as 300 MiB.
    absl::StatusOr<std::string> bytes = RandomSnapshot(c.config, 20, 1);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    RestoreCall call(server->stub());
    v1::RestoreChunk first;
    *first.mutable_ref() = Ref("acme", "refused");
    first.set_data(bytes->substr(0, std::min(bytes->size(), kMiB)));
    const absl::Time start = absl::Now();
    const grpc::Status status = StreamUntilRefused(call, first, filler, 300);
    EXPECT_TRUE(HasCode(status, c.code)) << c.what;
    EXPECT_THAT(status.error_message(), HasSubstr(c.message)) << c.what;
    EXPECT_LT(call.written(), 64u) << c.what << ": the server kept reading";
    if (Verbose()) {
      std::cerr << c.what << ": refused after the client got " << call.written()
                << " of 300 chunks out, in " << absl::Now() - start << "\n";
    }
  }
  const uint64_t peak_after = PeakRssBytes(server->pid());
  if (Verbose()) {
    std::cerr << "server peak RSS " << Mb(peak_before) << " before, " << Mb(peak_after)
              << " after\n";
  }
  EXPECT_LT(peak_after - peak_before, 100 * kMiB);
  EXPECT_EQ(MetricOrFail(*server, Rejections("bytes_per_tenant")), 1);
  v1::ListModelsResponse list;
  ASSERT_TRUE(IsOk(ListModels(server->stub(), "", &list)));
  EXPECT_EQ(list.models_size(), 0);
}

// A Restore that fails after it reserved its config's bytes (a bad checksum, a state
// that does not fit together, a client that cancels or sends nothing) gives back its
// quota and its slot: with one slot and room for one model, each next Restore runs, and
// the last, valid one is the tenant's only model.
TEST(RestoreLimitsTest, FailedRestoreGivesBackItsQuotaAndItsSlot) {
  std::unique_ptr<ServerProcess> server =
      StartServer({"--max_concurrent_restores=1", "--max_models_per_tenant=1"});
  ASSERT_NE(server, nullptr);
  const v1::ModelConfig config = ParseConfig(kSmallConfig);
  const v1::ModelRef ref = Ref("acme", "m");
  absl::StatusOr<ModelState> state = RandomState(CoreConfig(config), 30, 1);
  ASSERT_TRUE(state.ok()) << state.status();
  absl::StatusOr<std::string> valid = EncodeSnapshot(*state);
  ASSERT_TRUE(valid.ok()) << valid.status();
  std::string corrupted = *valid;
  corrupted[corrupted.size() / 2] ^= 0x10;
  ModelState inconsistent_state = *state;
  inconsistent_state.added_at[0] = inconsistent_state.steps + 1;
  absl::StatusOr<std::string> inconsistent = EncodeSnapshot(inconsistent_state);
  ASSERT_TRUE(inconsistent.ok()) << inconsistent.status();

  auto expect_nothing_held = [&](absl::string_view what) {
    // A cancelled call ends on the server a moment after the client sees it end.
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while (MetricOrFail(*server, "okl_quota_reserved_bytes") != 0 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    EXPECT_EQ(MetricOrFail(*server, "okl_quota_reserved_bytes"), 0) << what;
    v1::ModelInfo info;
    EXPECT_TRUE(HasCode(GetModel(server->stub(), ref, &info), Code::NOT_FOUND)) << what;
  };

  grpc::Status status = Restore(server->stub(), ref, corrupted, 64);
  EXPECT_TRUE(HasCode(status, Code::DATA_LOSS));
  EXPECT_THAT(status.error_message(), HasSubstr("checksum"));
  expect_nothing_held("bad checksum");

  status = Restore(server->stub(), ref, valid->substr(0, valid->size() - 100), 64);
  EXPECT_TRUE(HasCode(status, Code::DATA_LOSS));
  expect_nothing_held("truncated");

  status = Restore(server->stub(), ref, *inconsistent, 64);
  EXPECT_TRUE(HasCode(status, Code::DATA_LOSS));
  EXPECT_THAT(status.error_message(), HasSubstr("added_at"));
  expect_nothing_held("inconsistent state");

  {
    RestoreCall call(server->stub());
    v1::RestoreChunk first;
    *first.mutable_ref() = ref;
    first.set_data(valid->substr(0, 256));
    ASSERT_TRUE(call.Write(first));
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (MetricOrFail(*server, "okl_quota_reserved_bytes") == 0 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    ASSERT_GT(MetricOrFail(*server, "okl_quota_reserved_bytes"), 0)
        << "the Restore did not reserve at its first chunk";
    call.Cancel();
    EXPECT_TRUE(HasCode(call.Finish(), Code::CANCELLED));
  }
  expect_nothing_held("cancelled");

  {
    RestoreCall call(server->stub());  // no chunk at all
    status = call.Finish();
    EXPECT_TRUE(HasCode(status, Code::INVALID_ARGUMENT));
  }
  {
    RestoreCall call(server->stub());
    v1::RestoreChunk no_ref;
    no_ref.set_data(*valid);
    call.Write(no_ref);
    EXPECT_TRUE(HasCode(call.Finish(), Code::INVALID_ARGUMENT));
  }
  expect_nothing_held("no chunks, no ref");

  EXPECT_TRUE(IsOk(Restore(server->stub(), ref, *valid)));
  EXPECT_EQ(MetricOrFail(*server, "okl_quota_reserved_bytes"),
            static_cast<double>(WorstCaseBytes(config)));
  EXPECT_TRUE(HasCode(Restore(server->stub(), Ref("acme", "second"), *valid),
                      Code::RESOURCE_EXHAUSTED));
  EXPECT_EQ(MetricOrFail(*server, Rejections("models_per_tenant")), 1);
}

}  // namespace
}  // namespace okl::testing
