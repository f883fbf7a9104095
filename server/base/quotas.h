// server/base/quotas.h
//
// ResourceQuotas keeps every tenant within its share of the server: how many models it
// holds, how many bytes those models may come to (each counted at its worst case,
// WorstCaseMemoryBytes(config), from the moment it is asked for), what all tenants'
// models together may come to, how many requests per second it may send (a token
// bucket per tenant), and how many bytes its remembered events may take in the store
// (delayed feedback: StoredEventBytes, counted by each model's EventBook). A model's bytes are
// reserved before anything of it is allocated and released when it is deleted or replaced, so
// the sum of reservations always bounds what the models can hold.
//
// Over a quota: ResourceExhausted naming the quota's flag, its limit and the current
// use. Each quota counts its rejections for the metrics.
//
// Thread-safe.
//
// Example:
//   okl::ResourceQuotas quotas({.max_models = 100, .max_models_per_tenant = 10});
//   OKL_ASSIGN_OR_RETURN(okl::QuotaReservation hold,
//                        quotas.Reserve("acme", okl::WorstCaseMemoryBytes(config)));
//   ... create the model; on failure `hold` releases itself ...
//   hold.Commit();  // the model exists: its bytes stay reserved until Release()
#ifndef OKL_SERVER_BASE_QUOTAS_H_
#define OKL_SERVER_BASE_QUOTAS_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/runtime/mutex.h"

namespace okl {

class ResourceQuotas;

// The quotas, as named in metrics (label quota="...") and flags (--max_<name>).
enum class Quota {
  kModels,                      // --max_models
  kModelsPerTenant,             // --max_models_per_tenant
  kBytesPerTenant,              // --max_bytes_per_tenant
  kMemoryBytes,                 // --max_memory_bytes
  kRequestsPerSecondPerTenant,  // --max_requests_per_second_per_tenant
  kEventBytesPerTenant,         // --max_event_bytes_per_tenant
};
inline constexpr size_t kQuotaCount = 6;
absl::string_view QuotaName(Quota quota);  // "models_per_tenant", ...

// One model's bytes (and, unless it replaces a model, its count) held against a
// tenant's quotas until Commit() (then they stay until ResourceQuotas::Release) or
// destruction (then they are returned). Movable, not copyable.
class QuotaReservation {
 public:
  QuotaReservation() = default;
  QuotaReservation(QuotaReservation&& other) noexcept;
  QuotaReservation& operator=(QuotaReservation&& other) noexcept;
  ~QuotaReservation();

  // Keeps the reservation: the model now exists and is released by Release().
  void Commit();
  const std::string& tenant() const { return tenant_; }
  uint64_t bytes() const { return bytes_; }
  uint64_t models() const { return models_; }  // 0 for a replacement, else 1

 private:
  friend class ResourceQuotas;
  QuotaReservation(ResourceQuotas* quotas, std::string tenant, uint64_t bytes,
                   uint64_t models)
      : quotas_(quotas), tenant_(std::move(tenant)), bytes_(bytes), models_(models) {}

  ResourceQuotas* quotas_ = nullptr;  // null: nothing held
  std::string tenant_;
  uint64_t bytes_ = 0;
  uint64_t models_ = 0;
};

class ResourceQuotas {
 public:
  // 0 means no limit, except for max_models.
  struct Limits {
    uint64_t max_models = 10000;
    uint64_t max_models_per_tenant = 0;
    uint64_t max_bytes_per_tenant = 0;
    uint64_t max_memory_bytes = 0;
    double max_requests_per_second_per_tenant = 0;
    uint64_t max_event_bytes_per_tenant = 0;
  };

  explicit ResourceQuotas(Limits limits);

  ResourceQuotas(const ResourceQuotas&) = delete;
  ResourceQuotas& operator=(const ResourceQuotas&) = delete;

  const Limits& limits() const { return limits_; }

  // Reserves `bytes` worst-case bytes and, if `new_model` (not the replacement of a model
  // that exists), one more model for `tenant`; or returns ResourceExhausted naming the
  // first quota it would exceed, with nothing reserved.
  absl::StatusOr<QuotaReservation> Reserve(absl::string_view tenant, uint64_t bytes,
                                           bool new_model = true) ABSL_LOCKS_EXCLUDED(mu_);
  // Counts models and bytes that exist already (restored at start-up) without checking
  // the limits: stored models are never refused for a quota lowered since.
  void Add(absl::string_view tenant, uint64_t bytes, uint64_t models = 1)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Returns committed bytes and models (a deletion or replacement).
  void Release(absl::string_view tenant, uint64_t bytes, uint64_t models = 1)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The stored bytes of `tenant`'s remembered events (server/events/event_book.h): Reserve adds
  // `bytes` unless that would pass max_event_bytes_per_tenant (then ResourceExhausted,
  // nothing added); Add counts bytes stored already, without checking; Release returns
  // them.
  absl::Status ReserveEventBytes(absl::string_view tenant, uint64_t bytes)
      ABSL_LOCKS_EXCLUDED(mu_);
  void AddEventBytes(absl::string_view tenant, uint64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  void ReleaseEventBytes(absl::string_view tenant, uint64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t TenantEventBytes(absl::string_view tenant) const ABSL_LOCKS_EXCLUDED(mu_);

  // Takes one request from the tenant's token bucket (rate
  // max_requests_per_second_per_tenant, burst of one second's worth); ResourceExhausted
  // if it is empty. Always OK without a rate limit.
  absl::Status Admit(absl::string_view tenant) ABSL_LOCKS_EXCLUDED(bucket_mu_);

  // For metrics.
  struct Usage {
    uint64_t models = 0;
    uint64_t bytes = 0;
    uint64_t tenants = 0;
    uint64_t event_bytes = 0;  // all tenants' remembered events
    std::array<uint64_t, kQuotaCount> rejections{};
  };
  Usage usage() const ABSL_LOCKS_EXCLUDED(mu_);
  // The tenant's models and reserved bytes.
  std::pair<uint64_t, uint64_t> TenantUsage(absl::string_view tenant) const
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  friend class QuotaReservation;
  struct TenantUse {
    uint64_t models = 0;
    uint64_t bytes = 0;
    uint64_t event_bytes = 0;

    bool empty() const { return models == 0 && bytes == 0 && event_bytes == 0; }
  };
  // Forgets `tenant`'s use once nothing is counted for it.
  void EraseIfEmpty(absl::flat_hash_map<std::string, TenantUse>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  struct Bucket {
    double tokens = 0;
    absl::Time refilled;
  };

  absl::Status Rejected(Quota quota, std::string message);

  const Limits limits_;
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, TenantUse> tenants_ ABSL_GUARDED_BY(mu_);
  uint64_t models_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t event_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // The rate limiter's own lock: it is taken on every request, the other only when
  // models come and go.
  PlainMutex bucket_mu_;
  absl::flat_hash_map<std::string, Bucket> buckets_ ABSL_GUARDED_BY(bucket_mu_);
  std::array<std::atomic<uint64_t>, kQuotaCount> rejections_{};
};

}  // namespace okl

#endif  // OKL_SERVER_BASE_QUOTAS_H_
