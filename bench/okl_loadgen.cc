// bench/okl_loadgen.cc
//
// okl_loadgen drives a running okl_server with closed-loop callers (each keeps one call
// in flight) and prints one JSON object on stdout: per scenario the request rate, the
// example rate where examples are sent, latency percentiles (p50/p99/p999 over every
// call completed in the measured window) and the error count; and the ratio of the
// Predict rate to the grpc.health.v1 Check rate, the transport's baseline measured in
// the same run. A human-readable table goes to stderr, with PASS/MISS against these
// targets:
//   Predict (B=256, d=16, 32 callers) >= 0.7x the health Check rate
//   ObserveStream into one model (B=256, d=16, batches of 256) >= 100,000 examples/s
//   Predict p99 at 32 callers <= 2 ms
// It is a benchmark, not a test: it exits 0 whatever the numbers, non-zero only when it
// cannot set up (bad flags, no server, a model it cannot create or fill).
//
// Scenarios (--scenarios, in this order):
//   health     grpc.health.v1.Health/Check of "" (empty request: the transport alone)
//   get        GetModel: an okl call doing almost no work (the service's own path: the
//              callback handler, authentication, the tenant's rate, the registry lookup)
//   predict    Predict of --predict_batch inputs
//   observe1   Observe of 1 example
//   observe64  Observe of 64 examples
//   stream     ObserveStream: --stream_callers streams of --stream_batch-example
//              messages; examples/s is the models' step count growth over the window
//              (what the server applied), latency is per stream (--stream_messages
//              messages each)
// Caller i calls model i % --models over channel i % --channels. The models (gaussian
// kernel, squared loss, budget --budget OLDEST) are created under --tenant and filled
// with 2x --budget examples before the first scenario, so every expansion is full and
// every Observe step replaces a term; they are deleted at the end.
//
// Choices, measured on the 2-core reference machine (client and server sharing it):
//   - Client API: completion queues on 2 threads (--client_api=async, the default).
//     Per call it costs the client ~19 us of CPU and drives the highest health Check
//     and Predict rates; the callback API reaches the same rates at ~10% more CPU per
//     call, and a thread per caller (sync) costs ~33 us per call and loses a quarter
//     of the Predict rate. One async thread costs least per call (~18 us) but cannot
//     keep up with the health Check baseline.
//   - Channels: min(callers, 4). Over one connection the Predict rate is ~25% lower;
//     with 8 or 16 the health baseline loses 10-25%; 2 to 4 are best for both.
//   - Requests are serialized once, before the run, and responses are not parsed
//     (setup checks one Predict response): the client's CPU goes to the transport.
//   - Security: --tls_ca_file (and --tls_cert_file/--tls_key_file for mutual TLS) and
//     --token (or $OKL_TOKEN) measure what TLS and bearer tokens cost; the token is added
//     to each call's context, as a client would. bench/security_cost.sh compares the three.
//   - Each scenario's machine-wide CPU use is measured beside the client's and the
//     spawned server's, so the table shows how much other processes disturbed it;
//     --repetitions=N reports each scenario's fastest of N interleaved runs, and each
//     open-loop load's run with the median p99 of N (at a fixed rate there is no fastest;
//     a single 5-s run's p99 varies several-fold here).
//
// Example:
//   build/bench/okl_loadgen --spawn_server=build/server/okl_server
//   build/bench/okl_loadgen --server=localhost:50051 --models=8 --scenarios=predict,stream
//   OKL_TOKEN=okl_... build/bench/okl_loadgen --spawn_server=build/server/okl_server
//       --server_args="--tls_cert_file=server.pem --tls_key_file=server.key
//       --auth_tokens_file=tokens" --tls_ca_file=ca.pem   (one command line)
#include <grpcpp/grpcpp.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/loadgen_driver.h"
#include "bench/loadgen_server_process.h"
#include "client/io/json_writer.h"
#include "core/runtime/usable_cpus.h"
#include "google/protobuf/descriptor.h"
#include "okl/v1/okl.grpc.pb.h"
#include "okl/v1/okl.pb.h"

ABSL_FLAG(std::string, server, "",
          "host:port of a running okl_server; required unless --spawn_server is given.");
ABSL_FLAG(std::string, spawn_server, "",
          "Path of an okl_server binary to start on 127.0.0.1:0 for the run (with "
          "--port_file in a temporary directory) and stop with SIGTERM at the end.");
ABSL_FLAG(bool, pin_cpus, false,
          "With --spawn_server: run the server on the last CPU this process may use (through "
          "taskset) and this client on the others, so that neither's latency is the other's "
          "contention for the same cores. Each then has fewer CPUs than unpinned.");
ABSL_FLAG(std::string, server_args, "",
          "Extra flags for the spawned server, space-separated, e.g. "
          "\"--rpc_threads=1\".");
ABSL_FLAG(std::string, tls_ca_file, "",
          "Connect with TLS, authenticating the server by the CA certificates (PEM) in this "
          "file; the server's certificate must name the host of --server (127.0.0.1 with "
          "--spawn_server, whose TLS flags go in --server_args).");
ABSL_FLAG(std::string, tls_cert_file, "",
          "Mutual TLS: the client's certificate chain (PEM); needs --tls_key_file and "
          "--tls_ca_file.");
ABSL_FLAG(std::string, tls_key_file, "", "Mutual TLS: the client's private key (PEM).");
ABSL_FLAG(std::string, token, "",
          "Send `authorization: Bearer TOKEN` with every call (default: $OKL_TOKEN, which "
          "keeps the token out of the process list).");
ABSL_FLAG(int32_t, callers, 32, "Concurrent closed-loop callers (one call in flight each).");
ABSL_FLAG(int32_t, models, 1,
          "Models the callers spread over (caller i uses model i % models).");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(5), "Measured time per scenario.");
ABSL_FLAG(absl::Duration, warmup, absl::Seconds(1),
          "Unmeasured time per scenario before the measured window.");
ABSL_FLAG(int32_t, dim, 16, "Input dimension d of the models.");
ABSL_FLAG(int32_t, regret_window, 0,
          "regret_window of the models (0: no regret tracking); with okl_server's "
          "--regret_every_steps this measures what background regret costs the requests.");
ABSL_FLAG(int32_t, budget, 256,
          "Budget max_terms (OLDEST) of the models: the expansion size B.");
ABSL_FLAG(std::string, scenarios, "health,predict,observe1,observe64,stream",
          "Comma-separated scenarios to run: health, get, predict, observe1, observe64, "
          "stream.");
ABSL_FLAG(double, rate, 0,
          "Open loop: send the unary scenarios' calls at this many per second, on schedule "
          "whatever the responses do, latency counted from each call's scheduled time "
          "(0: closed loop, --callers calls in flight).");
ABSL_FLAG(std::string, open_loop_fractions, "",
          "After each unary scenario's closed-loop run, open-loop runs at these fractions of "
          "its closed-loop rate (e.g. 0.25,0.5,0.75): latency at a fixed load.");
ABSL_FLAG(int32_t, predict_batch, 1, "Inputs per Predict request.");
ABSL_FLAG(int32_t, stream_batch, 256, "Examples per ObserveStream message.");
ABSL_FLAG(int32_t, stream_messages, 64,
          "Messages per ObserveStream call; then the stream is closed and a new one opened. "
          "Bounds the response (two numbers per example).");
ABSL_FLAG(int32_t, stream_callers, 0,
          "Concurrent ObserveStream callers; 0 means one per model (streams into one "
          "model apply one at a time anyway).");
ABSL_FLAG(int32_t, channels, 0,
          "gRPC channels (each its own TCP connection) the callers are spread over; 0 means "
          "min(callers, 4).");
ABSL_FLAG(std::string, client_api, "async",
          "async (completion queues, --client_threads threads), callback (gRPC's callback "
          "API) or sync (a thread per caller).");
ABSL_FLAG(int32_t, client_threads, 0,
          "Completion-queue threads of --client_api=async; 0: one per CPU this client may "
          "use (after --pin_cpus). One per core gave the highest health Check and Predict "
          "rates on the 2-core reference machine; more threads than cores only take turns "
          "on them (with --pin_cpus, 2 threads on the client's 1 CPU raised the open "
          "loop's p99 several-fold).");
ABSL_FLAG(std::string, tenant, "loadgen", "Tenant of the models the load generator creates.");
ABSL_FLAG(int32_t, repetitions, 1,
          "Runs of the whole scenario list, interleaved; each scenario reports its fastest "
          "run (other processes only ever slow a run down), and the JSON lists every run's "
          "rate. An open-loop load (--rate, --open_loop_fractions) runs this many times and "
          "reports the run with the median p99, listing every run's p99.");
ABSL_FLAG(bool, mutex_deadlock_detection, false,
          "Keep absl::Mutex's deadlock detection on in this process. Debian's Abseil is "
          "built without NDEBUG, so every absl::Mutex acquisition -- gRPC's locks are "
          "absl::Mutex -- updates a global lock-order graph under a global lock; off by "
          "default, to spend the client's CPU on calls.");
ABSL_FLAG(uint64_t, seed, 20240607, "Seed of the generated inputs.");

namespace okl::loadgen {
namespace {

using ::okl::JsonString;

constexpr double kPredictVsHealthTarget = 0.7;
constexpr double kStreamExamplesTarget = 100000;
constexpr double kPredictP99TargetUs = 2000;
// The conditions the targets are stated for.
constexpr int kTargetCallers = 32;
constexpr int kTargetDim = 16;
constexpr int kTargetBudget = 256;
constexpr int kTargetStreamBatch = 256;

// Each caller cycles through this many distinct pre-serialized requests per model.
constexpr int kRequestsPerModel = 16;
constexpr int kPrefillBatch = 256;
constexpr int kPrefillFactor = 2;
constexpr int kMaxReceiveBytes = 64 << 20;
constexpr absl::Duration kSetupTimeout = absl::Seconds(30);
constexpr absl::Duration kConnectTimeout = absl::Seconds(10);

// NORMA settings as in bench/core_bench.cc: eta0 * lambda = 1e-3, so the scale factor's
// renormalisation is amortised over thousands of steps, as in a real deployment.
constexpr double kEta0 = 0.1;
constexpr double kLambda = 0.01;

struct Settings {
  std::string address;
  // TLS when tls_root_certs is set; the PEM contents of the files.
  std::string tls_root_certs;
  std::string tls_cert_chain;
  std::string tls_private_key;
  // "Bearer <token>", or empty.
  std::string authorization;
  int callers = 0;
  int models = 0;
  int channels = 0;
  int dim = 0;
  int budget = 0;
  int regret_window = 0;
  int predict_batch = 0;
  int stream_batch = 0;
  int stream_messages = 0;
  int stream_callers = 0;
  ClientApi api = ClientApi::kAsync;
  int client_threads = 1;
  int repetitions = 1;
  absl::Duration duration;
  absl::Duration warmup;
  double rate = 0;                          // > 0: every unary scenario in open loop
  std::vector<double> open_loop_fractions;  // open-loop runs after the closed-loop ones
  std::string tenant;
  uint64_t seed = 0;
  std::vector<std::string> scenarios;
  // With --pin_cpus, who runs where as the kernel has it: "server on CPUs 1, client on
  // CPUs 0" (/proc's Cpus_allowed_list of each). Empty without.
  std::string pinning;
};

// What one scenario measured.
struct Measurement {
  std::string name;
  double offered_rate = 0;  // open loop: calls sent per second; 0: closed loop
  bool has_examples = false;
  bool stream = false;
  double seconds = 0;
  Result result;
  double requests_per_s = 0;
  double examples_per_s = 0;
  double p50_us = 0, p90_us = 0, p99_us = 0, p999_us = 0;
  double send_lag_p99_us = 0;  // open loop: the client's lag behind schedule, p99
  double client_cpu = 0;    // cores: CPU seconds per wall second
  double server_cpu = -1;   // cores, when the server was spawned; else -1
  double machine_cpu = -1;  // cores busy machine-wide (every process), from /proc/stat
  // With --repetitions > 1: the rate of every run, in order (examples/s for stream,
  // requests/s otherwise), and the CPU other processes used during it; this
  // measurement is the fastest run.
  std::vector<double> run_rates;
  std::vector<double> run_other_cpu;
  // Open loop with --repetitions > 1: every run's p99, in order; this measurement is the
  // run with the median p99 (the upper median of an even count).
  std::vector<double> run_p99_us;

  double rate() const { return stream ? examples_per_s : requests_per_s; }
  // Cores used by every process but the client and the spawned server (all but the
  // client's if the server was not spawned); -1 if unknown.
  double other_cpu() const {
    if (machine_cpu < 0) return -1;
    return std::max(0.0, machine_cpu - client_cpu - std::max(0.0, server_cpu));
  }
};

std::string MethodName(absl::string_view method) {
  const google::protobuf::ServiceDescriptor* service =
      v1::ObserveRequest::descriptor()->file()->FindServiceByName("OnlineKernelLearning");
  return absl::StrCat("/", service->full_name(), "/",
                      service->FindMethodByName(std::string(method))->name());
}

// Of open-loop runs at one rate, the run with the median p99 (the upper median of an even
// count), with every run's p99 in run_p99_us.
Measurement MedianP99Run(std::vector<Measurement> runs) {
  std::vector<double> p99s;
  for (const Measurement& m : runs) p99s.push_back(m.p99_us);
  std::vector<size_t> order(runs.size());
  for (size_t r = 0; r < order.size(); ++r) order[r] = r;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return runs[a].p99_us < runs[b].p99_us; });
  Measurement median = std::move(runs[order[order.size() / 2]]);
  median.run_p99_us = std::move(p99s);
  return median;
}

std::string ModelName(int index) { return absl::StrCat("bench-", getpid(), "-", index); }

v1::ModelRef Ref(const Settings& s, int model) {
  v1::ModelRef ref;
  ref.set_tenant(s.tenant);
  ref.set_model(ModelName(model));
  return ref;
}

absl::Status FromGrpc(const grpc::Status& status, absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(what, ": ", status.error_message()));
}

// Random inputs in [-1, 1]^d and a smooth target, so that the squared loss's gradient
// is never zero and every step adds a term.
class ExampleSource {
 public:
  ExampleSource(int dim, uint64_t seed) : dim_(dim), rng_(seed) {}

  void FillInput(v1::Vector* x) {
    double sum = 0;
    for (int j = 0; j < dim_; ++j) {
      const double value = uniform_(rng_);
      x->add_values(value);
      sum += value;
    }
    last_target_ = std::sin(3 * sum / std::sqrt(static_cast<double>(dim_)));
  }

  void FillExample(v1::Example* example) {
    FillInput(example->mutable_x());
    example->set_y(last_target_ + 0.1 * uniform_(rng_));
  }

 private:
  const int dim_;
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> uniform_{-1.0, 1.0};
  double last_target_ = 0;
};

grpc::ByteBuffer Serialize(const google::protobuf::Message& message) {
  grpc::Slice slice(message.SerializeAsString());
  return grpc::ByteBuffer(&slice, 1);
}

// "plaintext", "tls" or "mtls", with "+token" when calls carry one.
std::string SecurityName(const Settings& s) {
  std::string name = s.tls_root_certs.empty()   ? "plaintext"
                     : s.tls_cert_chain.empty() ? "tls"
                                                : "mtls";
  if (!s.authorization.empty()) name += "+token";
  return name;
}

// Plaintext, or TLS as the flags say.
std::shared_ptr<grpc::ChannelCredentials> Credentials(const Settings& s) {
  if (s.tls_root_certs.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = s.tls_root_certs;
  ssl.pem_cert_chain = s.tls_cert_chain;
  ssl.pem_private_key = s.tls_private_key;
  return grpc::SslCredentials(ssl);
}

// The context of a setup call (not measured): its deadline and authorization.
void PrepareSetupCall(grpc::ClientContext* context, const Settings& s) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + kSetupTimeout));
  if (!s.authorization.empty()) context->AddMetadata("authorization", s.authorization);
  context->AddMetadata("x-okl-tenant", s.tenant);  // a router's key
}

std::vector<std::shared_ptr<grpc::Channel>> MakeChannels(const Settings& s) {
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < s.channels; ++i) {
    grpc::ChannelArguments args;
    // Distinct arguments and no shared subchannel pool: each channel gets its own TCP
    // connection (and its own HTTP/2 stream limits and flow-control windows).
    args.SetInt("okl.loadgen.channel", i);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetMaxReceiveMessageSize(kMaxReceiveBytes);
    channels.push_back(grpc::CreateCustomChannel(s.address, Credentials(s), args));
  }
  return channels;
}

absl::Status WaitConnected(const std::vector<std::shared_ptr<grpc::Channel>>& channels) {
  const auto deadline = absl::ToChronoTime(absl::Now() + kConnectTimeout);
  for (size_t i = 0; i < channels.size(); ++i) {
    if (!channels[i]->WaitForConnected(deadline)) {
      return absl::UnavailableError(absl::StrCat("channel ", i, " did not connect within ",
                                                 absl::FormatDuration(kConnectTimeout)));
    }
  }
  return absl::OkStatus();
}

// Creates the models and fills each with kPrefillFactor * budget examples.
absl::Status CreateModels(const Settings& s, v1::OnlineKernelLearning::Stub& stub,
                          ExampleSource& source) {
  for (int m = 0; m < s.models; ++m) {
    v1::CreateModelRequest create;
    *create.mutable_ref() = Ref(s, m);
    v1::ModelConfig* config = create.mutable_config();
    config->set_dim(s.dim);
    config->mutable_kernel()->mutable_gaussian()->set_gamma(1.0 / s.dim);
    config->mutable_loss()->mutable_squared();
    config->mutable_learning_rate()->set_eta0(kEta0);
    config->mutable_learning_rate()->set_schedule(v1::LearningRate::CONSTANT);
    config->set_lambda(kLambda);
    config->mutable_budget()->set_max_terms(s.budget);
    config->mutable_budget()->set_policy(v1::Budget::OLDEST);
    config->set_regret_window(s.regret_window);
    {
      grpc::ClientContext context;
      PrepareSetupCall(&context, s);
      v1::ModelInfo info;
      if (absl::Status status = FromGrpc(stub.CreateModel(&context, create, &info),
                                         absl::StrCat("CreateModel ", ModelName(m)));
          !status.ok()) {
        return status;
      }
    }
    for (int filled = 0; filled < kPrefillFactor * s.budget;) {
      v1::ObserveRequest observe;
      *observe.mutable_ref() = Ref(s, m);
      const int n = std::min(kPrefillBatch, kPrefillFactor * s.budget - filled);
      for (int i = 0; i < n; ++i) source.FillExample(observe.add_examples());
      grpc::ClientContext context;
      PrepareSetupCall(&context, s);
      v1::ObserveResponse response;
      if (absl::Status status = FromGrpc(stub.Observe(&context, observe, &response),
                                         absl::StrCat("Observe (prefill) ", ModelName(m)));
          !status.ok()) {
        return status;
      }
      filled += n;
    }
    grpc::ClientContext context;
    PrepareSetupCall(&context, s);
    v1::ModelInfo info;
    if (absl::Status status = FromGrpc(stub.GetModel(&context, Ref(s, m), &info),
                                       absl::StrCat("GetModel ", ModelName(m)));
        !status.ok()) {
      return status;
    }
    if (info.stats().expansion_size() != static_cast<uint32_t>(s.budget)) {
      return absl::InternalError(absl::StrCat("model ", ModelName(m), " holds ",
                                              info.stats().expansion_size(),
                                              " terms after the prefill, not ", s.budget));
    }
    // The scenarios never parse a response; this one check shows that the server
    // answers a Predict like the ones they send with real predictions.
    v1::PredictRequest predict;
    *predict.mutable_ref() = Ref(s, m);
    for (int i = 0; i < s.predict_batch; ++i) source.FillInput(predict.add_inputs());
    grpc::ClientContext predict_context;
    PrepareSetupCall(&predict_context, s);
    v1::PredictResponse predicted;
    if (absl::Status status = FromGrpc(stub.Predict(&predict_context, predict, &predicted),
                                       absl::StrCat("Predict ", ModelName(m)));
        !status.ok()) {
      return status;
    }
    if (predicted.predictions_size() != s.predict_batch ||
        std::any_of(predicted.predictions().begin(), predicted.predictions().end(),
                    [](double p) { return !std::isfinite(p) || p == 0; })) {
      return absl::InternalError(absl::StrCat(
          "Predict of ", s.predict_batch, " inputs on ", ModelName(m), " answered ",
          predicted.predictions_size(), " predictions, or non-finite or zero ones"));
    }
  }
  return absl::OkStatus();
}

void DeleteModels(const Settings& s, v1::OnlineKernelLearning::Stub& stub) {
  for (int m = 0; m < s.models; ++m) {
    grpc::ClientContext context;
    PrepareSetupCall(&context, s);
    v1::DeleteModelResponse response;
    const grpc::Status status = stub.DeleteModel(&context, Ref(s, m), &response);
    if (!status.ok()) {
      std::fprintf(stderr, "okl_loadgen: DeleteModel %s: %s\n", ModelName(m).c_str(),
                   status.error_message().c_str());
    }
  }
}

// The sum of the models' step counts; -1 if a GetModel failed.
int64_t TotalSteps(const Settings& s, v1::OnlineKernelLearning::Stub& stub) {
  int64_t steps = 0;
  for (int m = 0; m < s.models; ++m) {
    grpc::ClientContext context;
    PrepareSetupCall(&context, s);
    v1::ModelInfo info;
    if (!stub.GetModel(&context, Ref(s, m), &info).ok()) return -1;
    steps += static_cast<int64_t>(info.stats().steps());
  }
  return steps;
}

// Per model, kRequestsPerModel requests of the scenario, serialized.
std::vector<std::vector<grpc::ByteBuffer>> RequestPools(const Settings& s,
                                                        absl::string_view scenario,
                                                        ExampleSource& source) {
  std::vector<std::vector<grpc::ByteBuffer>> pools(s.models);
  for (int m = 0; m < s.models; ++m) {
    for (int r = 0; r < kRequestsPerModel; ++r) {
      if (scenario == "health") {
        pools[m].push_back(HealthCheckRequest(""));
      } else if (scenario == "get") {
        pools[m].push_back(Serialize(Ref(s, m)));
      } else if (scenario == "predict") {
        v1::PredictRequest request;
        *request.mutable_ref() = Ref(s, m);
        for (int i = 0; i < s.predict_batch; ++i) source.FillInput(request.add_inputs());
        pools[m].push_back(Serialize(request));
      } else {
        const int examples = scenario == "observe1"    ? 1
                             : scenario == "observe64" ? 64
                                                       : s.stream_batch;
        v1::ObserveRequest request;
        // Every stream message names the model (allowed: the same ref): any of them may
        // be the first of a stream.
        *request.mutable_ref() = Ref(s, m);
        for (int i = 0; i < examples; ++i) source.FillExample(request.add_examples());
        pools[m].push_back(Serialize(request));
      }
    }
  }
  return pools;
}

double CpuSecondsOfThisProcess() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_utime.tv_usec * 1e-6 + usage.ru_stime.tv_sec +
         usage.ru_stime.tv_usec * 1e-6;
}

// The CPU time every process of the machine has used so far (all of /proc/stat's "cpu"
// line but idle and iowait), in seconds; -1 if unknown. Beside the client's and the
// server's own time it tells how much other work shared the cores during a window.
double MachineBusySeconds() {
  std::ifstream in("/proc/stat");
  std::string label;
  in >> label;
  if (label != "cpu") return -1;
  double busy = 0;
  for (int field = 0; field < 8; ++field) {
    double ticks = 0;
    if (!(in >> ticks)) return -1;
    if (field != 3 && field != 4) busy += ticks;  // idle, iowait
  }
  return busy / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double PercentileUs(const std::vector<int64_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return static_cast<double>(sorted[rank - 1]) / 1000.0;
}

// Runs a scenario in closed loop, or in open loop at `offered_rate` calls per second if
// that is positive (unary scenarios only).
Measurement RunScenario(const Settings& s, absl::string_view name,
                        const std::vector<std::shared_ptr<grpc::Channel>>& channels,
                        v1::OnlineKernelLearning::Stub& stub, ExampleSource& source,
                        const ServerProcess* server, double offered_rate) {
  Measurement m;
  m.name = std::string(name);
  m.offered_rate = name == "stream" ? 0 : offered_rate;
  m.stream = name == "stream";
  m.has_examples = name != "health" && name != "get" && name != "predict";
  const std::vector<std::vector<grpc::ByteBuffer>> pools = RequestPools(s, name, source);
  const int callers = m.stream ? s.stream_callers : s.callers;
  std::vector<Caller> plan(callers);
  for (int i = 0; i < callers; ++i) {
    plan[i].channel = channels[i % channels.size()];
    plan[i].requests = pools[i % s.models];
    plan[i].authorization = s.authorization;
    plan[i].tenant = s.tenant;
  }
  const std::string method = name == "health"    ? std::string(kHealthCheckMethod)
                             : name == "get"     ? MethodName("GetModel")
                             : name == "predict" ? MethodName("Predict")
                             : m.stream          ? MethodName("ObserveStream")
                                                 : MethodName("Observe");

  const Window window = Window::StartingIn(s.warmup, s.duration);
  Result result;
  std::thread engine([&] {
    result = m.stream ? RunStreams(s.api, s.client_threads, method, plan, s.stream_messages,
                                   window)
             : m.offered_rate > 0
                 ? RunOpenLoop(s.client_threads, method, plan, m.offered_rate, window)
                 : RunUnary(s.api, s.client_threads, method, plan, window);
  });
  std::this_thread::sleep_until(window.begin);
  const double client_cpu_begin = CpuSecondsOfThisProcess();
  const double server_cpu_begin = server != nullptr ? server->CpuSeconds() : -1;
  const double machine_begin = MachineBusySeconds();
  const int64_t steps_begin = m.stream ? TotalSteps(s, stub) : 0;
  std::this_thread::sleep_until(window.end);
  const double client_cpu_end = CpuSecondsOfThisProcess();
  const double server_cpu_end = server != nullptr ? server->CpuSeconds() : -1;
  const double machine_end = MachineBusySeconds();
  const int64_t steps_end = m.stream ? TotalSteps(s, stub) : 0;
  engine.join();

  m.seconds = window.seconds();
  m.result = std::move(result);
  m.requests_per_s = m.result.completed / m.seconds;
  if (m.stream) {
    m.examples_per_s =
        steps_begin >= 0 && steps_end >= 0 ? (steps_end - steps_begin) / m.seconds : 0;
  } else if (m.has_examples) {
    const int batch = name == "observe1" ? 1 : 64;
    m.examples_per_s = (m.result.completed - m.result.errors) * batch / m.seconds;
  }
  std::vector<int64_t>& latencies = m.result.latencies_ns;
  std::sort(latencies.begin(), latencies.end());
  m.p50_us = PercentileUs(latencies, 0.50);
  m.p90_us = PercentileUs(latencies, 0.90);
  m.p99_us = PercentileUs(latencies, 0.99);
  m.p999_us = PercentileUs(latencies, 0.999);
  std::vector<int64_t>& lags = m.result.send_lags_ns;
  std::sort(lags.begin(), lags.end());
  m.send_lag_p99_us = PercentileUs(lags, 0.99);
  m.client_cpu = (client_cpu_end - client_cpu_begin) / m.seconds;
  if (server_cpu_begin >= 0 && server_cpu_end >= 0) {
    m.server_cpu = (server_cpu_end - server_cpu_begin) / m.seconds;
  }
  if (machine_begin >= 0 && machine_end >= 0) {
    m.machine_cpu = (machine_end - machine_begin) / m.seconds;
  }
  return m;
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return absl::StrCat(a, " ", b, " ", c);
}

std::string JsonNumber(double value) {
  if (!std::isfinite(value)) return "null";
  return absl::StrFormat("%.6g", value);
}

const Measurement* Find(const std::vector<Measurement>& all, absl::string_view name) {
  for (const Measurement& m : all) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

struct Target {
  std::string name;
  std::string measured;
  std::string goal;
  std::optional<bool> pass;  // unset: not measured in this run
  double value = 0;
  std::string note;  // why the run's settings differ from the target's
};

std::vector<Target> EvaluateTargets(const Settings& s, const std::vector<Measurement>& all) {
  std::string conditions;
  if (s.dim != kTargetDim || s.budget != kTargetBudget) {
    conditions = absl::StrCat("target is for d=", kTargetDim, ", B=", kTargetBudget);
  }
  auto note = [&](bool callers_matter, bool stream) {
    std::vector<std::string> notes;
    if (!conditions.empty()) notes.push_back(conditions);
    if (callers_matter && s.callers != kTargetCallers) {
      notes.push_back(absl::StrCat("target is for ", kTargetCallers, " callers"));
    }
    if (stream && (s.stream_batch != kTargetStreamBatch || s.models != 1)) {
      notes.push_back(absl::StrCat("target is for one model, batches of ", kTargetStreamBatch));
    }
    return absl::StrJoin(notes, "; ");
  };

  std::vector<Target> targets;
  const Measurement* health = Find(all, "health");
  const Measurement* predict = Find(all, "predict");
  const Measurement* stream = Find(all, "stream");

  Target ratio;
  ratio.name = "predict_vs_health";
  ratio.goal = absl::StrFormat(">= %.2f", kPredictVsHealthTarget);
  ratio.note = note(true, false);
  if (health != nullptr && predict != nullptr && health->requests_per_s > 0) {
    ratio.value = predict->requests_per_s / health->requests_per_s;
    ratio.measured = absl::StrFormat("%.3f", ratio.value);
    ratio.pass = ratio.value >= kPredictVsHealthTarget;
  }
  targets.push_back(ratio);

  Target examples;
  examples.name = "stream_examples_per_s";
  examples.goal = absl::StrFormat(">= %.0f", kStreamExamplesTarget);
  examples.note = note(false, true);
  if (stream != nullptr) {
    examples.value = stream->examples_per_s;
    examples.measured = absl::StrFormat("%.0f", examples.value);
    examples.pass = examples.value >= kStreamExamplesTarget;
  }
  targets.push_back(examples);

  Target p99;
  p99.name = "predict_p99_us";
  p99.goal = absl::StrFormat("<= %.0f", kPredictP99TargetUs);
  p99.note = note(true, false);
  if (predict != nullptr && predict->result.completed > 0) {
    p99.value = predict->p99_us;
    p99.measured = absl::StrFormat("%.0f", p99.value);
    p99.pass = p99.value <= kPredictP99TargetUs;
  }
  targets.push_back(p99);

  Target p99_at_half;
  p99_at_half.name = "predict_p99_us_at_half_max";
  p99_at_half.goal = absl::StrFormat("<= %.0f", kPredictP99TargetUs);
  p99_at_half.note = conditions;
  const Measurement* half = Find(all, "predict@50%");
  if (half != nullptr && half->result.completed > 0) {
    p99_at_half.value = half->p99_us;
    p99_at_half.measured = absl::StrFormat("%.0f", p99_at_half.value);
    p99_at_half.pass = p99_at_half.value <= kPredictP99TargetUs;
  }
  targets.push_back(p99_at_half);
  return targets;
}

void PrintJson(const Settings& s, bool spawned, const std::vector<Measurement>& all,
               const std::vector<Target>& targets, const std::string& load_before,
               const std::string& load_after) {
  std::string json = "{\n";
  absl::StrAppend(&json, "  \"server\": ", JsonString(s.address), ",\n");
  absl::StrAppend(&json, "  \"spawned_server\": ", spawned ? "true" : "false", ",\n");
  absl::StrAppend(&json, "  \"pinning\": ", s.pinning.empty() ? "null" : JsonString(s.pinning),
                  ",\n");
  absl::StrAppend(&json, "  \"security\": ", JsonString(SecurityName(s)), ",\n");
  absl::StrAppend(&json, "  \"client_api\": ", JsonString(ClientApiName(s.api)), ",\n");
  absl::StrAppend(&json, "  \"client_threads\": ", s.client_threads, ",\n");
  absl::StrAppend(&json, "  \"callers\": ", s.callers, ",\n");
  absl::StrAppend(&json, "  \"channels\": ", s.channels, ",\n");
  absl::StrAppend(&json, "  \"models\": ", s.models, ",\n");
  absl::StrAppend(&json, "  \"dim\": ", s.dim, ",\n");
  absl::StrAppend(&json, "  \"budget\": ", s.budget, ",\n");
  absl::StrAppend(&json, "  \"predict_batch\": ", s.predict_batch, ",\n");
  absl::StrAppend(&json, "  \"stream_batch\": ", s.stream_batch, ",\n");
  absl::StrAppend(&json, "  \"stream_callers\": ", s.stream_callers, ",\n");
  absl::StrAppend(&json, "  \"stream_messages\": ", s.stream_messages, ",\n");
  absl::StrAppend(&json, "  \"duration_s\": ", JsonNumber(absl::ToDoubleSeconds(s.duration)),
                  ",\n");
  absl::StrAppend(&json, "  \"repetitions\": ", s.repetitions, ",\n");
  absl::StrAppend(&json, "  \"warmup_s\": ", JsonNumber(absl::ToDoubleSeconds(s.warmup)),
                  ",\n");
  absl::StrAppend(&json, "  \"cpus\": ", std::thread::hardware_concurrency(), ",\n");
  absl::StrAppend(&json, "  \"load_average_before\": ", JsonString(load_before), ",\n");
  absl::StrAppend(&json, "  \"load_average_after\": ", JsonString(load_after), ",\n");
  absl::StrAppend(&json, "  \"scenarios\": {");
  for (size_t i = 0; i < all.size(); ++i) {
    const Measurement& m = all[i];
    absl::StrAppend(&json, i == 0 ? "\n" : ",\n", "    ", JsonString(m.name), ": {");
    absl::StrAppend(&json, "\"requests\": ", m.result.completed);
    if (m.offered_rate > 0) {
      absl::StrAppend(&json, ", \"offered_per_s\": ", JsonNumber(m.offered_rate));
      absl::StrAppend(&json, ", \"send_lag_p99_us\": ", JsonNumber(m.send_lag_p99_us));
    }
    absl::StrAppend(&json, ", \"requests_per_s\": ", JsonNumber(m.requests_per_s));
    if (m.has_examples) {
      absl::StrAppend(&json, ", \"examples_per_s\": ", JsonNumber(m.examples_per_s));
    }
    if (m.stream) {
      absl::StrAppend(&json, ", \"streams\": ", m.result.streams);
      absl::StrAppend(&json, ", \"acknowledged_examples_per_s\": ",
                      JsonNumber(m.result.acknowledged_messages * s.stream_batch / m.seconds));
    }
    absl::StrAppend(&json, ", \"p50_us\": ", JsonNumber(m.p50_us));
    absl::StrAppend(&json, ", \"p90_us\": ", JsonNumber(m.p90_us));
    absl::StrAppend(&json, ", \"p99_us\": ", JsonNumber(m.p99_us));
    absl::StrAppend(&json, ", \"p999_us\": ", JsonNumber(m.p999_us));
    absl::StrAppend(&json, ", \"errors\": ", m.result.errors);
    if (!m.result.first_error.empty()) {
      absl::StrAppend(&json, ", \"first_error\": ", JsonString(m.result.first_error));
    }
    absl::StrAppend(&json, ", \"client_cpu_cores\": ", JsonNumber(m.client_cpu));
    if (m.requests_per_s > 0) {
      absl::StrAppend(&json, ", \"client_cpu_us_per_request\": ",
                      JsonNumber(m.client_cpu / m.requests_per_s * 1e6));
    }
    if (m.server_cpu >= 0) {
      absl::StrAppend(&json, ", \"server_cpu_cores\": ", JsonNumber(m.server_cpu));
      if (m.requests_per_s > 0) {
        absl::StrAppend(&json, ", \"server_cpu_us_per_request\": ",
                        JsonNumber(m.server_cpu / m.requests_per_s * 1e6));
      }
    }
    if (m.run_rates.size() > 1) {
      absl::StrAppend(&json, ", \"run_rates\": [");
      for (size_t r = 0; r < m.run_rates.size(); ++r) {
        absl::StrAppend(&json, r == 0 ? "" : ", ", JsonNumber(m.run_rates[r]));
      }
      absl::StrAppend(&json, "], \"run_other_cpu_cores\": [");
      for (size_t r = 0; r < m.run_other_cpu.size(); ++r) {
        absl::StrAppend(&json, r == 0 ? "" : ", ", JsonNumber(m.run_other_cpu[r]));
      }
      absl::StrAppend(&json, "]");
    }
    if (m.run_p99_us.size() > 1) {
      absl::StrAppend(&json, ", \"run_p99_us\": [");
      for (size_t r = 0; r < m.run_p99_us.size(); ++r) {
        absl::StrAppend(&json, r == 0 ? "" : ", ", JsonNumber(m.run_p99_us[r]));
      }
      absl::StrAppend(&json, "]");
    }
    if (m.machine_cpu >= 0) {
      absl::StrAppend(&json, ", \"machine_cpu_cores\": ", JsonNumber(m.machine_cpu));
    }
    absl::StrAppend(&json, "}");
  }
  absl::StrAppend(&json, "\n  },\n");
  const Target& ratio = targets[0];
  absl::StrAppend(&json, "  \"predict_vs_health\": ",
                  ratio.pass.has_value() ? JsonNumber(ratio.value) : "null", ",\n");
  absl::StrAppend(&json, "  \"targets\": {");
  for (size_t i = 0; i < targets.size(); ++i) {
    const Target& t = targets[i];
    absl::StrAppend(&json, i == 0 ? "\n" : ",\n", "    ", JsonString(t.name),
                    ": {\"value\": ", t.pass.has_value() ? JsonNumber(t.value) : "null",
                    ", \"goal\": ", JsonString(t.goal), ", \"result\": ",
                    JsonString(!t.pass.has_value() ? "not run"
                               : *t.pass           ? "PASS"
                                                   : "MISS"));
    if (!t.note.empty()) absl::StrAppend(&json, ", \"note\": ", JsonString(t.note));
    absl::StrAppend(&json, "}");
  }
  absl::StrAppend(&json, "\n  }\n}\n");
  std::fputs(json.c_str(), stdout);
  std::fflush(stdout);
}

std::string Thousands(double value) {
  const int64_t n = std::llround(value);
  std::string digits = absl::StrCat(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

void PrintTable(const Settings& s, bool spawned, const std::vector<Measurement>& all,
                const std::vector<Target>& targets, const std::string& load_before,
                const std::string& load_after) {
  std::string out = absl::StrFormat(
      "\nokl_loadgen: %s%s, %s; client %s%s; %d callers over %d channels; %d model(s), d=%d, "
      "B=%d; %s per scenario after %s warm-up, best of %d run(s)%s\nload average before %s, "
      "after %s (%u CPUs)\n\n",
      s.address, spawned ? " (spawned)" : "", SecurityName(s), ClientApiName(s.api),
      s.api == ClientApi::kAsync ? absl::StrCat(" x", s.client_threads, " thread(s)") : "",
      s.callers, s.channels, s.models, s.dim, s.budget, absl::FormatDuration(s.duration),
      absl::FormatDuration(s.warmup), s.repetitions,
      s.pinning.empty() ? "" : absl::StrCat("; ", s.pinning), load_before, load_after,
      std::thread::hardware_concurrency());
  absl::StrAppend(
      &out, absl::StrFormat("%-15s %11s %11s %9s %9s %9s %7s %7s %7s %7s\n", "scenario",
                            "requests/s", "examples/s", "p50 us", "p99 us", "p999 us", "errors",
                            "client", "server", "others"));
  for (const Measurement& m : all) {
    absl::StrAppend(
        &out, absl::StrFormat("%-15s %11s %11s %9s %9s %9s %7d %7s %7s %7s\n", m.name,
                              Thousands(m.requests_per_s),
                              m.has_examples ? Thousands(m.examples_per_s) : "-",
                              Thousands(m.p50_us), Thousands(m.p99_us), Thousands(m.p999_us),
                              m.result.errors, absl::StrFormat("%.2f", m.client_cpu),
                              m.server_cpu >= 0 ? absl::StrFormat("%.2f", m.server_cpu) : "-",
                              m.server_cpu >= 0 && m.machine_cpu >= 0
                                  ? absl::StrFormat("%.2f", m.other_cpu())
                                  : "-"));
  }
  absl::StrAppend(&out,
                  "(client, server, others: CPU cores each used during the window -- others "
                  "is every other process of the machine, i.e. noise; stream: requests are "
                  "messages, latency is per stream of ",
                  s.stream_messages, " messages; NAME@F%: open loop at F% of NAME's "
                  "closed-loop rate, NAME@R/s: at R calls/s, latency from the scheduled "
                  "time)\n\n");
  for (const Measurement& m : all) {
    if (m.offered_rate > 0) {
      absl::StrAppend(&out, absl::StrFormat("%s: the client sent its calls late by up to %s us "
                                            "(p99; included in the latencies)\n",
                                            m.name, Thousands(m.send_lag_p99_us)));
    }
  }
  for (const Measurement& m : all) {
    if (!m.result.first_error.empty()) {
      absl::StrAppend(&out, m.name, " first error: ", m.result.first_error, "\n");
    }
  }
  absl::StrAppend(
      &out, absl::StrFormat("%-34s %12s %12s %8s\n", "target", "measured", "goal", "result"));
  const char* labels[] = {"Predict rate / health Check rate", "ObserveStream examples/s",
                          "Predict p99 (us)", "Predict p99 at 50% of max (us)"};
  for (size_t i = 0; i < targets.size(); ++i) {
    const Target& t = targets[i];
    absl::StrAppend(&out, absl::StrFormat("%-34s %12s %12s %8s%s\n", labels[i],
                                          t.pass.has_value() ? t.measured : "-", t.goal,
                                          !t.pass.has_value() ? "not run"
                                          : *t.pass           ? "PASS"
                                                              : "MISS",
                                          t.note.empty() ? "" : "  (" + t.note + ")"));
  }
  std::fputs(out.c_str(), stderr);
}

absl::StatusOr<Settings> ReadFlags() {
  Settings s;
  s.address = absl::GetFlag(FLAGS_server);
  s.callers = absl::GetFlag(FLAGS_callers);
  s.models = absl::GetFlag(FLAGS_models);
  s.dim = absl::GetFlag(FLAGS_dim);
  s.budget = absl::GetFlag(FLAGS_budget);
  s.regret_window = absl::GetFlag(FLAGS_regret_window);
  s.predict_batch = absl::GetFlag(FLAGS_predict_batch);
  s.stream_batch = absl::GetFlag(FLAGS_stream_batch);
  s.stream_messages = absl::GetFlag(FLAGS_stream_messages);
  s.stream_callers = absl::GetFlag(FLAGS_stream_callers);
  s.channels = absl::GetFlag(FLAGS_channels);
  s.client_threads = absl::GetFlag(FLAGS_client_threads);
  s.repetitions = absl::GetFlag(FLAGS_repetitions);
  s.duration = absl::GetFlag(FLAGS_duration);
  s.warmup = absl::GetFlag(FLAGS_warmup);
  s.tenant = absl::GetFlag(FLAGS_tenant);
  s.seed = absl::GetFlag(FLAGS_seed);
  s.rate = absl::GetFlag(FLAGS_rate);
  if (!(s.rate >= 0) || !std::isfinite(s.rate)) {
    return absl::InvalidArgumentError(absl::StrCat("--rate must be >= 0, got ", s.rate));
  }
  for (absl::string_view text :
       absl::StrSplit(absl::GetFlag(FLAGS_open_loop_fractions), ',', absl::SkipWhitespace())) {
    double fraction = 0;
    if (!absl::SimpleAtod(text, &fraction) || !(fraction > 0 && fraction <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--open_loop_fractions takes fractions in (0, 1], got \"", text, "\""));
    }
    s.open_loop_fractions.push_back(fraction);
  }
  if (s.rate > 0 && !s.open_loop_fractions.empty()) {
    return absl::InvalidArgumentError(
        "--rate and --open_loop_fractions do not go together: the fractions are of the "
        "closed-loop rate");
  }
  absl::StatusOr<ClientApi> api = ParseClientApi(absl::GetFlag(FLAGS_client_api));
  if (!api.ok()) return api.status();
  s.api = *api;

  auto positive = [](int value, const char* flag) -> absl::Status {
    if (value >= 1) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " must be at least 1, got ", value));
  };
  for (const auto& [value, flag] :
       {std::pair{s.callers, "callers"}, std::pair{s.models, "models"}, std::pair{s.dim, "dim"},
        std::pair{s.budget, "budget"}, std::pair{s.predict_batch, "predict_batch"},
        std::pair{s.stream_batch, "stream_batch"},
        std::pair{s.stream_messages, "stream_messages"},
        std::pair{s.repetitions, "repetitions"}}) {
    if (absl::Status status = positive(value, flag); !status.ok()) return status;
  }
  if (s.channels < 0 || s.stream_callers < 0 || s.client_threads < 0) {
    return absl::InvalidArgumentError(
        "--channels, --stream_callers and --client_threads must not be negative");
  }
  if (s.channels == 0) s.channels = std::min(s.callers, 4);
  if (s.stream_callers == 0) s.stream_callers = s.models;
  if (s.duration <= absl::ZeroDuration() || s.warmup < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--duration must be positive and --warmup not negative");
  }
  for (absl::string_view name :
       absl::StrSplit(absl::GetFlag(FLAGS_scenarios), ',', absl::SkipWhitespace())) {
    if (name != "health" && name != "get" && name != "predict" && name != "observe1" &&
        name != "observe64" && name != "stream") {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown scenario \"", name,
                       "\" in --scenarios; known: health, get, predict, observe1, "
                       "observe64, stream"));
    }
    s.scenarios.emplace_back(name);
  }
  if (s.scenarios.empty()) return absl::InvalidArgumentError("--scenarios is empty");
  if (s.address.empty() && absl::GetFlag(FLAGS_spawn_server).empty()) {
    return absl::InvalidArgumentError("give --server=host:port or --spawn_server=PATH");
  }

  const std::string ca_file = absl::GetFlag(FLAGS_tls_ca_file);
  const std::string cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  const std::string key_file = absl::GetFlag(FLAGS_tls_key_file);
  if (cert_file.empty() != key_file.empty()) {
    return absl::InvalidArgumentError("--tls_cert_file and --tls_key_file go together");
  }
  if (!cert_file.empty() && ca_file.empty()) {
    return absl::InvalidArgumentError("--tls_cert_file (mutual TLS) needs --tls_ca_file");
  }
  for (const auto& [path, flag, pem] :
       {std::tuple{ca_file, "tls_ca_file", &s.tls_root_certs},
        std::tuple{cert_file, "tls_cert_file", &s.tls_cert_chain},
        std::tuple{key_file, "tls_key_file", &s.tls_private_key}}) {
    if (path.empty()) continue;
    std::ifstream in(path, std::ios::binary);
    std::ostringstream contents;
    contents << in.rdbuf();
    *pem = contents.str();
    if (!in || pem->empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, "=", path, ": cannot read it, or it is empty"));
    }
  }
  std::string token = absl::GetFlag(FLAGS_token);
  if (token.empty()) {
    const char* from_env = std::getenv("OKL_TOKEN");
    if (from_env != nullptr) token = from_env;
  }
  if (!token.empty()) s.authorization = absl::StrCat("Bearer ", token);
  return s;
}

// The CPUs process `pid` may run on, as /proc/PID/status lists them ("0-1", "1"); "?" if
// unknown.
std::string AllowedCpus(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    absl::string_view rest = line;
    if (absl::ConsumePrefix(&rest, "Cpus_allowed_list:")) {
      return std::string(absl::StripAsciiWhitespace(rest));
    }
  }
  return "?";
}

// Keeps this process (and every thread it starts from now on) off the last CPU it may use,
// and returns that CPU, for the server.
absl::StatusOr<int> PinClientBesideServer() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
    return absl::InternalError(absl::StrCat("sched_getaffinity: ", std::strerror(errno)));
  }
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
  }
  if (cpus.size() < 2) {
    return absl::FailedPreconditionError(
        absl::StrCat("needs 2 CPUs or more; this process may use ", cpus.size()));
  }
  const int server_cpu = cpus.back();
  CPU_CLR(server_cpu, &allowed);
  if (sched_setaffinity(0, sizeof(allowed), &allowed) != 0) {
    return absl::InternalError(absl::StrCat("sched_setaffinity: ", std::strerror(errno)));
  }
  return server_cpu;
}

int Main() {
  absl::StatusOr<Settings> settings = ReadFlags();
  if (!settings.ok()) {
    std::fprintf(stderr, "okl_loadgen: %s\n", std::string(settings.status().message()).c_str());
    return 2;
  }
  Settings& s = *settings;

  std::unique_ptr<ServerProcess> server;
  if (const std::string binary = absl::GetFlag(FLAGS_spawn_server); !binary.empty()) {
    std::vector<std::string> extra =
        absl::StrSplit(absl::GetFlag(FLAGS_server_args), ' ', absl::SkipWhitespace());
    std::vector<std::string> launcher;
    if (absl::GetFlag(FLAGS_pin_cpus)) {
      absl::StatusOr<int> server_cpu = PinClientBesideServer();
      if (!server_cpu.ok()) {
        std::fprintf(stderr, "okl_loadgen: --pin_cpus: %s\n",
                     std::string(server_cpu.status().message()).c_str());
        return 2;
      }
      launcher = {"/usr/bin/taskset", "-c", absl::StrCat(*server_cpu)};
    }
    absl::StatusOr<std::unique_ptr<ServerProcess>> started =
        ServerProcess::Start(binary, extra, kSetupTimeout, Credentials(s), launcher);
    if (!started.ok()) {
      std::fprintf(stderr, "okl_loadgen: %s\n",
                   std::string(started.status().message()).c_str());
      return 1;
    }
    server = *std::move(started);
    s.address = server->address();
    if (!launcher.empty()) {
      s.pinning = absl::StrCat("server on CPUs ", AllowedCpus(server->pid()), ", client on CPUs ",
                               AllowedCpus(getpid()));
    }
  }

  // After --pin_cpus, which narrows the CPUs this process may use.
  if (s.client_threads == 0) s.client_threads = UsableCpus();

  const std::vector<std::shared_ptr<grpc::Channel>> channels = MakeChannels(s);
  if (absl::Status status = WaitConnected(channels); !status.ok()) {
    std::fprintf(stderr, "okl_loadgen: %s: %s\n", s.address.c_str(),
                 std::string(status.message()).c_str());
    return 1;
  }
  std::unique_ptr<v1::OnlineKernelLearning::Stub> stub =
      v1::OnlineKernelLearning::NewStub(channels[0]);
  ExampleSource source(s.dim, s.seed);
  const bool needs_models =
      std::any_of(s.scenarios.begin(), s.scenarios.end(),
                  [](const std::string& name) { return name != "health"; });
  if (needs_models) {
    if (absl::Status status = CreateModels(s, *stub, source); !status.ok()) {
      std::fprintf(stderr, "okl_loadgen: setup: %s\n", std::string(status.message()).c_str());
      DeleteModels(s, *stub);
      return 1;
    }
  }

  const std::string load_before = LoadAverage();
  std::vector<Measurement> all(s.scenarios.size());
  std::vector<std::vector<Measurement>> open_loop_runs(s.scenarios.size());  // --rate
  for (int run = 1; run <= s.repetitions; ++run) {
    for (size_t i = 0; i < s.scenarios.size(); ++i) {
      std::fprintf(stderr, "okl_loadgen: %s (run %d of %d) ...\n", s.scenarios[i].c_str(), run,
                   s.repetitions);
      Measurement m =
          RunScenario(s, s.scenarios[i], channels, *stub, source, server.get(), s.rate);
      if (m.offered_rate > 0) {
        m.name = absl::StrCat(m.name, "@", std::llround(s.rate), "/s");
        open_loop_runs[i].push_back(std::move(m));
        continue;
      }
      std::vector<double> rates = std::move(all[i].run_rates);
      std::vector<double> others = std::move(all[i].run_other_cpu);
      rates.push_back(m.rate());
      others.push_back(m.other_cpu());
      if (run == 1 || m.rate() > all[i].rate()) all[i] = std::move(m);
      all[i].run_rates = std::move(rates);
      all[i].run_other_cpu = std::move(others);
    }
  }
  for (size_t i = 0; i < s.scenarios.size(); ++i) {
    if (!open_loop_runs[i].empty()) all[i] = MedianP99Run(std::move(open_loop_runs[i]));
  }
  // Latency at a fixed load: each unary scenario in open loop at fractions of its best
  // closed-loop rate.
  const size_t closed_loop_runs = all.size();
  for (size_t i = 0; i < closed_loop_runs; ++i) {
    if (all[i].stream) continue;
    for (const double fraction : s.open_loop_fractions) {
      const double rate = fraction * all[i].requests_per_s;
      std::vector<Measurement> runs;
      for (int run = 1; run <= s.repetitions; ++run) {
        std::fprintf(stderr, "okl_loadgen: %s in open loop at %s/s (run %d of %d) ...\n",
                     all[i].name.c_str(), Thousands(rate).c_str(), run, s.repetitions);
        runs.push_back(
            RunScenario(s, s.scenarios[i], channels, *stub, source, server.get(), rate));
      }
      Measurement m = MedianP99Run(std::move(runs));
      m.name = absl::StrCat(s.scenarios[i], "@", std::llround(fraction * 100), "%");
      all.push_back(std::move(m));
    }
  }
  const std::string load_after = LoadAverage();

  if (needs_models) DeleteModels(s, *stub);
  const std::vector<Target> targets = EvaluateTargets(s, all);
  PrintJson(s, server != nullptr, all, targets, load_before, load_after);
  PrintTable(s, server != nullptr, all, targets, load_before, load_after);

  if (server != nullptr) {
    if (absl::Status status = server->Stop(absl::Seconds(15)); !status.ok()) {
      std::fprintf(stderr, "okl_loadgen: %s\n", std::string(status.message()).c_str());
    }
  }
  return 0;
}

}  // namespace
}  // namespace okl::loadgen

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Drives an okl_server with concurrent gRPC callers and prints JSON results.\n"
      "Usage: okl_loadgen --server=host:port | --spawn_server=PATH [--flags...]");
  absl::ParseCommandLine(argc, argv);
  // Before any gRPC thread exists: the mode is read on every lock acquisition.
  if (!absl::GetFlag(FLAGS_mutex_deadlock_detection)) {
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  }
  return okl::loadgen::Main();
}
