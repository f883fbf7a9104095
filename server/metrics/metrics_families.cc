// server/metrics/metrics_families.cc
//
// Family, Sample and Single: see metrics_families.h.

#include "server/metrics/metrics_families.h"

#include <string>
#include <utility>
#include <vector>

namespace okl::metrics_internal {

using ::prometheus::ClientMetric;
using ::prometheus::MetricFamily;
using ::prometheus::MetricType;

MetricFamily Family(std::string name, std::string help, MetricType type) {
  MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = type;
  return family;
}

ClientMetric Sample(MetricType type, double value, std::vector<ClientMetric::Label> labels) {
  ClientMetric metric;
  metric.label = std::move(labels);
  switch (type) {
    case MetricType::Counter:
      metric.counter.value = value;
      break;
    case MetricType::Gauge:
      metric.gauge.value = value;
      break;
    default:
      metric.untyped.value = value;
      break;
  }
  return metric;
}

MetricFamily Single(std::string name, std::string help, MetricType type, double value) {
  MetricFamily family = Family(std::move(name), std::move(help), type);
  family.metric.push_back(Sample(type, value));
  return family;
}

}  // namespace okl::metrics_internal
