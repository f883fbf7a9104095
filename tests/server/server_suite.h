// tests/server/server_suite.h
//
// What the server's end-to-end suites share (server_e2e_test.cc, server_errors_test.cc):
// the configs they create models with, an independent snapshot checksum, and the
// fixtures. ServerSuite owns one server per suite, started in SetUpTestSuite with the
// suite's flags; ServerE2ETest is the server with its default flags.
#ifndef OKL_TESTS_SERVER_SERVER_SUITE_H_
#define OKL_TESTS_SERVER_SERVER_SUITE_H_

#include <sys/wait.h>

#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "okl/v1/okl.pb.h"
#include "tests/server/e2e_test_util.h"
#include "tests/server/server_process.h"

namespace okl::testing {

// --- Configs ---------------------------------------------------------------------------

inline constexpr char kSparseHingeConfig[] = R"pb(
  dim: 40
  kernel { laplacian { gamma: 0.5 } }
  loss { hinge { rho: 1 nu: 0.2 } }
  learning_rate { eta0: 0.5 schedule: INVERSE_SQRT }
  lambda: 0.02
  offset: true
  budget { max_terms: 30 policy: SMALLEST }
)pb";

// Sparse storage with the averaged hypothesis, whose retired terms are sparse too.
inline constexpr char kSparseStorageAveragedConfig[] = R"pb(
  dim: 12
  kernel { gaussian { gamma: 0.5 } }
  loss { logistic {} }
  learning_rate { eta0: 0.2 }
  lambda: 0.01
  budget { max_terms: 16 policy: OLDEST }
  averaged: true
  averaging_window: 9
  sparse { max_nonzeros: 12 }
)pb";

inline constexpr char kAveragedConfig[] = R"pb(
  dim: 4
  kernel { gaussian { gamma: 1.5 } }
  loss { epsilon_insensitive { epsilon: 0.05 nu: 0.3 } }
  learning_rate { eta0: 0.3 schedule: POWER theta: 0.6 }
  lambda: 0.05
  averaged: true
  budget { max_terms: 25 policy: OLDEST }
)pb";

inline constexpr char kSparseLogisticConfig[] = R"pb(
  dim: 12
  kernel { polynomial { gamma: 0.5 c: 1 degree: 3 } }
  loss { logistic {} }
  learning_rate { eta0: 0.2 }
  lambda: 0.01
  budget { max_terms: 16 policy: OLDEST drop_below: 1e-4 }
)pb";

inline constexpr char kHeatHuberConfig[] = R"pb(
  dim: 5
  kernel { heat { t: 0.7 } }
  loss { huber { delta: 0.3 } }
  learning_rate { eta0: 0.6 schedule: INVERSE_SQRT }
  lambda: 0.1
  offset: true
  averaged: true
  budget { max_terms: 40 policy: SMALLEST }
)pb";

// client/examples/mg30.textproto: one-step-ahead Mackey-Glass prediction with 7 lags.
inline constexpr char kMackeyGlassConfig[] = R"pb(
  dim: 7
  kernel { gaussian { gamma: 1 } }
  loss { squared {} }
  learning_rate { eta0: 0.5 schedule: CONSTANT }
  lambda: 0.001
  budget { max_terms: 512 policy: OLDEST }
)pb";

inline constexpr char kClassifierConfig[] = R"pb(
  dim: 3
  kernel { gaussian { gamma: 1 } }
  loss { hinge {} }
  learning_rate { eta0: 0.5 }
  lambda: 0.01
  budget { max_terms: 1000 }
)pb";

// One-class novelty detection: rho learned by the nu-trick, or fixed.
inline constexpr char kNoveltyConfig[] = R"pb(
  dim: 2
  kernel { gaussian { gamma: 2 } }
  loss { novelty { rho: 0.2 nu: 0.1 } }
  learning_rate { eta0: 0.2 }
  lambda: 0.05
  budget { max_terms: 60 policy: SMALLEST }
)pb";

inline constexpr char kFixedRhoNoveltyConfig[] = R"pb(
  dim: 2
  kernel { gaussian { gamma: 2 } }
  loss { novelty { rho: 0.2 } }
  learning_rate { eta0: 0.2 }
  lambda: 0.05
  budget { max_terms: 60 policy: OLDEST }
)pb";

// A budget small enough that MERGE runs on most steps, with an offset and a learned rho.
inline constexpr char kMergeHingeConfig[] = R"pb(
  dim: 3
  kernel { gaussian { gamma: 1 } }
  loss { hinge { rho: 1 nu: 0.3 } }
  learning_rate { eta0: 0.3 }
  lambda: 0.02
  offset: true
  budget { max_terms: 12 policy: MERGE }
)pb";

// The averaged hypothesis over blocks of 7 steps with MERGE: terms retired and dropped
// again many times in a 300-step stream.
inline constexpr char kAveragedMergeWindowConfig[] = R"pb(
  dim: 3
  kernel { gaussian { gamma: 1 } }
  loss { squared {} }
  learning_rate { eta0: 0.3 }
  lambda: 0.02
  averaged: true
  averaging_window: 7
  budget { max_terms: 10 policy: MERGE }
)pb";

// Random Fourier features: no budget, the laplacian kernel's features, averaged.
inline constexpr char kRandomFeaturesConfig[] = R"pb(
  dim: 6
  kernel { laplacian { gamma: 0.7 } }
  loss { hinge { rho: 1 } }
  learning_rate { eta0: 0.5 schedule: INVERSE_SQRT }
  lambda: 0.01
  offset: true
  averaged: true
  random_features { dimension: 64 seed: 9 }
)pb";

// The KRLS tracker: a dictionary small enough that it prunes on most steps, forgetting
// (so its kernel matrix is state too).
inline constexpr char kKrlsTrackerConfig[] = R"pb(
  dim: 3
  kernel { gaussian { gamma: 0.8 } }
  loss { squared {} }
  krls_tracker { max_basis: 12 noise_variance: 0.01 forgetting: 0.995 }
)pb";

// Selections: the default set of the squared loss (built after 32 examples, from their
// median distance), and listed hinge candidates of three kinds, two of them live.
inline constexpr char kSelectDefaultConfig[] = R"pb(
  dim: 3
  loss { squared {} }
  select {}
)pb";
inline constexpr char kSelectListedConfig[] = R"pb(
  dim: 5
  loss { hinge {} }
  select {
    live: 2
    candidates {
      kernel { gaussian { gamma: 0.5 } }
      learning_rate { eta0: 0.01 }
      lambda: 0.01
      budget { max_terms: 20 }
    }
    candidates {
      kernel { laplacian { gamma: 0.5 } }
      learning_rate { eta0: 0.5 }
      lambda: 0.01
      random_features { dimension: 32 seed: 3 }
    }
    candidates {
      kernel { gaussian { gamma: 1 } }
      learning_rate { eta0: 0.5 }
      lambda: 0.01
      budget { max_terms: 20 policy: MERGE }
    }
  }
)pb";

// A squared-loss linear model with a huge rate on growing inputs: every step multiplies
// the prediction by ~eta x^2, so some step overflows (as in tests/core/norma_test.cc).
inline constexpr char kDivergingConfig[] = R"pb(
  dim: 1
  kernel { linear { c: 0 } }
  loss { squared {} }
  learning_rate { eta0: 1000 }
  budget { max_terms: 1000 }
)pb";

// --- Snapshot bytes, checked independently of the server's code ------------------------

// FNV-1a 64, as okl.proto documents ModelSnapshot.checksum.
inline uint64_t Fnv1a64(absl::string_view bytes) {
  uint64_t hash = 0xcbf29ce484222325u;
  for (const char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3u;
  }
  return hash;
}

// `body` (a serialized ModelSnapshot without its checksum) with the checksum field
// appended: tag 0xA1 0x06, then FNV-1a 64 of `body`, little-endian.
inline std::string WithChecksum(std::string body) {
  const uint64_t checksum = Fnv1a64(body);
  body.push_back(static_cast<char>(0xA1));
  body.push_back(static_cast<char>(0x06));
  for (int i = 0; i < 8; ++i) body.push_back(static_cast<char>(checksum >> (8 * i)));
  return body;
}

// Observes the same examples on every model of `refs` and expects identical answers.
inline void ExpectContinueIdentically(Stub& stub, const std::vector<v1::ModelRef>& refs,
                                      const v1::ModelConfig& config, uint64_t seed) {
  const std::vector<v1::Example> more = MakeStream(config, 60, seed);
  const std::vector<v1::Vector> probes = MakeProbes(config.dim(), 5, seed + 1);
  std::vector<v1::ObserveResponse> responses(refs.size());
  std::vector<std::vector<double>> predictions(refs.size());
  std::vector<v1::ModelInfo> infos(refs.size());
  for (size_t i = 0; i < refs.size(); ++i) {
    // Messages of 5 examples, within ServerLimitsTest's --max_batch.
    ASSERT_TRUE(IsOk(ObserveStream(
        stub, refs[i], SplitIntoBatches(more, std::vector<size_t>{5}), &responses[i])))
        << RefName(refs[i]);
    ASSERT_TRUE(IsOk(Predict(stub, refs[i], probes, &predictions[i])));
    ASSERT_TRUE(IsOk(GetModel(stub, refs[i], &infos[i])));
  }
  for (size_t i = 1; i < refs.size(); ++i) {
    EXPECT_EQ(Bits(responses[i].predictions()), Bits(responses[0].predictions()))
        << RefName(refs[i]) << " vs " << RefName(refs[0]);
    EXPECT_EQ(Bits(responses[i].losses()), Bits(responses[0].losses()));
    EXPECT_EQ(Bits(predictions[i]), Bits(predictions[0]));
    EXPECT_TRUE(::google::protobuf::util::MessageDifferencer::Equals(infos[i].stats(),
                                                                     infos[0].stats()))
        << infos[i].stats().ShortDebugString() << "\nvs "
        << infos[0].stats().ShortDebugString();
  }
}

// --- Fixtures --------------------------------------------------------------------------

// Owns the suite's server. Derived suites start it in SetUpTestSuite with their flags.
class ServerSuite : public ::testing::Test {
 protected:
  static void StartServer(std::vector<std::string> flags) {
    absl::StatusOr<std::unique_ptr<ServerProcess>> server =
        ServerProcess::Start({.flags = std::move(flags)});
    if (server.ok()) {
      server_ = *std::move(server);
    } else {
      start_error_ = server.status().ToString();
    }
  }

  static void StopServer() {
    if (server_ == nullptr) return;
    absl::StatusOr<int> exit = server_->Stop();
    if (!exit.ok()) {
      ADD_FAILURE() << "okl_server did not stop on SIGTERM: " << exit.status();
    } else if (!WIFEXITED(*exit) || WEXITSTATUS(*exit) != 0) {
      ADD_FAILURE() << "okl_server exited with wait status " << *exit << "; its log:\n"
                    << server_->Log();
    }
    server_.reset();
  }

  void SetUp() override { ASSERT_NE(server_, nullptr) << start_error_; }

  void TearDown() override {
    if (HasFailure() && server_ != nullptr) {
      const std::string log = server_->Log();
      std::cerr << "--- okl_server log (last 4 KiB) ---\n"
                << log.substr(log.size() > 4096 ? log.size() - 4096 : 0) << "\n";
    }
  }

  static Stub& stub() { return server_->stub(); }
  static ServerProcess& server() { return *server_; }

  // A model created and trained on `n` examples, with the probes and the fingerprint
  // that "nothing changed" is checked against.
  struct Trained {
    v1::ModelRef ref;
    v1::ModelConfig config;
    std::vector<v1::Example> stream;
    std::vector<v1::Vector> probes;
    ModelFingerprint fingerprint;
  };

  static Trained Train(const v1::ModelRef& ref, absl::string_view config_text, size_t n = 30,
                       uint64_t seed = 7) {
    Trained trained;
    trained.ref = ref;
    trained.config = ParseConfig(config_text);
    EXPECT_TRUE(IsOk(CreateModel(stub(), ref, trained.config))) << RefName(ref);
    trained.stream = MakeStream(trained.config, n, seed);
    if (n > 0) {
      v1::ObserveResponse response;
      EXPECT_TRUE(IsOk(Observe(stub(), ref, trained.stream, &response)));
    }
    trained.probes = MakeProbes(trained.config.dim(), 5, seed + 1000);
    absl::StatusOr<ModelFingerprint> fingerprint = Fingerprint(stub(), ref, trained.probes);
    EXPECT_TRUE(fingerprint.ok()) << fingerprint.status();
    if (fingerprint.ok()) trained.fingerprint = *fingerprint;
    return trained;
  }

  // Fails the test if the model's stats, config or predictions differ from `trained`'s.
  static void ExpectUnchanged(const Trained& trained, absl::string_view after) {
    absl::StatusOr<ModelFingerprint> now = Fingerprint(stub(), trained.ref, trained.probes);
    ASSERT_TRUE(now.ok()) << "after " << after << ": " << now.status();
    EXPECT_EQ(*now, trained.fingerprint) << "the model changed after " << after;
  }

  // A change to a valid config, and what the refusal's message must say.
  struct ConfigChange {
    std::string what;
    std::function<void(v1::ModelConfig&)> change;
    std::string message;
  };

  // Each change of `valid` makes CreateModel INVALID_ARGUMENT with its message, and creates
  // nothing.
  static void ExpectRefused(const v1::ModelRef& ref, const v1::ModelConfig& valid,
                            const std::vector<ConfigChange>& changes) {
    v1::ModelInfo info;
    for (const ConfigChange& c : changes) {
      SCOPED_TRACE(c.what);
      v1::ModelConfig config = valid;
      c.change(config);
      const grpc::Status status = CreateModel(stub(), ref, config, &info);
      EXPECT_TRUE(HasCode(status, ::grpc::StatusCode::INVALID_ARGUMENT))
          << status.error_message();
      EXPECT_THAT(status.error_message(), ::testing::HasSubstr(c.message));
      ExpectAbsent(ref, c.what);
    }
  }

  static void ExpectAbsent(const v1::ModelRef& ref, absl::string_view after) {
    v1::ModelInfo info;
    EXPECT_TRUE(HasCode(GetModel(stub(), ref, &info), ::grpc::StatusCode::NOT_FOUND))
        << RefName(ref) << " exists after " << after;
  }

  inline static std::unique_ptr<ServerProcess> server_;
  inline static std::string start_error_;
};

// The server with its default flags.
class ServerE2ETest : public ServerSuite {
 protected:
  static void SetUpTestSuite() { StartServer({}); }
  static void TearDownTestSuite() { StopServer(); }
};

}  // namespace okl::testing

#endif  // OKL_TESTS_SERVER_SERVER_SUITE_H_
