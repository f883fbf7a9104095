// client/cli/commands.h
//
// The subcommands of the `okl` tool, as functions over okl::Client with plain option
// structs: okl_main.cc parses flags into these and maps the Status they return to an
// exit code. Results go to Output::out, human-readable or as one JSON object per
// command (Output::json); progress goes to Output::err. A returned error is printed by
// the caller as one line, "okl: CODE: message"; nothing here prints errors.
//
// Not thread-safe (the commands write to shared FILE*s); one command runs at a time.
//
// Example:
//   OKL_ASSIGN_OR_RETURN(okl::Client client, okl::cli::Connect({.server = "127.0.0.1:50051"}));
//   const okl::ModelId id = {.tenant = "demo", .model = "a9a"};
//   OKL_RETURN_IF_ERROR(okl::cli::RunGet(client, id, {.json = true}));
#ifndef OKL_CLIENT_CLI_COMMANDS_H_
#define OKL_CLIENT_CLI_COMMANDS_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/cli/input.h"
#include "client/client.h"
#include "client/io/json_writer.h"
#include "client/replay.h"
#include "core/config.h"
#include "core/model.h"
#include "proto/bearer_token.h"

namespace okl::cli {

struct Output {
  bool json = false;        // one JSON object per result instead of text
  std::FILE* out = stdout;  // results
  std::FILE* err = stderr;  // progress and notes
};

struct ConnectionOptions {
  std::string server = "127.0.0.1:50051";      // host:port or any gRPC target
  absl::Duration timeout = absl::Seconds(30);  // the deadline of each call (and stream)
  // TLS: `tls` or a CA file turns it on; the files hold PEM. Empty CA: the system roots.
  bool tls = false;
  std::string tls_ca_file;
  std::string tls_cert_file;  // client certificate, with tls_key_file (mutual TLS)
  std::string tls_key_file;
  std::string token;  // sent as `authorization: Bearer <token>`
};

// A client for `options` (reads the TLS files). The channel connects lazily.
absl::StatusOr<Client> Connect(const ConnectionOptions& options);

// Where a learning curve goes (see client/cli/learning_curve.h). Both empty: none.
struct CurveOptions {
  std::string csv_path;   // the curve as CSV
  std::string plot_path;  // the curve drawn by gnuplot, .png or .svg
  std::string gnuplot = "gnuplot";

  bool wanted() const { return !csv_path.empty() || !plot_path.empty(); }
};

// "tenant/model", for messages.
std::string ModelLabel(const ModelId& id);
// A result's JSON object about model `id`, its "tenant" and "model" first.
JsonObject ModelJson(const ModelId& id);
// A model's size as its kind counts it: "1000 terms" (a kernel expansion) or "400 random
// features".
std::string ModelSizeText(const ModelConfig& config, uint64_t expansion_size);

// The model's summary: text (a block of "name value" lines and the config in protobuf
// text format, as `okl create --config` reads it) or JSON.
// With `events` (okl get), its delayed-feedback counts too: text lines before the
// config, none for a model that never remembered an event; in JSON, an "events" object.
std::string SummaryText(const ModelSummary& summary, const ModelEventCounts* events = nullptr);
std::string SummaryJson(const ModelSummary& summary, const ModelEventCounts* events = nullptr);
std::string EventsText(const ModelEventCounts& events);
std::string EventsJson(const ModelEventCounts& events);

absl::Status RunCreate(const Client& client, const ModelId& id, const ModelConfig& config,
                       const Output& output);
absl::Status RunGet(const Client& client, const ModelId& id, const Output& output);
// `tenant` empty: every tenant the caller may see.
absl::Status RunList(const Client& client, absl::string_view tenant, const Output& output);
absl::Status RunDelete(const Client& client, const ModelId& id, const Output& output);

struct ObserveOptions {
  std::vector<std::string> inputs;  // files, "-" for stdin, read in order
  RowFormat format = RowFormat::kCsv;
  size_t batch_size = 256;         // examples per stream message
  size_t batches_per_stream = 8;   // messages per acknowledged stream
  uint64_t skip = 0;               // leading rows not sent (to resume a stream)
  std::optional<uint64_t> limit;   // send at most this many rows (after the skipped ones)
  bool progress = false;           // report progress on Output::err
  bool progress_terminal = false;  // redraw the progress line in place
  CurveOptions curve;
};

// Streams labelled rows into the model through an ObserveWriter and prints a summary:
// examples, time, rate, average loss, mistakes (classification losses). On a failure
// the message says how many rows were applied, and so where --skip resumes.
absl::Status RunObserve(const Client& client, const ModelId& id, const ObserveOptions& options,
                        const Output& output);

struct PredictOptions {
  std::vector<std::string> inputs;  // files ("-": stdin) of unlabelled rows
  RowFormat format = RowFormat::kCsv;
  std::vector<std::string> vectors;  // inputs written out (ParseInputVector), first
  std::string output_path;           // empty or "-": Output::out
  size_t batch_size = 1000;          // inputs per Predict call
  std::optional<uint64_t> limit;     // predict at most this many rows of `inputs`
  // Set (--remember): the server remembers each input under an event id
  // (Client::PredictRemembering). remember->event_ids, if any, are one per input, over
  // all the inputs in order: they are counted before anything is sent.
  std::optional<RememberOptions> remember;
};

// Writes one prediction per input, "%.17g" a line (they round-trip), in input order.
// With `remember`, each line is "event_id,prediction" instead (CSV: okl label reads
// "event_id,y"); a KRLS tracker's adds ",variance".
absl::Status RunPredict(const Client& client, const ModelId& id, const PredictOptions& options,
                        const Output& output);

struct LabelOptions {
  std::vector<std::string> inputs;  // files ("-": stdin) of "event_id,y" lines
  size_t batch_size = 1000;         // labels per Label call
};

// `okl label`: sends the labels in order, batch_size a call (Client::Label), and prints
// per label "event_id,outcome" (applied, duplicate or unknown), in order, then a summary
// on Output::err: the counts of each outcome and the model's steps. With Output::json,
// one object instead. A malformed line stops it before its batch is sent; the message
// says how many labels were sent before (rerunning the whole input is safe: a label
// already applied answers duplicate).
absl::Status RunLabel(const Client& client, const ModelId& id, const LabelOptions& options,
                      const Output& output);

absl::Status RunSnapshot(const Client& client, const ModelId& id, const std::string& path,
                         const Output& output);
absl::Status RunRestore(const Client& client, const ModelId& id, const std::string& path,
                        const Output& output);

struct MoveOptions {
  // The router's per-tenant override map (nginx map lines `"TENANT" ADDRESS;`), where
  // the move pins the tenant to route_to, and the command that makes the router reread
  // it (run by /bin/sh; empty: none).
  std::string route_map;
  std::string route_reload;
  std::string route_to;  // the target's address as the router reaches it
  std::string from;      // the source's address, for what the messages tell to do
};

// `okl move`: moves every model of `tenant` from the server `from` to the server `to`
// with nothing acknowledged lost (see move.cc for the steps and what a failure leaves),
// then prints what it moved and how long the tenant's writes were paused. Needs an admin
// token on both. FailedPrecondition if `to` already holds models of the tenant.
absl::Status RunMove(const Client& from, const Client& to, absl::string_view tenant,
                     const MoveOptions& options, const Output& output);

// `okl fence`: Client::FenceTenant, then what it did: the tenant's models fenced (or
// deleted), or the fence lifted.
absl::Status RunFence(const Client& client, absl::string_view tenant, bool fenced,
                      bool delete_models, const Output& output);

// Whether `service` ("" for the whole server) is SERVING. Prints nothing on success unless
// Output::json; the caller reports NOT_SERVING.
absl::StatusOr<bool> RunHealth(const Client& client, absl::string_view service,
                               const Output& output);

// `okl token new`: a fresh token (okl::NewToken) for `grant`. Prints the token on the
// first line and the line to append to the server's tokens file on the second; or, with
// Output::json, one object {"token", "role", "tenants", "line"}. Needs no server.
absl::Status RunTokenNew(const Grant& grant, const Output& output);

// `okl replay`: okl::Replay, plus its learning curve when `curve` wants one (then the
// model runs here, step by step, with the same results). The summary goes to
// Output::err as text, or to Output::out as JSON.
absl::Status RunReplay(const ReplayOptions& options, const CurveOptions& curve,
                       const Output& output);

}  // namespace okl::cli

#endif  // OKL_CLIENT_CLI_COMMANDS_H_
