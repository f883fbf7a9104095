// tests/client/client_test_util.cc

#include "tests/client/client_test_util.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpc/grpc.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "grpcpp/support/client_interceptor.h"
#include "gtest/gtest.h"

namespace okl::testing {

ModelConfig TestConfig(uint32_t dim, uint32_t max_terms) {
  ModelConfig config;
  config.dim = dim;
  config.kernel = {.type = KernelType::kGaussian, .gamma = 2.0};
  config.loss = {.type = LossType::kSquared};
  config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 0.3};
  config.lambda = 0.01;
  config.budget = {.max_terms = max_terms, .policy = BudgetPolicy::kOldest};
  return config;
}

Data MakeData(size_t n, uint32_t dim, uint64_t seed) {
  // The generator's output is specified by the standard; only the mapping to doubles
  // below is ours, so the data are the same everywhere.
  std::mt19937_64 random(seed);
  auto uniform = [&random] {
    return static_cast<double>(random() >> 11) * 0x1.0p-53 * 2.0 - 1.0;
  };
  Data data;
  data.dim = dim;
  data.xs.reserve(n * dim);
  data.ys.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    for (uint32_t j = 0; j < dim; ++j) data.xs.push_back(uniform());
    const double x0 = data.xs[i * dim];
    const double x1 = dim > 1 ? data.xs[i * dim + 1] : 0.0;
    data.ys.push_back(std::sin(x0 + x1 / 2) + 0.05 * uniform());
  }
  return data;
}

std::vector<double> MakeProbes(size_t n, uint32_t dim, uint64_t seed) {
  return MakeData(n, dim, seed).xs;
}

CoreTwin::CoreTwin(const ModelConfig& config) {
  absl::StatusOr<std::unique_ptr<NormaModel>> created = NormaModel::Create(config);
  EXPECT_TRUE(created.ok()) << created.status();
  if (created.ok()) model = *std::move(created);
}

void CoreTwin::Observe(const Data& data, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) {
    absl::StatusOr<Observation> o = model->Observe(data.x(i), data.ys[i]);
    ASSERT_TRUE(o.ok()) << o.status();
    predictions.push_back(o->prediction);
    losses.push_back(o->loss);
  }
}

std::vector<double> CoreTwin::Predict(absl::Span<const double> xs) const {
  std::vector<double> out(xs.size() / model->config().dim);
  absl::Status status = model->PredictBatch(xs, absl::MakeSpan(out));
  EXPECT_TRUE(status.ok()) << status;
  return out;
}

void CallCounter::Count(const std::string& method) {
  PlainLock lock(&mu_);
  ++calls_[method];
}

int CallCounter::calls(absl::string_view method) const {
  PlainLock lock(&mu_);
  auto it = calls_.find(method);
  return it == calls_.end() ? 0 : it->second;
}

int CallCounter::okl_calls(absl::string_view name) const {
  return calls(absl::StrCat("/okl.v1.OnlineKernelLearning/", name));
}

namespace {

// Counts each call when gRPC asks for its interceptors (once per call), and intercepts
// nothing.
class CountingInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit CountingInterceptorFactory(CallCounter* counter) : counter_(counter) {}

  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* info) override {
    counter_->Count(info->method());
    return nullptr;
  }

 private:
  CallCounter* const counter_;
};

}  // namespace

std::shared_ptr<grpc::Channel> CountingChannel(const std::string& address,
                                               CallCounter* counter) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // its own connection
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<CountingInterceptorFactory>(counter));
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      address, grpc::InsecureChannelCredentials(), args, std::move(factories));
}

std::unique_ptr<ServerProcess> StartServer(ServerProcessOptions options) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

std::string MakeTempDir(absl::string_view name) {
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                              absl::StrCat("okl_client_", test->test_suite_name(), "_",
                                           test->name(), "_", ::getpid(), "_", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

}  // namespace okl::testing
