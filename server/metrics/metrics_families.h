// server/metrics/metrics_families.h
//
// The three builders every part of ServerMetrics's exposition is made of (metrics.cc,
// rpc_metrics.cc, process_metrics.cc): a family, a sample, a family of one sample.
// Internal to ServerMetrics. Pure functions, thread-safe.
//
// Example:
//   families->push_back(Single("okl_models", "Models held.", MetricType::Gauge, 3));
#ifndef OKL_SERVER_METRICS_METRICS_FAMILIES_H_
#define OKL_SERVER_METRICS_METRICS_FAMILIES_H_

#include <string>
#include <vector>

#include "prometheus/client_metric.h"
#include "prometheus/metric_family.h"
#include "prometheus/metric_type.h"

namespace okl::metrics_internal {

// A family with no samples yet.
prometheus::MetricFamily Family(std::string name, std::string help,
                                prometheus::MetricType type);

// One counter or gauge sample (untyped for any other type).
prometheus::ClientMetric Sample(prometheus::MetricType type, double value,
                                std::vector<prometheus::ClientMetric::Label> labels = {});

// A family with one unlabelled sample.
prometheus::MetricFamily Single(std::string name, std::string help, prometheus::MetricType type,
                                double value);

}  // namespace okl::metrics_internal

#endif  // OKL_SERVER_METRICS_METRICS_FAMILIES_H_
