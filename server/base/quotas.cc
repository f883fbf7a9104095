// server/base/quotas.cc

#include "server/base/quotas.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace okl {
namespace {

// Buckets of tenants idle long enough to be full again are forgotten once there are this
// many, so that requests naming ever new tenants cannot grow the map without bound.
constexpr size_t kMaxIdleBuckets = 10000;

}  // namespace

absl::string_view QuotaName(Quota quota) {
  switch (quota) {
    case Quota::kModels: return "models";
    case Quota::kModelsPerTenant: return "models_per_tenant";
    case Quota::kBytesPerTenant: return "bytes_per_tenant";
    case Quota::kMemoryBytes: return "memory_bytes";
    case Quota::kRequestsPerSecondPerTenant: return "requests_per_second_per_tenant";
    case Quota::kEventBytesPerTenant:
      return "event_bytes_per_tenant";
  }
  return "unknown";
}

QuotaReservation::QuotaReservation(QuotaReservation&& other) noexcept
    : quotas_(std::exchange(other.quotas_, nullptr)),
      tenant_(std::move(other.tenant_)),
      bytes_(other.bytes_),
      models_(other.models_) {}

QuotaReservation& QuotaReservation::operator=(QuotaReservation&& other) noexcept {
  if (this != &other) {
    if (quotas_ != nullptr) quotas_->Release(tenant_, bytes_, models_);
    quotas_ = std::exchange(other.quotas_, nullptr);
    tenant_ = std::move(other.tenant_);
    bytes_ = other.bytes_;
    models_ = other.models_;
  }
  return *this;
}

QuotaReservation::~QuotaReservation() {
  if (quotas_ != nullptr) quotas_->Release(tenant_, bytes_, models_);
}

void QuotaReservation::Commit() { quotas_ = nullptr; }

ResourceQuotas::ResourceQuotas(Limits limits) : limits_(limits) {}

absl::Status ResourceQuotas::Rejected(Quota quota, std::string message) {
  rejections_[static_cast<size_t>(quota)].fetch_add(1, std::memory_order_relaxed);
  return absl::ResourceExhaustedError(std::move(message));
}

absl::StatusOr<QuotaReservation> ResourceQuotas::Reserve(absl::string_view tenant,
                                                         uint64_t bytes, bool new_model) {
  const uint64_t models = new_model ? 1 : 0;
  WriterLock lock(&mu_);
  TenantUse& use = tenants_[tenant];
  absl::Status status;
  if (limits_.max_models_per_tenant > 0 &&
      use.models + models > limits_.max_models_per_tenant) {
    status = Rejected(Quota::kModelsPerTenant,
                      absl::StrCat("tenant \"", tenant, "\" holds ", use.models,
                                   " models, its maximum (--max_models_per_tenant=",
                                   limits_.max_models_per_tenant, "); delete one first"));
  } else if (limits_.max_bytes_per_tenant > 0 &&
             bytes > limits_.max_bytes_per_tenant - std::min(use.bytes,
                                                             limits_.max_bytes_per_tenant)) {
    status = Rejected(
        Quota::kBytesPerTenant,
        absl::StrCat("the model may take ", bytes, " bytes (budget.max_terms x (dim + 1) "
                     "doubles, or x (dim + max_classes) for a multi-class model, and "
                     "bookkeeping, plus its regret window and the comparator's W x W "
                     "matrix), and tenant \"", tenant, "\" has ", use.bytes,
                     " of its --max_bytes_per_tenant=", limits_.max_bytes_per_tenant,
                     " reserved; lower max_terms, dim, max_classes or regret_window, or "
                     "delete a model"));
  } else if (models_ + models > limits_.max_models) {
    status = Rejected(Quota::kModels,
                      absl::StrCat("the server holds its maximum of ", limits_.max_models,
                                   " models (--max_models); delete one first"));
  } else if (limits_.max_memory_bytes > 0 &&
             bytes > limits_.max_memory_bytes - std::min(bytes_, limits_.max_memory_bytes)) {
    status = Rejected(
        Quota::kMemoryBytes,
        absl::StrCat("the model may take ", bytes, " bytes, and the server has ", bytes_,
                     " of its --max_memory_bytes=", limits_.max_memory_bytes,
                     " reserved for its models; lower max_terms, dim, max_classes or "
                     "regret_window"));
  }
  if (!status.ok()) {
    EraseIfEmpty(tenants_.find(tenant));
    return status;
  }
  use.models += models;
  use.bytes += bytes;
  models_ += models;
  bytes_ += bytes;
  return QuotaReservation(this, std::string(tenant), bytes, models);
}

void ResourceQuotas::Add(absl::string_view tenant, uint64_t bytes, uint64_t models) {
  WriterLock lock(&mu_);
  TenantUse& use = tenants_[tenant];
  use.models += models;
  use.bytes += bytes;
  models_ += models;
  bytes_ += bytes;
}

void ResourceQuotas::Release(absl::string_view tenant, uint64_t bytes, uint64_t models) {
  WriterLock lock(&mu_);
  auto it = tenants_.find(tenant);
  if (it == tenants_.end()) return;
  // No more than the tenant holds is returned, to the server's totals too.
  TenantUse& use = it->second;
  models = std::min(use.models, models);
  bytes = std::min(use.bytes, bytes);
  use.models -= models;
  use.bytes -= bytes;
  models_ -= models;
  bytes_ -= bytes;
  EraseIfEmpty(it);
}

void ResourceQuotas::EraseIfEmpty(absl::flat_hash_map<std::string, TenantUse>::iterator it) {
  if (it != tenants_.end() && it->second.empty()) tenants_.erase(it);
}

absl::Status ResourceQuotas::ReserveEventBytes(absl::string_view tenant, uint64_t bytes) {
  if (bytes == 0) return absl::OkStatus();  // nothing to count: no tenant entry either
  const uint64_t limit = limits_.max_event_bytes_per_tenant;
  WriterLock lock(&mu_);
  auto it = tenants_.find(tenant);
  const uint64_t used = it == tenants_.end() ? 0 : it->second.event_bytes;
  if (limit > 0 && bytes > limit - std::min(used, limit)) {
    return Rejected(
        Quota::kEventBytesPerTenant,
        absl::StrCat("the events to remember take ", bytes, " bytes, and tenant \"", tenant,
                     "\"'s remembered events hold ", used,
                     " of its --max_event_bytes_per_tenant=", limit,
                     "; label some or let them expire first (a Predict may remember with "
                     "a shorter wait_seconds), or delete a model that holds some"));
  }
  if (it == tenants_.end()) it = tenants_.try_emplace(tenant).first;
  it->second.event_bytes += bytes;
  event_bytes_ += bytes;
  return absl::OkStatus();
}

void ResourceQuotas::AddEventBytes(absl::string_view tenant, uint64_t bytes) {
  if (bytes == 0) return;
  WriterLock lock(&mu_);
  tenants_[tenant].event_bytes += bytes;
  event_bytes_ += bytes;
}

void ResourceQuotas::ReleaseEventBytes(absl::string_view tenant, uint64_t bytes) {
  WriterLock lock(&mu_);
  auto it = tenants_.find(tenant);
  if (it == tenants_.end()) return;
  bytes = std::min(it->second.event_bytes, bytes);  // no more than the tenant holds
  it->second.event_bytes -= bytes;
  event_bytes_ -= bytes;
  EraseIfEmpty(it);
}

uint64_t ResourceQuotas::TenantEventBytes(absl::string_view tenant) const {
  ReaderLock lock(&mu_);
  auto it = tenants_.find(tenant);
  return it == tenants_.end() ? 0 : it->second.event_bytes;
}

absl::Status ResourceQuotas::Admit(absl::string_view tenant) {
  const double rate = limits_.max_requests_per_second_per_tenant;
  if (rate <= 0) return absl::OkStatus();
  const double burst = std::max(1.0, rate);
  const absl::Time now = absl::Now();
  {
    PlainLock lock(&bucket_mu_);
    if (buckets_.size() >= kMaxIdleBuckets && !buckets_.contains(tenant)) {
      absl::erase_if(buckets_, [&](const auto& item) {
        return item.second.tokens + absl::ToDoubleSeconds(now - item.second.refilled) * rate >=
               burst;
      });
    }
    auto [it, inserted] = buckets_.try_emplace(tenant, Bucket{.tokens = burst, .refilled = now});
    Bucket& bucket = it->second;
    bucket.tokens = std::min(
        burst, bucket.tokens + absl::ToDoubleSeconds(now - bucket.refilled) * rate);
    bucket.refilled = now;
    if (bucket.tokens >= 1) {
      bucket.tokens -= 1;
      return absl::OkStatus();
    }
  }
  return Rejected(Quota::kRequestsPerSecondPerTenant,
                  absl::StrCat("tenant \"", tenant, "\" is over its request rate of ", rate,
                               " per second (--max_requests_per_second_per_tenant); slow "
                               "down and retry"));
}

ResourceQuotas::Usage ResourceQuotas::usage() const {
  Usage usage;
  {
    ReaderLock lock(&mu_);
    usage.models = models_;
    usage.bytes = bytes_;
    usage.tenants = tenants_.size();
    usage.event_bytes = event_bytes_;
  }
  for (size_t i = 0; i < kQuotaCount; ++i) {
    usage.rejections[i] = rejections_[i].load(std::memory_order_relaxed);
  }
  return usage;
}

std::pair<uint64_t, uint64_t> ResourceQuotas::TenantUsage(absl::string_view tenant) const {
  ReaderLock lock(&mu_);
  auto it = tenants_.find(tenant);
  if (it == tenants_.end()) return {0, 0};
  return {it->second.models, it->second.bytes};
}

}  // namespace okl
