// server/okl_server_main.cc
//
// okl_server: the okl gRPC service. Parses the flags into okl::Server::Options, starts
// the server, re-reads its tokens file on SIGHUP, and on SIGTERM or SIGINT drains it (health NOT_SERVING, new calls
// UNAVAILABLE, calls in flight get --shutdown_grace to finish) and exits 0.
//
// The signals are blocked before any thread exists, so every thread inherits the mask
// and only the main thread's sigwait() ever receives them: no async signal handler.

#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/config.h"
#include "core/runtime/file.h"
#include "server/base/failpoint.h"
#include "server/metrics/metrics.h"
#include "server/server.h"
#include "server/rpc/service.h"

namespace {

// okl::Server::Options as default-constructed: every flag below that maps onto an option
// takes its default from here, so each default is written once, with the option it sets
// (server/server.h and the components' Options it nests). Two differ on purpose, as a
// server binary should: --data_dir (the library's default keeps models in memory only)
// and --metrics_address (the library's default serves no metrics).
const okl::Server::Options& Defaults() {
  static const okl::Server::Options* const defaults = new okl::Server::Options();
  return *defaults;
}

}  // namespace

ABSL_FLAG(std::string, listen, Defaults().listen_address,
          "Address to serve gRPC on, host:port; port 0 picks a free port (see --port_file). "
          "An address beyond loopback (e.g. 0.0.0.0:50051) needs --auth_tokens_file or "
          "--allow_unauthenticated.");
ABSL_FLAG(std::string, tls_cert_file, "",
          "TLS on the gRPC port: the server's certificate chain (PEM). Needs --tls_key_file.");
ABSL_FLAG(std::string, tls_key_file, "", "TLS: the server's private key (PEM).");
ABSL_FLAG(std::string, tls_client_ca_file, "",
          "Mutual TLS: clients must present a certificate signed by this CA (PEM).");
ABSL_FLAG(std::string, auth_tokens_file, "",
          "Bearer tokens: a file of lines '<sha256 hex of token> <read|write|admin> "
          "<tenant>[,<tenant>...]' ('*': every tenant; '#' comments). Every okl call must "
          "then carry 'authorization: Bearer <token>'; health stays open. SIGHUP re-reads "
          "it. Make lines with `okl token new`.");
ABSL_FLAG(bool, allow_unauthenticated, Defaults().allow_unauthenticated,
          "Serve an address beyond loopback without --auth_tokens_file: anyone who reaches "
          "the port may read, overwrite and delete every tenant's models.");
ABSL_FLAG(uint64_t, max_models_per_tenant, Defaults().host.quotas.max_models_per_tenant,
          "Most models one tenant may hold (0: no per-tenant limit); beyond it: "
          "RESOURCE_EXHAUSTED.");
ABSL_FLAG(uint64_t, max_bytes_per_tenant, Defaults().host.quotas.max_bytes_per_tenant,
          "Most worst-case bytes one tenant's models may come to, each counted as "
          "max_terms x (dim + 1) doubles plus bookkeeping, its regret window and the "
          "comparator's W x W matrix, at CreateModel and Restore (0: no limit).");
ABSL_FLAG(uint64_t, max_memory_bytes, Defaults().host.quotas.max_memory_bytes,
          "Most worst-case bytes all models together may come to (0: 3/4 of the "
          "machine's memory).");
ABSL_FLAG(double, max_requests_per_second_per_tenant,
          Defaults().host.quotas.max_requests_per_second_per_tenant,
          "Each tenant's request rate, as a token bucket with one second's burst (each "
          "call and each ObserveStream message is one request; 0: no limit).");
ABSL_FLAG(uint64_t, max_request_bytes, Defaults().service.max_request_bytes,
          "Most bytes one request's inputs may take as dense doubles ((dim + 1) x 8 bytes "
          "per example), checked before anything is allocated; beyond it: "
          "RESOURCE_EXHAUSTED.");
ABSL_FLAG(uint64_t, max_response_predictions, Defaults().service.max_response_predictions,
          "An ObserveStream returns predictions and losses for at most this many examples "
          "(the first); the response counts the rest in predictions_omitted.");
ABSL_FLAG(int32_t, max_concurrent_restores, Defaults().service.max_concurrent_restores,
          "Most Restore calls running at once (each buffers one snapshot); one more: "
          "RESOURCE_EXHAUSTED.");
ABSL_FLAG(uint64_t, max_inline_work, Defaults().service.max_inline_work,
          "A Predict of at most this many multiply-adds (inputs x the model's worst case per "
          "input) runs inline on an --rpc_threads thread; a larger one on the offload threads, "
          "so that it does not stall the other calls that thread carries.");
ABSL_FLAG(int32_t, rpc_threads, Defaults().rpc_threads,
          "Threads that serve the calls, each polling a completion queue of its own and running "
          "the small reads inline; 0: one per CPU the server may use (its affinity: taskset, a "
          "container's cpuset).");
ABSL_FLAG(int32_t, offload_threads, Defaults().service.offload_threads,
          "Threads that run what is not run inline on the --rpc_threads: every write, "
          "ListModels, FenceTenant, ObserveStream's batches, the Predicts over "
          "--max_inline_work and the reads that would wait for a batch being applied to "
          "their model; 0: one per CPU the server may use (its affinity: taskset, a container's "
          "cpuset).");
ABSL_FLAG(std::string, port_file, "",
          "If set, once the server is SERVING write its bound port (decimal, newline) to "
          "this file, atomically (a temporary file in the same directory, renamed).");
ABSL_FLAG(std::string, data_dir, "./okl-data",
          "Directory of the durable model store (RocksDB), created if missing. Empty: no "
          "store, models live in memory only and nothing survives a restart.");
ABSL_FLAG(bool, sync_writes, Defaults().host.sync_writes,
          "fsync every store write before acknowledging it: survives power loss (default: "
          "survives a crash of the process), at a throughput cost.");
ABSL_FLAG(uint64_t, checkpoint_every_examples, Defaults().host.checkpoint_every_examples,
          "Checkpoint a model in the background once this many examples were logged since "
          "its last checkpoint (0: not by count).");
ABSL_FLAG(absl::Duration, checkpoint_every, Defaults().host.checkpoint_every,
          "Checkpoint a model with new examples once this long passed since its last "
          "checkpoint (0: not by time).");
ABSL_FLAG(bool, skip_damaged_models, Defaults().host.skip_damaged_models,
          "Start even if stored models are damaged, without them (their data is left in "
          "the store); by default a damaged model stops the start.");
ABSL_FLAG(uint64_t, max_models, Defaults().host.quotas.max_models,
          "Most models held at once; CreateModel/Restore beyond it: RESOURCE_EXHAUSTED.");
ABSL_FLAG(uint32_t, max_dim, Defaults().host.max_dim,
          "Largest model input dimension accepted by CreateModel/Restore for dense storage "
          "(at most 65536); beyond it: INVALID_ARGUMENT.");
ABSL_FLAG(uint32_t, max_sparse_dim, Defaults().host.max_sparse_dim,
          "The same for models with sparse storage (config sparse.max_nonzeros > 0; at most "
          "16777216).");
ABSL_FLAG(uint32_t, max_terms, Defaults().host.max_terms,
          "Largest budget.max_terms accepted by CreateModel/Restore (at most 4194304); a "
          "budget of 0 (unbounded) or beyond it: INVALID_ARGUMENT.");
ABSL_FLAG(uint32_t, max_basis, Defaults().host.max_basis,
          "Largest krls_tracker.max_basis accepted by CreateModel/Restore (at most 4096); "
          "beyond it: INVALID_ARGUMENT. A tracker's memory and step grow as its square.");
ABSL_FLAG(uint32_t, max_classes, Defaults().host.max_classes,
          "Largest max_classes of a multi-class model (multiclass_hinge, softmax) accepted "
          "by CreateModel/Restore (at most 65536); beyond it: INVALID_ARGUMENT. A term "
          "keeps a coefficient per class, so memory and step time grow with it.");
ABSL_FLAG(absl::Duration, max_label_wait, Defaults().host.events.max_wait,
          "Longest remember.wait_seconds a Predict may ask for (delayed feedback: how long "
          "a remembered event awaits its label); beyond it: INVALID_ARGUMENT.");
ABSL_FLAG(uint64_t, max_pending_events, Defaults().host.events.max_pending,
          "Most remembered events awaiting a label per model; a Predict with remember "
          "past it: RESOURCE_EXHAUSTED, nothing remembered.");
ABSL_FLAG(uint64_t, max_event_bytes_per_tenant,
          Defaults().host.quotas.max_event_bytes_per_tenant,
          "Most bytes one tenant's remembered events may take in the store (their keys and "
          "records: about 100 + 2 x id length + 8 x dim bytes each while pending), over all "
          "its models (0: no limit); a Predict with remember past it: RESOURCE_EXHAUSTED, "
          "nothing remembered.");
ABSL_FLAG(uint32_t, max_batch, Defaults().service.max_batch,
          "Most examples in one ObserveRequest (per ObserveStream message) or inputs in "
          "one PredictRequest; beyond it: RESOURCE_EXHAUSTED.");
ABSL_FLAG(int32_t, max_message_bytes, Defaults().max_message_bytes,
          "Largest message the server receives, in bytes (gRPC answers RESOURCE_EXHAUSTED "
          "beyond it).");
ABSL_FLAG(absl::Duration, shutdown_grace, absl::Seconds(10),
          "On SIGTERM/SIGINT, how long calls in flight may take to finish before they are "
          "cancelled.");
ABSL_FLAG(bool, mutex_deadlock_detection, false,
          "Keep absl::Mutex's deadlock detection on (for debugging; okl's tests do). Debian's "
          "Abseil is built without NDEBUG, so with it on every absl::Mutex acquisition -- "
          "gRPC's and okl's -- updates one global lock-order graph under one global lock.");
ABSL_FLAG(std::string, failpoint, "",
          "For crash tests: SIGKILL the server at a named place in its durable writes, the "
          "first time it is reached (NAME) or the N-th (NAME@N). server/base/failpoint.h lists "
          "the names; an unknown one is refused with the list. Empty: none.");
ABSL_FLAG(bool, reflection, Defaults().reflection,
          "Serve gRPC server reflection (grpc.reflection.v1alpha), for grpcurl and the like.");
ABSL_FLAG(std::string, metrics_address, "127.0.0.1:9464",
          "Address to serve Prometheus metrics on (http://HOST:PORT/metrics); port 0 picks a "
          "free port (see --metrics_port_file); empty: no metrics endpoint.");
ABSL_FLAG(std::string, metrics_port_file, "",
          "If set, the bound metrics port is written to this file once the server serves.");
ABSL_FLAG(uint64_t, metrics_max_models, Defaults().metrics.max_models,
          "Per-model metric series for at most this many models (the first in (tenant, "
          "model) order); the rest count only in the aggregate series.");
ABSL_FLAG(std::string, metrics_model_labels,
          std::string(okl::ModelLabelsName(Defaults().metrics.model_labels)),
          "How per-model series name their model: names (tenant and model labels), hashed "
          "(the first 16 hex digits of each name's SHA-256), or none (aggregates only).");
ABSL_FLAG(uint64_t, regret_every_steps, Defaults().regret.every_steps,
          "Recompute a model's windowed regret (models with regret_window > 0) after its "
          "first batch and then after every this many examples, in the background.");
ABSL_FLAG(absl::Duration, regret_refresh, Defaults().regret_refresh,
          "Recompute the regret of a model that went idle fewer than --regret_every_steps "
          "examples after its last computation within this long; 0: never.");
ABSL_FLAG(int32_t, regret_threads, Defaults().regret.threads,
          "Background threads that compute regret, at idle CPU priority (SCHED_IDLE; 1-64).");

namespace {

// `listen` with its port replaced by the bound one: "0.0.0.0:0" -> "0.0.0.0:40123".
std::string BoundAddress(absl::string_view listen, int port) {
  const size_t colon = listen.rfind(':');
  if (colon == absl::string_view::npos) return std::string(listen);
  const absl::string_view tail = listen.substr(colon + 1);
  if (tail.empty() || !std::all_of(tail.begin(), tail.end(), absl::ascii_isdigit)) {
    return std::string(listen);
  }
  return absl::StrCat(listen.substr(0, colon + 1), port);
}

// Writes "<port>\n" to `path` so that a reader never sees a partial file.
// `flag` names the flag in errors.
absl::Status WritePortFile(const std::string& path, int port, absl::string_view flag) {
  absl::Status status = okl::WriteFileAtomically(path, absl::StrCat(port, "\n"));
  if (status.ok()) return status;
  return absl::UnavailableError(absl::StrCat(status.message(), " (", flag, ")"));
}

// glibc's malloc hands the free memory at the top of a heap back to the kernel once it
// exceeds M_TRIM_THRESHOLD, while it holds that heap's lock. After a large model's
// buffers are freed (a Restore, a Snapshot) that took milliseconds on a 2-core VM, and
// every serving thread that allocated from the same heap waited: with the threshold
// raised, another tenant's GetModel every 5 ms during repeated 93 MiB Restores has a p999
// of 25-87 ms instead of up to 373 ms (docs/benchmarks.md, "Noisy neighbour").
// Allocations of 128 KiB and more still get their own mappings, returned when freed, so
// what a heap keeps is small objects' space. GLIBC_TUNABLES, when it sets the threshold,
// wins.
void KeepFreedHeapMemory() {
  constexpr int kTrimThresholdBytes = 256 << 20;
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "trim_threshold") != nullptr) return;
  mallopt(M_TRIM_THRESHOLD, kTrimThresholdBytes);
}

// Sets *out to a flag's parsed value; or prints why it is wrong and returns false.
template <typename T>
bool TakeParsed(absl::StatusOr<T> parsed, T* out) {
  if (!parsed.ok()) {
    std::fprintf(stderr, "okl_server: %s\n", std::string(parsed.status().message()).c_str());
    return false;
  }
  *out = *std::move(parsed);
  return true;
}

// Blocks the signals main waits for, SIGTERM, SIGINT and SIGHUP, and returns them.
sigset_t BlockSignals() {
  // Before anything can start a thread. A shell without job control starts background
  // commands with SIGINT ignored, and an ignored signal is discarded even while blocked,
  // so the default disposition is restored first (blocked, it never runs).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);  // not a stop: re-read the tokens file
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGTERM, SIG_DFL);
  signal(SIGINT, SIG_DFL);
  signal(SIGHUP, SIG_DFL);
  return stop_signals;
}

// okl::Server::Options from the flags; false, after saying why, if one is invalid.
bool ServerOptionsFromFlags(okl::Server::Options* options) {
  options->listen_address = absl::GetFlag(FLAGS_listen);
  options->tls_cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  options->tls_key_file = absl::GetFlag(FLAGS_tls_key_file);
  options->tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca_file);
  options->auth_tokens_file = absl::GetFlag(FLAGS_auth_tokens_file);
  options->allow_unauthenticated = absl::GetFlag(FLAGS_allow_unauthenticated);
  options->max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  options->reflection = absl::GetFlag(FLAGS_reflection);

  okl::ModelHost::Options& host = options->host;
  host.max_dim = absl::GetFlag(FLAGS_max_dim);
  host.max_sparse_dim = absl::GetFlag(FLAGS_max_sparse_dim);
  host.max_terms = absl::GetFlag(FLAGS_max_terms);
  host.max_basis = absl::GetFlag(FLAGS_max_basis);
  host.max_classes = absl::GetFlag(FLAGS_max_classes);
  host.quotas.max_models = absl::GetFlag(FLAGS_max_models);
  host.quotas.max_models_per_tenant = absl::GetFlag(FLAGS_max_models_per_tenant);
  host.quotas.max_bytes_per_tenant = absl::GetFlag(FLAGS_max_bytes_per_tenant);
  host.quotas.max_memory_bytes = absl::GetFlag(FLAGS_max_memory_bytes);
  host.quotas.max_requests_per_second_per_tenant =
      absl::GetFlag(FLAGS_max_requests_per_second_per_tenant);
  host.data_dir = absl::GetFlag(FLAGS_data_dir);
  host.sync_writes = absl::GetFlag(FLAGS_sync_writes);
  host.skip_damaged_models = absl::GetFlag(FLAGS_skip_damaged_models);
  host.checkpoint_every_examples = absl::GetFlag(FLAGS_checkpoint_every_examples);
  host.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  host.events.max_wait = absl::GetFlag(FLAGS_max_label_wait);
  host.events.max_pending = absl::GetFlag(FLAGS_max_pending_events);
  host.quotas.max_event_bytes_per_tenant = absl::GetFlag(FLAGS_max_event_bytes_per_tenant);

  okl::OklService::Options& service = options->service;
  service.max_batch = absl::GetFlag(FLAGS_max_batch);
  service.max_request_bytes = absl::GetFlag(FLAGS_max_request_bytes);
  service.max_response_predictions = absl::GetFlag(FLAGS_max_response_predictions);
  service.max_concurrent_restores = absl::GetFlag(FLAGS_max_concurrent_restores);
  service.max_inline_work = absl::GetFlag(FLAGS_max_inline_work);
  service.offload_threads = absl::GetFlag(FLAGS_offload_threads);
  options->rpc_threads = absl::GetFlag(FLAGS_rpc_threads);

  options->metrics_address = absl::GetFlag(FLAGS_metrics_address);
  options->metrics.max_models = absl::GetFlag(FLAGS_metrics_max_models);
  if (!TakeParsed(okl::ParseModelLabels(absl::GetFlag(FLAGS_metrics_model_labels)),
                  &options->metrics.model_labels)) {
    return false;
  }
  options->regret.every_steps = absl::GetFlag(FLAGS_regret_every_steps);
  options->regret.threads = absl::GetFlag(FLAGS_regret_threads);
  options->regret_refresh = absl::GetFlag(FLAGS_regret_refresh);
  return true;
}

// Where the started server serves, on stderr.
void PrintAddresses(const okl::Server::Options& options, const okl::Server& server) {
  std::fprintf(stderr, "okl_server listening on %s\n",
               BoundAddress(options.listen_address, server.port()).c_str());
  if (server.metrics_port() != 0) {
    std::fprintf(stderr, "okl_server metrics on http://%s/metrics\n",
                 BoundAddress(options.metrics_address, server.metrics_port()).c_str());
  }
}

// Writes --metrics_port_file and --port_file, those given; the first failure.
absl::Status WritePortFiles(const okl::Server& server) {
  for (const auto& [flag, port_file, port] :
       // The metrics port first: a reader that sees the gRPC port file finds both.
       {std::tuple<const char*, std::string, int>{"--metrics_port_file",
                                                  absl::GetFlag(FLAGS_metrics_port_file),
                                                  server.metrics_port()},
        {"--port_file", absl::GetFlag(FLAGS_port_file), server.port()}}) {
    if (port_file.empty()) continue;
    if (absl::Status status = WritePortFile(port_file, port, flag); !status.ok()) return status;
  }
  return absl::OkStatus();
}

// Waits for SIGTERM or SIGINT and returns it; each SIGHUP meanwhile re-reads the tokens
// file.
int WaitForStopSignal(const sigset_t& stop_signals, okl::Server& server) {
  int signal_number = 0;
  while (true) {
    if (sigwait(&stop_signals, &signal_number) != 0) continue;
    if (signal_number != SIGHUP) return signal_number;
    // Token rotation without a restart.
    if (absl::Status status = server.ReloadAuthTokens(); status.ok()) {
      std::fprintf(stderr, "okl_server: SIGHUP: re-read --auth_tokens_file\n");
    } else {
      std::fprintf(stderr, "okl_server: SIGHUP: %s; the previous tokens stay in force\n",
                   std::string(status.message()).c_str());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const sigset_t stop_signals = BlockSignals();
  KeepFreedHeapMemory();

  absl::SetProgramUsageMessage(
      "Serves okl.v1.OnlineKernelLearning (online kernel learning, NORMA) over gRPC.\n"
      "Usage: okl_server [--listen=127.0.0.1:50051] [--auth_tokens_file=PATH] [--flags...]");
  absl::ParseCommandLine(argc, argv);
  // Before any thread: the mode is read on every lock acquisition.
  if (!absl::GetFlag(FLAGS_mutex_deadlock_detection)) {
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  }

  okl::Server::Options options;
  if (!ServerOptionsFromFlags(&options)) return 1;
  if (const std::string failpoint = absl::GetFlag(FLAGS_failpoint); !failpoint.empty()) {
    if (absl::Status status = okl::ArmFailpoint(failpoint); !status.ok()) {
      std::fprintf(stderr, "okl_server: %s\n", std::string(status.message()).c_str());
      return 1;
    }
  }
  const absl::Duration grace = absl::GetFlag(FLAGS_shutdown_grace);
  if (grace < absl::ZeroDuration()) {
    std::fprintf(stderr, "okl_server: --shutdown_grace must not be negative\n");
    return 1;
  }

  okl::Server server(options);
  if (absl::Status status = server.Start(); !status.ok()) {
    std::fprintf(stderr, "okl_server: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  PrintAddresses(options, server);
  if (absl::Status status = WritePortFiles(server); !status.ok()) {
    std::fprintf(stderr, "okl_server: %s\n", std::string(status.message()).c_str());
    server.Shutdown(absl::Now());
    return 1;
  }

  const int signal_number = WaitForStopSignal(stop_signals, server);
  std::fprintf(stderr, "okl_server: %s, draining (up to %s)\n", strsignal(signal_number),
               absl::FormatDuration(grace).c_str());
  server.Shutdown(absl::Now() + grace);
  std::fprintf(stderr, "okl_server stopped\n");
  return 0;
}
