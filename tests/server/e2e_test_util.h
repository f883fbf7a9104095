// tests/server/e2e_test_util.h
//
// Wire-level helpers for the okl_server end-to-end tests: configs in text format, dense
// and sparse vectors, deterministic example streams, one blocking wrapper per RPC (each
// with a deadline, so no test hangs), and CoreTwin, an in-process okl::Model built
// from the same wire config through okl::FromProto, against which the server's answers
// are compared bit for bit. The tests' own Densify() is deliberately independent of the
// server's conversion code.
//
// Every function is thread-safe (the stub is); a CoreTwin is not.
//
// Example:
//   const v1::ModelConfig config = ParseConfig("dim: 2 kernel { gaussian { gamma: 1 } } ...");
//   ASSERT_TRUE(CreateModel(stub, Ref("t", "m"), config).ok());
//   std::vector<v1::Example> stream = MakeStream(config, 100, /*seed=*/1);
//   v1::ObserveResponse response;
//   ASSERT_TRUE(Observe(stub, Ref("t", "m"), stream, &response).ok());
#ifndef OKL_TESTS_SERVER_E2E_TEST_UTIL_H_
#define OKL_TESTS_SERVER_E2E_TEST_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "core/model.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "okl/v1/okl.grpc.pb.h"
#include "okl/v1/okl.pb.h"

namespace okl::testing {

using Stub = v1::OnlineKernelLearning::Stub;

// The deadline of every RPC the helpers make.
inline constexpr absl::Duration kRpcTimeout = absl::Seconds(30);

// A regression config the server suites share (okl_server requires a budget,
// 1..--max_terms; 100000 terms is "unbounded" here).
inline constexpr char kRegressionConfig[] = R"pb(
  dim: 3
  kernel { gaussian { gamma: 0.8 } }
  loss { squared {} }
  learning_rate { eta0: 0.4 }
  lambda: 0.01
  offset: true
  budget { max_terms: 100000 }
)pb";

void SetDeadline(grpc::ClientContext* context, absl::Duration timeout = kRpcTimeout);

v1::ModelRef Ref(absl::string_view tenant, absl::string_view model);
std::string RefName(const v1::ModelRef& ref);  // "tenant/model", for messages

// A wire config in protobuf text format. A syntax error fails the current test and
// returns an empty config.
v1::ModelConfig ParseConfig(absl::string_view text);

v1::Vector DenseVector(absl::Span<const double> values);
v1::Vector SparseVector(absl::Span<const uint32_t> indices, absl::Span<const double> values);
v1::Example MakeExample(v1::Vector x, double y);

// The dense input a (valid) wire vector stands for, written independently of the server.
std::vector<double> Densify(const v1::Vector& vector, uint32_t dim);

// `n` examples for `config` from a fixed seed: inputs in [-1, 1] (sparse with a few
// strictly increasing indices if `sparse`), labels +-1 for the classification losses,
// a smooth function of x plus noise otherwise; for the multi-class losses y 0 and a
// class_label naming the band of that function: "low", "mid band" or "high \u2191".
std::vector<v1::Example> MakeStream(const v1::ModelConfig& config, size_t n, uint64_t seed,
                                    bool sparse = false);
// `n` inputs for Predict, likewise.
std::vector<v1::Vector> MakeProbes(uint32_t dim, size_t n, uint64_t seed, bool sparse = false);

// Splits `examples` into consecutive batches whose sizes cycle through `sizes`.
std::vector<std::vector<v1::Example>> SplitIntoBatches(absl::Span<const v1::Example> examples,
                                                       absl::Span<const size_t> sizes);

// The bit patterns of `values`: == on them is equality to the last bit (and tells 0.0
// from -0.0, and compares NaNs).
std::vector<uint64_t> Bits(absl::Span<const double> values);

// --- One blocking call per RPC ---------------------------------------------------------

grpc::Status CreateModel(Stub& stub, const v1::ModelRef& ref, const v1::ModelConfig& config,
                         v1::ModelInfo* info = nullptr);
grpc::Status GetModel(Stub& stub, const v1::ModelRef& ref, v1::ModelInfo* info);
grpc::Status DeleteModel(Stub& stub, const v1::ModelRef& ref);
grpc::Status ListModels(Stub& stub, absl::string_view tenant, v1::ListModelsResponse* response);
grpc::Status Observe(Stub& stub, const v1::ModelRef& ref,
                     absl::Span<const v1::Example> examples, v1::ObserveResponse* response);
// Sends `requests` as they are (the caller sets the refs) on one ObserveStream.
grpc::Status ObserveStreamRaw(Stub& stub, const std::vector<v1::ObserveRequest>& requests,
                              v1::ObserveResponse* response);
// One message per batch; the first carries `ref`, the others leave it empty.
grpc::Status ObserveStream(Stub& stub, const v1::ModelRef& ref,
                           const std::vector<std::vector<v1::Example>>& batches,
                           v1::ObserveResponse* response);
grpc::Status Predict(Stub& stub, const v1::ModelRef& ref, absl::Span<const v1::Vector> inputs,
                     std::vector<double>* predictions);
// The whole response (a novelty model's flags too).
grpc::Status Predict(Stub& stub, const v1::ModelRef& ref, absl::Span<const v1::Vector> inputs,
                     v1::PredictResponse* response);
// A Predict that remembers its inputs (delayed feedback) with `remember`.
grpc::Status PredictRemembering(Stub& stub, const v1::ModelRef& ref,
                                absl::Span<const v1::Vector> inputs,
                                const v1::Remember& remember, v1::PredictResponse* response);
// Label with (event id, y) pairs, in order.
grpc::Status Label(Stub& stub, const v1::ModelRef& ref,
                   const std::vector<std::pair<std::string, double>>& labels,
                   v1::LabelResponse* response);
// The concatenated chunk data; the chunks' sizes in `chunk_sizes` if not null.
grpc::Status Snapshot(Stub& stub, const v1::ModelRef& ref, std::string* bytes,
                      std::vector<size_t>* chunk_sizes = nullptr);
// Sends `chunks` as they are on one Restore stream.
grpc::Status RestoreChunks(Stub& stub, const std::vector<v1::RestoreChunk>& chunks,
                           v1::ModelInfo* info = nullptr);
// `bytes` in chunks of `chunk_bytes`; the first carries `ref`.
grpc::Status Restore(Stub& stub, const v1::ModelRef& ref, absl::string_view bytes,
                     size_t chunk_bytes = size_t{1} << 20, v1::ModelInfo* info = nullptr);

// --- Assertions ------------------------------------------------------------------------

std::string CodeName(grpc::StatusCode code);
std::string Describe(const grpc::Status& status);  // "NOT_FOUND: message"

// Success iff `status` has `code`; the failure shows the status got.
::testing::AssertionResult HasCode(const grpc::Status& status, grpc::StatusCode code);
::testing::AssertionResult IsOk(const grpc::Status& status);

// What "the request changed nothing" is checked against: the model's statistics and its
// predictions at fixed probes.
struct ModelFingerprint {
  std::string stats;   // the serialized ModelStats
  std::string config;  // the serialized ModelConfig
  std::vector<uint64_t> probe_bits;

  friend bool operator==(const ModelFingerprint&, const ModelFingerprint&) = default;
};
absl::StatusOr<ModelFingerprint> Fingerprint(Stub& stub, const v1::ModelRef& ref,
                                             absl::Span<const v1::Vector> probes);
std::ostream& operator<<(std::ostream& out, const ModelFingerprint& fingerprint);

// --- The in-process oracle -------------------------------------------------------------

// An okl::Model (core/model.h) made from the same wire config, fed the same (densified) examples.
class CoreTwin {
 public:
  // Fails the current test (and returns null) if the config does not convert or build.
  static std::unique_ptr<CoreTwin> Create(const v1::ModelConfig& config);
  // A model continuing from `state` (e.g. decoded snapshot bytes); fails the current
  // test (and returns null) if ModelFromState rejects it.
  static std::unique_ptr<CoreTwin> FromState(const ModelState& state);

  std::vector<Observation> Observe(absl::Span<const v1::Example> examples);
  std::vector<double> Predict(absl::Span<const v1::Vector> inputs) const;

  Model& model() { return *model_; }
  uint32_t dim() const { return model_->config().dim; }
  // The model's statistics as GetModel carries them.
  v1::ModelStats WireStats() const;

 private:
  explicit CoreTwin(std::unique_ptr<Model> model) : model_(std::move(model)) {}
  std::unique_ptr<Model> model_;
};

std::vector<double> PredictionsOf(absl::Span<const Observation> observations);
std::vector<double> LossesOf(absl::Span<const Observation> observations);

}  // namespace okl::testing

#endif  // OKL_TESTS_SERVER_E2E_TEST_UTIL_H_
