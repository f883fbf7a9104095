// bench/loadgen_flags.cc

#include "bench/loadgen_flags.h"

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "core/runtime/file.h"

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
          "stream, remember (Predict with remember: server-made ids, a wait of an hour), "
          "label (Label requests of --label_batch labels, each of an event remembered "
          "before the run).");
ABSL_FLAG(double, rate, 0,
          "Open loop: send the unary scenarios' calls at this many per second, on schedule "
          "whatever the responses do, latency counted from each call's scheduled time "
          "(0: closed loop, --callers calls in flight).");
ABSL_FLAG(std::string, open_loop_fractions, "",
          "After each unary scenario's closed-loop run, open-loop runs at these fractions of "
          "its closed-loop rate (e.g. 0.25,0.5,0.75): latency at a fixed load.");
ABSL_FLAG(int32_t, predict_batch, 1, "Inputs per Predict request.");
ABSL_FLAG(int32_t, stream_batch, 256, "Examples per ObserveStream message.");
ABSL_FLAG(int32_t, label_batch, 100, "Labels per Label request (the label scenario).");
ABSL_FLAG(int32_t, label_events, 1000000,
          "Events remembered per model before each run of the label scenario: its calls "
          "label each once (more calls than events would be duplicates, which apply "
          "nothing).");
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
  s.label_batch = absl::GetFlag(FLAGS_label_batch);
  s.label_events = absl::GetFlag(FLAGS_label_events);
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
      return absl::InvalidArgumentError(
          absl::StrCat("--open_loop_fractions takes fractions in (0, 1], got \"", text, "\""));
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
        std::pair{s.stream_batch, "stream_batch"}, std::pair{s.label_batch, "label_batch"},
        std::pair{s.label_events, "label_events"},
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
        name != "observe64" && name != "stream" && name != "remember" && name != "label") {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown scenario \"", name,
                       "\" in --scenarios; known: health, get, predict, observe1, "
                       "observe64, stream, remember, label"));
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

}  // namespace okl::loadgen
