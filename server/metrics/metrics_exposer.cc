// server/metrics/metrics_exposer.cc
//
// Starting prometheus-cpp's Exposer, and the workaround that stops it quickly: see
// MetricsExposer::~MetricsExposer.

#include "server/metrics/metrics_exposer.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"

namespace okl::metrics_internal {
namespace {

// Where a client reaches a listener bound to `address` (civetweb's "host:port" syntax):
// the loopback address for a wildcard host.
std::string LoopbackFor(absl::string_view address) {
  const size_t colon = address.rfind(':');
  absl::string_view host = colon == absl::string_view::npos ? "" : address.substr(0, colon);
  absl::ConsumePrefix(&host, "+");
  if (absl::ConsumePrefix(&host, "[") && absl::ConsumeSuffix(&host, "]")) {
    return host == "::" ? "::1" : std::string(host);
  }
  return host.empty() || host == "0.0.0.0" ? "127.0.0.1" : std::string(host);
}

// Connects to `target` and hangs up at once; best effort. Non-blocking, so that an
// unreachable address cannot hold up the stop (a local listener completes the handshake
// within connect()).
void Poke(const addrinfo& target) {
  const int fd = socket(target.ai_family, target.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                        target.ai_protocol);
  if (fd < 0) return;
  connect(fd, target.ai_addr, target.ai_addrlen);
  close(fd);
}

// Destroys `exposer`. civetweb's listener thread sees the stop only when its poll() returns,
// which without traffic is after up to 2 s (its SOCKET_TIMEOUT_QUANTUM); connections
// to the listener while mg_stop() waits wake it at once. A connection accepted just
// before the stop is hung up on, which a worker drops at once. If the listener cannot be
// reached, the stop simply takes the 2 s.
void StopExposer(std::unique_ptr<prometheus::Exposer> exposer, const std::string& host,
                 int port) {
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* targets = nullptr;
  if (port <= 0 ||
      getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &targets) != 0) {
    exposer.reset();
    return;
  }
  std::atomic<bool> stopped{false};
  std::thread waker([&stopped, targets] {
    while (!stopped.load(std::memory_order_acquire)) {
      Poke(*targets);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  exposer.reset();
  stopped.store(true, std::memory_order_release);
  waker.join();
  freeaddrinfo(targets);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsExposer>> MetricsExposer::Start(
    const std::string& address, std::shared_ptr<prometheus::Collectable> collectable) {
  std::string error;
  try {
    auto exposer = std::make_unique<prometheus::Exposer>(address);
    exposer->RegisterCollectable(collectable);
    std::vector<int> ports = exposer->GetListeningPorts();
    if (ports.empty()) {
      error = "it listens on no port";
    } else {
      return std::unique_ptr<MetricsExposer>(
          new MetricsExposer(std::move(exposer), ports.front(), LoopbackFor(address)));
    }
  } catch (const std::exception& e) {
    error = e.what();
  } catch (...) {
    error = "unknown error";
  }
  return absl::UnavailableError(absl::StrCat(
      "cannot serve metrics on \"", address,
      "\" (--metrics_address): the port is in use, or the address is not host:port (", error,
      ")"));
}

MetricsExposer::MetricsExposer(std::unique_ptr<prometheus::Exposer> exposer, int port,
                               std::string host)
    : exposer_(std::move(exposer)), port_(port), host_(std::move(host)) {}

MetricsExposer::~MetricsExposer() { StopExposer(std::move(exposer_), host_, port_); }

}  // namespace okl::metrics_internal
