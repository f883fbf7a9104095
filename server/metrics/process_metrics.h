// server/metrics/process_metrics.h
//
// ServerMetrics's standard process_* series, read from /proc/self and getrlimit at
// scrape time: start time, CPU seconds, resident and virtual memory, open and maximum
// file descriptors. A series /proc cannot provide is left out, not reported as 0.
// Internal to ServerMetrics. Thread-safe.
//
// Example:
//   const std::optional<double> start_time = ProcessStartTime();  // once
//   CollectProcessMetrics(start_time, &families);                 // every scrape
#ifndef OKL_SERVER_METRICS_PROCESS_METRICS_H_
#define OKL_SERVER_METRICS_PROCESS_METRICS_H_

#include <optional>
#include <vector>

#include "prometheus/metric_family.h"

namespace okl::metrics_internal {

// The process's start time in seconds since the Unix epoch; nullopt if /proc cannot tell.
// It does not change, so callers read it once.
std::optional<double> ProcessStartTime();

// Appends process_start_time_seconds (from `start_time`, if known),
// process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes,
// process_open_fds and process_max_fds.
void CollectProcessMetrics(const std::optional<double>& start_time,
                           std::vector<prometheus::MetricFamily>* families);

}  // namespace okl::metrics_internal

#endif  // OKL_SERVER_METRICS_PROCESS_METRICS_H_
