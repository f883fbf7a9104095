// tests/client/client_test_util.h
//
// Shared pieces of the client library's tests: a model config and deterministic data,
// a core twin (an in-process NormaModel fed the same examples, against which the server's
// answers are compared bit for bit), a channel whose calls are counted per method by a
// client interceptor (to see retries from the client's side), and a real okl_server
// started with the tests/server harness.
//
// Everything here is thread-compatible, except CallCounter, which is thread-safe.
//
// Example:
//   std::unique_ptr<ServerProcess> server = StartServer();
//   okl::Client client(server->channel());
//   const Data data = MakeData(/*n=*/100, kDim, /*seed=*/1);
#ifndef OKL_TESTS_CLIENT_CLIENT_TEST_UTIL_H_
#define OKL_TESTS_CLIENT_CLIENT_TEST_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/config.h"
#include "core/norma.h"
#include "core/runtime/mutex.h"
#include "grpcpp/channel.h"
#include "tests/server/server_process.h"

namespace okl::testing {

inline constexpr uint32_t kDim = 3;

// Gaussian kernel, squared loss, a budget of 300 terms (so truncation happens in the
// longer tests), in dimension `dim`.
ModelConfig TestConfig(uint32_t dim = kDim, uint32_t max_terms = 300);

// n examples from a fixed seed: inputs uniform in [-1, 1]^dim, y = sin(x_0 + x_1 / 2)
// plus a little noise. xs is example-major.
struct Data {
  uint32_t dim = 0;
  std::vector<double> xs;
  std::vector<double> ys;

  size_t size() const { return ys.size(); }
  absl::Span<const double> x(size_t i) const {
    return absl::MakeConstSpan(xs).subspan(i * dim, dim);
  }
  // Examples [begin, end).
  absl::Span<const double> xs_range(size_t begin, size_t end) const {
    return absl::MakeConstSpan(xs).subspan(begin * dim, (end - begin) * dim);
  }
  absl::Span<const double> ys_range(size_t begin, size_t end) const {
    return absl::MakeConstSpan(ys).subspan(begin, end - begin);
  }
};
Data MakeData(size_t n, uint32_t dim, uint64_t seed);

// `n` inputs for Predict (example-major), from a fixed seed.
std::vector<double> MakeProbes(size_t n, uint32_t dim, uint64_t seed);

// The bit patterns of `values`, so that == is equality to the last bit (defined by the
// servers' harness, tests/server/e2e_test_util.cc, which every user of this file links).
std::vector<uint64_t> Bits(absl::Span<const double> values);

// NormaModel fed examples one at a time: what the server must reproduce.
struct CoreTwin {
  explicit CoreTwin(const ModelConfig& config);
  // Observes examples [begin, end) of `data`, appending predictions and losses.
  void Observe(const Data& data, size_t begin, size_t end);
  std::vector<double> Predict(absl::Span<const double> xs) const;

  std::unique_ptr<NormaModel> model;
  std::vector<double> predictions;
  std::vector<double> losses;
};

// Counts the calls started on a channel, per full method name
// ("/okl.v1.OnlineKernelLearning/Predict").
class CallCounter {
 public:
  void Count(const std::string& method) ABSL_LOCKS_EXCLUDED(mu_);
  int calls(absl::string_view method) const ABSL_LOCKS_EXCLUDED(mu_);
  // calls("/okl.v1.OnlineKernelLearning/" + name).
  int okl_calls(absl::string_view name) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable PlainMutex mu_;
  std::map<std::string, int, std::less<>> calls_ ABSL_GUARDED_BY(mu_);
};

// A channel to `address`, with a client interceptor that counts every call (each attempt
// of a retried call is a call) in `counter`, which must outlive the channel. Like Connect's
// channels, it reconnects quickly (at most 200 ms between attempts).
std::shared_ptr<grpc::Channel> CountingChannel(const std::string& address,
                                               CallCounter* counter);

// Starts okl_server with the harness (failing the test with its log if it cannot).
std::unique_ptr<ServerProcess> StartServer(ServerProcessOptions options = {});

// A fresh directory under the test's temporary directory.
std::string MakeTempDir(absl::string_view name);

}  // namespace okl::testing

#endif  // OKL_TESTS_CLIENT_CLIENT_TEST_UTIL_H_
