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
//   and, when those scenarios run (delayed feedback, docs/delayed-feedback.md):
//   Predict with remember >= 0.7x the rate of plain Predict (same batch, 32 callers)
//   Labels applied into one model (batches of 100) >= 50,000 labels/s
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
//   remember   Predict of --predict_batch inputs with `remember` (server-made ids, a
//              wait of an hour): each call stores its inputs as events
//   label      Label of --label_batch labels: before each run, --label_events events
//              are remembered per model (not measured) and dealt out so that each call
//              labels events no other call labels; labels/s is the models' step growth
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
#include "bench/loadgen_flags.h"
#include "bench/loadgen_report.h"
#include "bench/loadgen_server_process.h"
#include "client/io/json_writer.h"
#include "core/runtime/usable_cpus.h"
#include "google/protobuf/descriptor.h"
#include "okl/v1/okl.grpc.pb.h"
#include "okl/v1/okl.pb.h"

namespace okl::loadgen {
namespace {

using ::okl::JsonString;

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
      } else if (scenario == "predict" || scenario == "remember") {
        v1::PredictRequest request;
        *request.mutable_ref() = Ref(s, m);
        for (int i = 0; i < s.predict_batch; ++i) source.FillInput(request.add_inputs());
        // Server-made ids, so that a request sent again remembers its inputs again.
        if (scenario == "remember") request.mutable_remember()->set_wait_seconds(3600);
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

// The label scenario's requests, per caller: first `s.label_events` events are remembered
// in each model (client-chosen ids, unique to this `run`), then split into Label requests
// of `s.label_batch`, dealt to the model's callers so that no two calls label one event.
absl::StatusOr<std::vector<std::vector<grpc::ByteBuffer>>> LabelPools(
    const Settings& s, v1::OnlineKernelLearning::Stub& stub, ExampleSource& source, int run) {
  constexpr int kRememberBatch = 1000;
  std::vector<std::vector<grpc::ByteBuffer>> pools(s.callers);
  for (int m = 0; m < s.models; ++m) {
    std::vector<int> callers;  // of model m
    for (int i = m; i < s.callers; i += s.models) callers.push_back(i);
    if (callers.empty()) continue;
    v1::LabelRequest label;
    size_t next_caller = 0;
    for (int first = 0; first < s.label_events; first += kRememberBatch) {
      v1::PredictRequest remember;
      *remember.mutable_ref() = Ref(s, m);
      remember.mutable_remember()->set_wait_seconds(3600);
      for (int k = first; k < std::min(s.label_events, first + kRememberBatch); ++k) {
        source.FillInput(remember.add_inputs());
        remember.mutable_remember()->add_event_ids(absl::StrCat("run", run, "-", k));
      }
      grpc::ClientContext context;
      PrepareSetupCall(&context, s);
      v1::PredictResponse ignored;
      if (absl::Status status = FromGrpc(stub.Predict(&context, remember, &ignored),
                                         absl::StrCat("Predict (remember) ", ModelName(m)));
          !status.ok()) {
        return status;
      }
      int k = first;
      for (const std::string& id : remember.remember().event_ids()) {
        if (label.labels_size() == 0) *label.mutable_ref() = Ref(s, m);
        v1::EventLabel* event = label.add_labels();
        event->set_event_id(id);
        event->set_y(std::sin(static_cast<double>(k++)));  // any finite label
        if (label.labels_size() == s.label_batch) {
          pools[callers[next_caller++ % callers.size()]].push_back(Serialize(label));
          label.Clear();
        }
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
  // Examples applied: counted as the models' step growth over the window for streams
  // and labels (a label that found its event labelled already applies nothing).
  const bool counts_steps = m.stream || name == "label";
  m.has_examples = name != "health" && name != "get" && name != "predict" && name != "remember";
  const int callers = m.stream ? s.stream_callers : s.callers;
  std::vector<Caller> plan(callers);
  if (name == "label") {
    static int label_runs = 0;
    absl::StatusOr<std::vector<std::vector<grpc::ByteBuffer>>> pools =
        LabelPools(s, stub, source, ++label_runs);
    if (!pools.ok()) {
      std::fprintf(stderr, "okl_loadgen: label: %s\n",
                   std::string(pools.status().message()).c_str());
      m.result.errors = 1;
      return m;
    }
    for (int i = 0; i < callers; ++i) plan[i].requests = std::move((*pools)[i]);
  } else {
    const std::vector<std::vector<grpc::ByteBuffer>> pools = RequestPools(s, name, source);
    for (int i = 0; i < callers; ++i) plan[i].requests = pools[i % s.models];
  }
  for (int i = 0; i < callers; ++i) {
    plan[i].channel = channels[i % channels.size()];
    plan[i].authorization = s.authorization;
    plan[i].tenant = s.tenant;
  }
  const std::string method = name == "health" ? std::string(kHealthCheckMethod)
                             : name == "get"  ? MethodName("GetModel")
                             : name == "predict" || name == "remember" ? MethodName("Predict")
                             : name == "label"                         ? MethodName("Label")
                             : m.stream ? MethodName("ObserveStream")
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
  const int64_t steps_begin = counts_steps ? TotalSteps(s, stub) : 0;
  std::this_thread::sleep_until(window.end);
  const double client_cpu_end = CpuSecondsOfThisProcess();
  const double server_cpu_end = server != nullptr ? server->CpuSeconds() : -1;
  const double machine_end = MachineBusySeconds();
  const int64_t steps_end = counts_steps ? TotalSteps(s, stub) : 0;
  engine.join();

  m.seconds = window.seconds();
  m.result = std::move(result);
  m.requests_per_s = m.result.completed / m.seconds;
  if (counts_steps) {
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
