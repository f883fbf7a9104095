// server/metrics/metrics_exposer.h
//
// MetricsExposer serves a prometheus::Collectable as text on http://<address>/metrics
// (prometheus-cpp's Exposer, on civetweb) and, unlike a bare prometheus::Exposer, stops
// in milliseconds rather than up to 2 s: its destructor wakes civetweb's listener by
// connecting to it. Internal to ServerMetrics.
// Immutable once started: port() may be called from any thread; the owner serialises
// destruction with its other uses.
//
// Example:
//   OKL_ASSIGN_OR_RETURN(std::unique_ptr<MetricsExposer> exposer,
//                        MetricsExposer::Start("0.0.0.0:0", collectable));
//   int port = exposer->port();
#ifndef OKL_SERVER_METRICS_METRICS_EXPOSER_H_
#define OKL_SERVER_METRICS_METRICS_EXPOSER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace prometheus {
class Collectable;
class Exposer;
}  // namespace prometheus

namespace okl::metrics_internal {

class MetricsExposer {
 public:
  // Serves `collectable` on `address` ("host:port" with a numeric host; port 0 picks a
  // free one). Unavailable naming the address and --metrics_address if it cannot be
  // bound.
  static absl::StatusOr<std::unique_ptr<MetricsExposer>> Start(
      const std::string& address, std::shared_ptr<prometheus::Collectable> collectable);

  // Stops serving: returns once civetweb's threads are joined.
  ~MetricsExposer();

  MetricsExposer(const MetricsExposer&) = delete;
  MetricsExposer& operator=(const MetricsExposer&) = delete;

  // The bound port.
  int port() const { return port_; }

 private:
  MetricsExposer(std::unique_ptr<prometheus::Exposer> exposer, int port, std::string host);

  std::unique_ptr<prometheus::Exposer> exposer_;
  const int port_;
  // Where the exposer's listener is reached from this process, to stop it quickly.
  const std::string host_;
};

}  // namespace okl::metrics_internal

#endif  // OKL_SERVER_METRICS_METRICS_EXPOSER_H_
