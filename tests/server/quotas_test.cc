// ResourceQuotas (server/base/quotas.h) on its own: each quota refuses with its flag, limit and
// use and reserves nothing; a reservation returns its bytes unless committed, including
// across moves; a replacement counts bytes but no model; restored models are counted
// whatever the limits; the token bucket admits a second's worth, then refills at the
// rate; tenants never share a count; and concurrent reservations never pass a limit.

#include "server/base/quotas.h"

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace okl {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Pair;

uint64_t Rejections(const ResourceQuotas& quotas, Quota quota) {
  return quotas.usage().rejections[static_cast<size_t>(quota)];
}

TEST(ResourceQuotasTest, AReservationCountsUntilDroppedAndStaysOnceCommitted) {
  ResourceQuotas quotas({.max_models = 10});
  {
    absl::StatusOr<QuotaReservation> hold = quotas.Reserve("acme", 1000);
    ASSERT_TRUE(hold.ok()) << hold.status();
    EXPECT_EQ(hold->models(), 1u);
    EXPECT_EQ(hold->bytes(), 1000u);
    EXPECT_THAT(quotas.TenantUsage("acme"), Pair(1u, 1000u));
  }  // dropped uncommitted: a model that was never made
  EXPECT_THAT(quotas.TenantUsage("acme"), Pair(0u, 0u));
  EXPECT_EQ(quotas.usage().tenants, 0u);

  absl::StatusOr<QuotaReservation> kept = quotas.Reserve("acme", 1000);
  ASSERT_TRUE(kept.ok()) << kept.status();
  kept->Commit();
  kept = absl::StatusOr<QuotaReservation>();  // the committed reservation goes away
  EXPECT_THAT(quotas.TenantUsage("acme"), Pair(1u, 1000u));
  quotas.Release("acme", 1000);
  EXPECT_THAT(quotas.TenantUsage("acme"), Pair(0u, 0u));
  const ResourceQuotas::Usage usage = quotas.usage();
  EXPECT_EQ(usage.models, 0u);
  EXPECT_EQ(usage.bytes, 0u);
}

TEST(ResourceQuotasTest, AMovedReservationReleasesOnceFromItsLastOwner) {
  ResourceQuotas quotas({});
  absl::StatusOr<QuotaReservation> first = quotas.Reserve("acme", 100);
  ASSERT_TRUE(first.ok());
  QuotaReservation moved = *std::move(first);
  EXPECT_THAT(quotas.TenantUsage("acme"), Pair(1u, 100u));
  QuotaReservation assigned;
  assigned = std::move(moved);
  EXPECT_THAT(quotas.TenantUsage("acme"), Pair(1u, 100u));
  // Assigning over a live reservation returns the one it held.
  absl::StatusOr<QuotaReservation> second = quotas.Reserve("acme", 7);
  ASSERT_TRUE(second.ok());
  EXPECT_THAT(quotas.TenantUsage("acme"), Pair(2u, 107u));
  assigned = *std::move(second);
  EXPECT_THAT(quotas.TenantUsage("acme"), Pair(1u, 7u));
  assigned = QuotaReservation();
  EXPECT_THAT(quotas.TenantUsage("acme"), Pair(0u, 0u));
}

TEST(ResourceQuotasTest, EachQuotaRefusesWithItsFlagAndReservesNothing) {
  struct Case {
    const char* name;
    ResourceQuotas::Limits limits;
    uint64_t bytes;  // of the second model (the first takes 600)
    Quota quota;
    const char* flag;
  };
  const Case cases[] = {
      {"models", {.max_models = 1}, 1, Quota::kModels, "--max_models"},
      {"models per tenant",
       {.max_models_per_tenant = 1},
       1,
       Quota::kModelsPerTenant,
       "--max_models_per_tenant=1"},
      {"bytes per tenant",
       {.max_bytes_per_tenant = 1000},
       401,
       Quota::kBytesPerTenant,
       "--max_bytes_per_tenant=1000"},
      {"memory",
       {.max_memory_bytes = 1000},
       401,
       Quota::kMemoryBytes,
       "--max_memory_bytes=1000"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ResourceQuotas quotas(c.limits);
    absl::StatusOr<QuotaReservation> first = quotas.Reserve("acme", 600);
    ASSERT_TRUE(first.ok()) << first.status();
    first->Commit();
    absl::StatusOr<QuotaReservation> second = quotas.Reserve("acme", c.bytes);
    EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(second.status().message(), HasSubstr(c.flag));
    EXPECT_THAT(quotas.TenantUsage("acme"), Pair(1u, 600u));
    EXPECT_EQ(Rejections(quotas, c.quota), 1u);
    // Exactly at the limit fits where the limit is in bytes.
    if (c.quota == Quota::kBytesPerTenant || c.quota == Quota::kMemoryBytes) {
      EXPECT_TRUE(quotas.Reserve("acme", 400).ok());
    }
  }
}

TEST(ResourceQuotasTest, TheMessagesSayTheUseAndWhatToDo) {
  ResourceQuotas quotas({.max_models_per_tenant = 2, .max_bytes_per_tenant = 1000});
  quotas.Add("acme", 300, 2);
  EXPECT_THAT(quotas.Reserve("acme", 1).status().message(),
              AllOf(HasSubstr("tenant \"acme\" holds 2 models"), HasSubstr("delete one")));
  quotas.Release("acme", 0, 1);
  EXPECT_THAT(quotas.Reserve("acme", 701).status().message(),
              AllOf(HasSubstr("may take 701 bytes"), HasSubstr("has 300 of its"),
                    HasSubstr("lower max_terms")));
}

TEST(ResourceQuotasTest, AReplacementCountsItsBytesButNoModel) {
  ResourceQuotas quotas({.max_models_per_tenant = 1});
  quotas.Add("acme", 500);
  // A Restore over the tenant's one model: its count is not a new model's.
  absl::StatusOr<QuotaReservation> replacement =
      quotas.Reserve("acme", 800, /*new_model=*/false);
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  EXPECT_EQ(replacement->models(), 0u);
  EXPECT_THAT(quotas.TenantUsage("acme"), Pair(1u, 1300u));
  replacement->Commit();
  quotas.Release("acme", 500, 0);  // the replaced model's bytes
  EXPECT_THAT(quotas.TenantUsage("acme"), Pair(1u, 800u));
}

TEST(ResourceQuotasTest, RestoredModelsAreCountedWhateverTheLimits) {
  ResourceQuotas quotas({.max_models = 1, .max_bytes_per_tenant = 10});
  quotas.Add("acme", 1000, 3);  // stored before the limits were lowered
  EXPECT_THAT(quotas.TenantUsage("acme"), Pair(3u, 1000u));
  EXPECT_EQ(quotas.Reserve("acme", 1).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(quotas.usage().models, 3u);
  // Releasing more than is held stops at zero.
  quotas.Release("acme", 5000, 9);
  EXPECT_THAT(quotas.TenantUsage("acme"), Pair(0u, 0u));
  EXPECT_EQ(quotas.usage().bytes, 0u);
}

TEST(ResourceQuotasTest, TenantsHaveTheirOwnCountsAndShareTheServersLimits) {
  ResourceQuotas quotas({.max_models = 3, .max_models_per_tenant = 2});
  std::vector<QuotaReservation> held;
  for (const char* tenant : {"a", "a", "b"}) {
    absl::StatusOr<QuotaReservation> hold = quotas.Reserve(tenant, 10);
    ASSERT_TRUE(hold.ok()) << tenant << ": " << hold.status();
    held.push_back(*std::move(hold));
  }
  EXPECT_EQ(quotas.Reserve("a", 10).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Rejections(quotas, Quota::kModelsPerTenant), 1u);
  // b is within its own quota but the server is full.
  EXPECT_THAT(quotas.Reserve("b", 10).status().message(), HasSubstr("--max_models"));
  EXPECT_EQ(Rejections(quotas, Quota::kModels), 1u);
  EXPECT_THAT(quotas.TenantUsage("a"), Pair(2u, 20u));
  EXPECT_THAT(quotas.TenantUsage("b"), Pair(1u, 10u));
  EXPECT_EQ(quotas.usage().tenants, 2u);
}

TEST(ResourceQuotasTest, TheRateLimitAdmitsASecondsWorthThenRefillsAtTheRate) {
  ResourceQuotas unlimited({});
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(unlimited.Admit("acme").ok());

  ResourceQuotas quotas({.max_requests_per_second_per_tenant = 5});
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(quotas.Admit("acme").ok()) << "request " << i;
  const absl::Status over = quotas.Admit("acme");
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.message(), HasSubstr("--max_requests_per_second_per_tenant"));
  EXPECT_EQ(Rejections(quotas, Quota::kRequestsPerSecondPerTenant), 1u);
  // Another tenant has a full bucket of its own.
  EXPECT_TRUE(quotas.Admit("globex").ok());
  // 0.5 s at 5 per second refills 2.5 requests (a slow machine only adds more, up to 5).
  absl::SleepFor(absl::Milliseconds(500));
  int admitted = 0;
  while (admitted < 10 && quotas.Admit("acme").ok()) ++admitted;
  EXPECT_GE(admitted, 2);
  EXPECT_LE(admitted, 5);
}

TEST(ResourceQuotasTest, ConcurrentReservationsNeverPassALimit) {
  ResourceQuotas quotas({.max_models = 1000, .max_bytes_per_tenant = 50 * 64});
  std::atomic<int> granted{0};
  std::vector<std::thread> threads;
  std::vector<std::vector<QuotaReservation>> held(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        absl::StatusOr<QuotaReservation> hold = quotas.Reserve("acme", 64);
        if (!hold.ok()) continue;
        ++granted;
        held[t].push_back(*std::move(hold));
        if (i % 3 == 0) held[t].pop_back();  // some are given back at once
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const auto [models, bytes] = quotas.TenantUsage("acme");
  EXPECT_LE(bytes, 50u * 64);
  EXPECT_EQ(bytes, models * 64);
  size_t kept = 0;
  for (const auto& h : held) kept += h.size();
  EXPECT_EQ(models, kept);
  EXPECT_GT(granted.load(), 50);  // the returned ones were granted again
  held.clear();
  EXPECT_THAT(quotas.TenantUsage("acme"), Pair(0u, 0u));
}

TEST(ResourceQuotasTest, EventBytesAreTheTenantsOwnAndRefusedWholePastTheLimit) {
  ResourceQuotas quotas({.max_event_bytes_per_tenant = 1000});
  ASSERT_TRUE(quotas.ReserveEventBytes("a", 600).ok());
  const absl::Status over = quotas.ReserveEventBytes("a", 401);
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.message(), AllOf(HasSubstr("401"), HasSubstr("hold 600"),
                                    HasSubstr("--max_event_bytes_per_tenant=1000")));
  EXPECT_EQ(Rejections(quotas, Quota::kEventBytesPerTenant), 1u);
  EXPECT_EQ(quotas.TenantEventBytes("a"), 600u);          // nothing of the refused request
  EXPECT_TRUE(quotas.ReserveEventBytes("a", 400).ok());   // up to the limit
  EXPECT_TRUE(quotas.ReserveEventBytes("b", 1000).ok());  // another tenant's own
  // Bytes stored already count whatever the limit; releasing stops at zero.
  quotas.AddEventBytes("a", 5000);
  EXPECT_EQ(quotas.TenantEventBytes("a"), 6000u);
  EXPECT_EQ(quotas.usage().event_bytes, 7000u);
  quotas.ReleaseEventBytes("a", 9000);
  EXPECT_EQ(quotas.TenantEventBytes("a"), 0u);
  EXPECT_EQ(quotas.usage().event_bytes, 1000u);
  EXPECT_EQ(quotas.usage().tenants, 1u);  // a tenant with nothing counted is forgotten
  // Events count apart from the models' bytes.
  EXPECT_THAT(quotas.TenantUsage("b"), Pair(0u, 0u));
  // Without a limit, any amount.
  ResourceQuotas unlimited({});
  EXPECT_TRUE(unlimited.ReserveEventBytes("a", uint64_t{1} << 60).ok());
}

TEST(QuotaNameTest, NamesMatchTheFlags) {
  EXPECT_EQ(QuotaName(Quota::kModels), "models");
  EXPECT_EQ(QuotaName(Quota::kModelsPerTenant), "models_per_tenant");
  EXPECT_EQ(QuotaName(Quota::kBytesPerTenant), "bytes_per_tenant");
  EXPECT_EQ(QuotaName(Quota::kMemoryBytes), "memory_bytes");
  EXPECT_EQ(QuotaName(Quota::kRequestsPerSecondPerTenant), "requests_per_second_per_tenant");
  EXPECT_EQ(QuotaName(Quota::kEventBytesPerTenant), "event_bytes_per_tenant");
}

}  // namespace
}  // namespace okl
