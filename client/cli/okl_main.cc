// client/cli/okl_main.cc
//
// The `okl` command-line tool: okl_server's models from a shell, and NORMA offline.
//   okl create|get|list|delete|observe|predict|label|snapshot|restore|health [flags]
//   okl replay [--local] --config FILE --input FILE --output FILE
//   okl token new --role=read|write|admin [--tenants=T1,T2,...|*]
//   okl help [COMMAND], okl COMMAND --help
//   okl --version
// Exit codes: 0 success, 1 a failed command (the reason on stderr, one line:
// "okl: CODE: message"), 2 a usage error. `okl health` exits 1 when the server is not
// SERVING.
//
// Flags are Abseil flags, defined here (the model config's in config_flags.cc);
// client/cli/args.h parses them per command,
// so that each command accepts only its own (okl help COMMAND lists them).

#include <unistd.h>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "client/cli/args.h"
#include "client/cli/commands.h"
#include "client/cli/config_flags.h"
#include "client/cli/connection_flags.h"
#include "client/cli/input.h"
#include "client/cli/learning_curve.h"
#include "client/replay.h"
#include "core/config.h"
#include "core/runtime/file.h"
#include "grpc/support/log.h"
#include "proto/bearer_token.h"
#include "proto/config_text.h"
#include "proto/convert.h"

// --- The model a command acts on -----------------------------------------------------
ABSL_FLAG(std::string, tenant, "",
          "the tenant that owns the model (default: $OKL_TENANT, else \"default\"); for "
          "list, only this tenant's models (default: every tenant's)");
ABSL_FLAG(std::string, model, "", "the model's name (required)");

// --- The model's configuration (create) ---------------------------------------------
ABSL_FLAG(std::string, config, "",
          "an okl.v1.ModelConfig in protobuf text format (see client/examples/); for "
          "create, the flags below given too override its fields");
// --- Data in and out ----------------------------------------------------------------
ABSL_FLAG(std::string, input, "",
          "the input file (- for stdin); observe and predict also take files as arguments");
ABSL_FLAG(std::string, format, "csv",
          "the input's format: csv (observe and replay: x1,...,xd,y; predict: x1,...,xd), "
          "libsvm (y idx:val ..., 1-based; predict ignores y), or, for replay, series (one "
          "value per line, time-delay embedded)");
ABSL_FLAG(int64_t, embedding, 0,
          "replay, series only: the number of lags L (inputs [s_n, ..., s_{n-L+1}], "
          "target s_{n+1}); 0 takes the config's dim");
ABSL_FLAG(std::string, output, "",
          "replay, predict: where to write one prediction per input row (%.17g; - for "
          "stdout); snapshot: the snapshot file");
ABSL_FLAG(std::string, x, "",
          "one input, v1,v2,...,vd or 1-based sparse idx:val,idx:val (repeat the flag for "
          "more)");
ABSL_FLAG(int64_t, batch_size, 256,
          "observe: examples per stream message; predict and label: inputs or labels per call "
          "(there, 1000 unless given)");
ABSL_FLAG(int64_t, batches_per_stream, 8,
          "messages per stream: each stream's examples are acknowledged together (and their "
          "losses reach the progress line and the curve); with --curve or --plot, 1 unless "
          "given");
ABSL_FLAG(int64_t, skip, 0, "leave out the first N rows (resumes a failed observe)");
ABSL_FLAG(int64_t, limit, 0, "use at most N rows, after --skip (0: all)");
ABSL_FLAG(
    bool, progress, false,
    "report progress on stderr (default: when stderr is a terminal; --noprogress: never)");
ABSL_FLAG(std::string, curve, "",
          "write the prequential learning curve to FILE.csv (step, loss, "
          "cumulative_average_loss, expansion_size); observe: the expansion size is the one "
          "acknowledged with the row's stream, i.e. after its last row");
ABSL_FLAG(std::string, plot, "",
          "draw the learning curve with gnuplot to FILE.png or FILE.svg (Debian package "
          "gnuplot-nox)");
ABSL_FLAG(std::string, gnuplot, "gnuplot", "the gnuplot program for --plot");
ABSL_FLAG(bool, local, false,
          "replay: run the model in this process (the only mode replay has; accepted for "
          "clarity)");
ABSL_FLAG(std::string, service, "",
          "health: the service to check (empty: the server as a whole; "
          "okl.v1.OnlineKernelLearning; okl.v1.OnlineKernelLearning/writes: whether its "
          "store takes writes)");

// --- Delayed feedback (predict --remember, label) ------------------------------------
ABSL_FLAG(bool, remember, false,
          "predict: the server keeps each input and its prediction under an event id until "
          "okl label labels it or the wait ends; each output line is event_id,prediction "
          "(write role)");
ABSL_FLAG(std::string, event_ids, "",
          "predict --remember: the event ids, comma-separated, one per input in order "
          "(1-128 of [A-Za-z0-9._:-], new to the model; default: the server makes them)");
ABSL_FLAG(double, wait_seconds, 0,
          "predict --remember: how long a label is awaited (0: the server's default, 10 "
          "minutes; at most its --max_label_wait)");
ABSL_FLAG(std::string, default_label, "",
          "predict --remember: the label learned for an event whose wait ends without one "
          "(empty: none, such an event is dropped)");

// --- Bearer tokens (token new) ------------------------------------------------------
ABSL_FLAG(std::string, role, "",
          "token new: read (Predict, GetModel, ListModels, Snapshot), write (read, plus "
          "Observe, CreateModel, DeleteModel, Restore) or admin (write on every tenant); "
          "required");
ABSL_FLAG(std::string, from, "", "move: the source server, host:port (required)");
ABSL_FLAG(std::string, to, "", "move: the target server, host:port (required)");
ABSL_FLAG(std::string, route_map, "",
          "move: the router's per-tenant override map (nginx map lines \"TENANT\" ADDR;), "
          "where the tenant is pinned to its new replica (required)");
ABSL_FLAG(std::string, route_to, "",
          "move: the target's address as the router reaches it (default: --to)");
ABSL_FLAG(std::string, route_reload, "",
          "move: a shell command that makes the router reread --route_map (e.g. "
          "\"nginx -s reload -c FILE\")");
ABSL_FLAG(bool, lift, false, "fence: lift the tenant's fence instead of raising it");
ABSL_FLAG(bool, delete_models, false,
          "fence: then delete the tenant's models on this server (after a move; the fence "
          "stays)");
ABSL_FLAG(std::string, tenants, "",
          "token new: the tenants the token may use, comma-separated (acme,globex), or * for "
          "every tenant; required for read and write; admin takes * or nothing");

namespace {

using okl::cli::CommandLine;

constexpr absl::string_view kModelFlags[] = {"tenant", "model"};

struct Command {
  absl::string_view name;
  absl::string_view summary;   // one line for `okl help`
  absl::string_view synopsis;  // the usage line(s)
  absl::string_view description;
  std::vector<absl::string_view> flags;  // its own, beyond the connection and model flags
  bool remote = true;                    // takes the connection flags
  bool model_ref = true;                 // takes --tenant and --model
  int (*run)(const CommandLine& line, const struct Command& command) = nullptr;

  std::vector<absl::string_view> AllFlags() const {
    std::vector<absl::string_view> all = flags;
    if (model_ref) all.insert(all.end(), std::begin(kModelFlags), std::end(kModelFlags));
    if (remote)
      all.insert(all.end(), std::begin(okl::cli::kConnectionFlags),
                 std::end(okl::cli::kConnectionFlags));
    return all;
  }
};

const std::vector<Command>& Commands();

std::string GeneralUsage() {
  std::string text =
      "usage: okl <command> [flags]\n"
      "\n"
      "okl talks to okl_server (--server, default $OKL_SERVER or 127.0.0.1:50051) about the\n"
      "models of a tenant (--tenant, default $OKL_TENANT or \"default\"), runs NORMA\n"
      "offline (replay), and makes the server's bearer tokens (token new).\n"
      "\n"
      "commands:\n";
  for (const Command& command : Commands()) {
    absl::StrAppend(&text, "  ", command.name, std::string(10 - command.name.size(), ' '),
                    command.summary, "\n");
  }
  absl::StrAppend(&text,
                  "\n"
                  "okl help COMMAND (or okl COMMAND --help) shows a command's flags;\n"
                  "okl --version the version.\n"
                  "Exit codes: 0 success; 1 the command failed, with one line on stderr,\n"
                  "\"okl: CODE: message\"; 2 a usage error.\n");
  return text;
}

std::string CommandHelp(const Command& command) {
  std::string text =
      absl::StrCat("usage: ", command.synopsis, "\n\n", command.description, "\n");
  if (!command.flags.empty()) {
    absl::StrAppend(&text, "\nflags:\n", okl::cli::FormatFlagHelp(command.flags));
  }
  if (command.model_ref) {
    absl::StrAppend(&text, "\nmodel flags:\n", okl::cli::FormatFlagHelp(kModelFlags));
  }
  if (command.remote) {
    absl::StrAppend(&text, "\nconnection flags:\n",
                    okl::cli::FormatFlagHelp(okl::cli::kConnectionFlags));
  }
  return text;
}

// One line, whatever the message holds.
std::string OneLine(absl::string_view message) {
  return absl::StrReplaceAll(message, {{"\r\n", "; "}, {"\n", "; "}});
}

// A failed command: "okl: CODE: message", exit 1.
int Fail(const absl::Status& status) {
  std::cerr << "okl: " << absl::StatusCodeToString(status.code()) << ": "
            << OneLine(status.message()) << "\n";
  return 1;
}

int UsageError(absl::string_view message) {
  std::cerr << "okl: " << OneLine(message) << "\n" << GeneralUsage();
  return 2;
}

int CommandUsageError(const Command& command, absl::string_view message) {
  std::cerr << "okl: " << OneLine(message) << "\nusage: " << command.synopsis << "\n"
            << "(okl help " << command.name << " lists its flags)\n";
  return 2;
}

// --- Flags to options ---------------------------------------------------------------

std::string TenantFromFlags(const CommandLine& line) {
  return line.Given("tenant") ? absl::GetFlag(FLAGS_tenant)
                              : okl::cli::EnvOr("OKL_TENANT", "default");
}

// The connection and output every remote command starts with; a usage error or exit
// code in *exit_code when it returns empty.
struct Session {
  std::string server;
  okl::cli::Output output;
  std::optional<okl::Client> client;
  okl::ModelId id;
};

std::optional<Session> StartSession(const CommandLine& line, const Command& command,
                                    int* exit_code,
                                    absl::Duration default_timeout = absl::Seconds(30)) {
  if (!line.args.empty() && command.name != "observe" && command.name != "predict" &&
      command.name != "label") {
    *exit_code = CommandUsageError(
        command, absl::StrCat(command.name, " takes no arguments, got '", line.args[0], "'"));
    return std::nullopt;
  }
  Session session;
  session.output = okl::cli::OutputFromFlags();
  if (command.model_ref) {
    session.id.tenant = TenantFromFlags(line);
    session.id.model = absl::GetFlag(FLAGS_model);
    if (session.id.model.empty()) {
      *exit_code = CommandUsageError(command, absl::StrCat(command.name, " needs --model"));
      return std::nullopt;
    }
  }
  absl::StatusOr<okl::cli::ConnectionOptions> connection =
      okl::cli::ConnectionFromFlags(line, default_timeout);
  if (!connection.ok()) {
    *exit_code = CommandUsageError(command, connection.status().message());
    return std::nullopt;
  }
  session.server = connection->server;
  absl::StatusOr<okl::Client> client = okl::cli::Connect(*connection);
  if (!client.ok()) {
    *exit_code = Fail(client.status());
    return std::nullopt;
  }
  session.client.emplace(*std::move(client));
  return session;
}

int Finish(const absl::Status& status) { return status.ok() ? 0 : Fail(status); }

// --- Commands -----------------------------------------------------------------------

int RunCreate(const CommandLine& line, const Command& command) {
  int exit_code = 0;
  std::optional<Session> session = StartSession(line, command, &exit_code);
  if (!session.has_value()) return exit_code;
  okl::ModelConfig config;
  const std::string config_path = absl::GetFlag(FLAGS_config);
  if (!config_path.empty()) {
    absl::StatusOr<std::string> text = okl::ReadFile(config_path);
    if (!text.ok()) return Fail(text.status());
    absl::StatusOr<okl::ModelConfig> parsed = okl::ParseModelConfigText(*text, config_path);
    if (!parsed.ok()) return Fail(parsed.status());
    config = *parsed;
  } else if (!line.Given("dim")) {
    return CommandUsageError(command, "create needs --dim (or a --config file)");
  }
  if (absl::Status applied = okl::cli::ApplyConfigFlags(line, config_path.empty(), &config);
      !applied.ok()) {
    return CommandUsageError(command, applied.message());
  }
  if (absl::Status valid = okl::ValidateConfig(config); !valid.ok()) {
    return CommandUsageError(command, valid.message());
  }
  return Finish(okl::cli::RunCreate(*session->client, session->id, config, session->output));
}

int RunGet(const CommandLine& line, const Command& command) {
  int exit_code = 0;
  std::optional<Session> session = StartSession(line, command, &exit_code);
  if (!session.has_value()) return exit_code;
  return Finish(okl::cli::RunGet(*session->client, session->id, session->output));
}

int RunList(const CommandLine& line, const Command& command) {
  int exit_code = 0;
  std::optional<Session> session = StartSession(line, command, &exit_code);
  if (!session.has_value()) return exit_code;
  const std::string tenant =
      line.Given("tenant") ? absl::GetFlag(FLAGS_tenant) : okl::cli::EnvOr("OKL_TENANT", "");
  return Finish(okl::cli::RunList(*session->client, tenant, session->output));
}

int RunDelete(const CommandLine& line, const Command& command) {
  int exit_code = 0;
  std::optional<Session> session = StartSession(line, command, &exit_code);
  if (!session.has_value()) return exit_code;
  return Finish(okl::cli::RunDelete(*session->client, session->id, session->output));
}

// The input files of observe and predict: --input, then the arguments.
std::vector<std::string> InputFiles(const CommandLine& line) {
  std::vector<std::string> inputs;
  if (line.Given("input")) inputs.push_back(absl::GetFlag(FLAGS_input));
  inputs.insert(inputs.end(), line.args.begin(), line.args.end());
  return inputs;
}

// The curve flags; a usage error message if they are wrong.
absl::StatusOr<okl::cli::CurveOptions> CurveFromFlags() {
  okl::cli::CurveOptions curve;
  curve.csv_path = absl::GetFlag(FLAGS_curve);
  curve.plot_path = absl::GetFlag(FLAGS_plot);
  curve.gnuplot = absl::GetFlag(FLAGS_gnuplot);
  if (!curve.plot_path.empty()) {
    absl::StatusOr<okl::cli::PlotFormat> format = okl::cli::PlotFormatFor(curve.plot_path);
    if (!format.ok()) return format.status();
  }
  return curve;
}

absl::StatusOr<std::optional<uint64_t>> LimitFromFlags() {
  const int64_t limit = absl::GetFlag(FLAGS_limit);
  if (limit < 0) return absl::InvalidArgumentError("--limit must not be negative");
  if (limit == 0) return std::optional<uint64_t>();
  return std::optional<uint64_t>(static_cast<uint64_t>(limit));
}

int RunObserve(const CommandLine& line, const Command& command) {
  okl::cli::ObserveOptions options;
  options.inputs = InputFiles(line);
  if (options.inputs.empty()) {
    return CommandUsageError(command, "observe needs an input: FILE... or - for stdin");
  }
  absl::StatusOr<okl::cli::RowFormat> format =
      okl::cli::ParseRowFormat(absl::GetFlag(FLAGS_format));
  if (!format.ok()) return CommandUsageError(command, format.status().message());
  options.format = *format;
  const int64_t batch_size = absl::GetFlag(FLAGS_batch_size);
  // A curve's expansion sizes come with the acknowledgements: one per message, unless
  // the flag asks for coarser ones.
  const bool curve_wanted =
      !absl::GetFlag(FLAGS_curve).empty() || !absl::GetFlag(FLAGS_plot).empty();
  const int64_t batches = line.Given("batches_per_stream") || !curve_wanted
                              ? absl::GetFlag(FLAGS_batches_per_stream)
                              : 1;
  if (batch_size <= 0) return CommandUsageError(command, "--batch_size must be positive");
  if (batches <= 0) return CommandUsageError(command, "--batches_per_stream must be positive");
  options.batch_size = static_cast<size_t>(batch_size);
  options.batches_per_stream = static_cast<size_t>(batches);
  if (absl::GetFlag(FLAGS_skip) < 0) {
    return CommandUsageError(command, "--skip must not be negative");
  }
  options.skip = static_cast<uint64_t>(absl::GetFlag(FLAGS_skip));
  absl::StatusOr<std::optional<uint64_t>> limit = LimitFromFlags();
  if (!limit.ok()) return CommandUsageError(command, limit.status().message());
  options.limit = *limit;
  absl::StatusOr<okl::cli::CurveOptions> curve = CurveFromFlags();
  if (!curve.ok()) return CommandUsageError(command, curve.status().message());
  options.curve = *curve;
  options.progress_terminal = ::isatty(STDERR_FILENO) == 1;
  options.progress =
      line.Given("progress") ? absl::GetFlag(FLAGS_progress) : options.progress_terminal;

  int exit_code = 0;
  std::optional<Session> session = StartSession(line, command, &exit_code);
  if (!session.has_value()) return exit_code;
  return Finish(okl::cli::RunObserve(*session->client, session->id, options, session->output));
}

int RunPredict(const CommandLine& line, const Command& command) {
  okl::cli::PredictOptions options;
  options.inputs = InputFiles(line);
  options.vectors = line.Values("x");
  if (options.inputs.empty() && options.vectors.empty()) {
    return CommandUsageError(command,
                             "predict needs inputs: --x=v1,...,vd, or FILE... (- for stdin)");
  }
  absl::StatusOr<okl::cli::RowFormat> format =
      okl::cli::ParseRowFormat(absl::GetFlag(FLAGS_format));
  if (!format.ok()) return CommandUsageError(command, format.status().message());
  options.format = *format;
  options.output_path = absl::GetFlag(FLAGS_output);
  const int64_t batch_size = line.Given("batch_size") ? absl::GetFlag(FLAGS_batch_size) : 1000;
  if (batch_size <= 0) return CommandUsageError(command, "--batch_size must be positive");
  options.batch_size = static_cast<size_t>(batch_size);
  absl::StatusOr<std::optional<uint64_t>> limit = LimitFromFlags();
  if (!limit.ok()) return CommandUsageError(command, limit.status().message());
  options.limit = *limit;
  if (absl::GetFlag(FLAGS_remember)) {
    okl::RememberOptions remember;
    if (const std::string ids = absl::GetFlag(FLAGS_event_ids); !ids.empty()) {
      remember.event_ids = absl::StrSplit(ids, ',');
    }
    const double wait = absl::GetFlag(FLAGS_wait_seconds);
    if (!(wait >= 0)) {
      return CommandUsageError(command, "--wait_seconds must not be negative");
    }
    remember.wait = absl::Seconds(wait);
    if (const std::string text = absl::GetFlag(FLAGS_default_label); !text.empty()) {
      double label = 0;
      if (!absl::SimpleAtod(text, &label) || !std::isfinite(label)) {
        return CommandUsageError(
            command, absl::StrCat("--default_label must be a finite number, got '", text, "'"));
      }
      remember.default_label = label;
    }
    options.remember = std::move(remember);
  } else {
    for (absl::string_view flag : {"event_ids", "wait_seconds", "default_label"}) {
      if (line.Given(flag)) {
        return CommandUsageError(command, absl::StrCat("--", flag, " needs --remember"));
      }
    }
  }

  int exit_code = 0;
  std::optional<Session> session = StartSession(line, command, &exit_code);
  if (!session.has_value()) return exit_code;
  return Finish(okl::cli::RunPredict(*session->client, session->id, options, session->output));
}

int RunLabel(const CommandLine& line, const Command& command) {
  okl::cli::LabelOptions options;
  options.inputs = InputFiles(line);
  if (options.inputs.empty()) {
    return CommandUsageError(command, "label needs an input: FILE... or - for stdin");
  }
  const int64_t batch_size = line.Given("batch_size") ? absl::GetFlag(FLAGS_batch_size) : 1000;
  if (batch_size <= 0) return CommandUsageError(command, "--batch_size must be positive");
  options.batch_size = static_cast<size_t>(batch_size);

  int exit_code = 0;
  std::optional<Session> session = StartSession(line, command, &exit_code);
  if (!session.has_value()) return exit_code;
  return Finish(okl::cli::RunLabel(*session->client, session->id, options, session->output));
}

int RunSnapshot(const CommandLine& line, const Command& command) {
  const std::string path = absl::GetFlag(FLAGS_output);
  if (path.empty()) return CommandUsageError(command, "snapshot needs --output FILE");
  int exit_code = 0;
  std::optional<Session> session = StartSession(line, command, &exit_code);
  if (!session.has_value()) return exit_code;
  return Finish(okl::cli::RunSnapshot(*session->client, session->id, path, session->output));
}

int RunRestore(const CommandLine& line, const Command& command) {
  const std::string path = absl::GetFlag(FLAGS_input);
  if (path.empty()) return CommandUsageError(command, "restore needs --input FILE");
  int exit_code = 0;
  std::optional<Session> session = StartSession(line, command, &exit_code);
  if (!session.has_value()) return exit_code;
  return Finish(okl::cli::RunRestore(*session->client, session->id, path, session->output));
}

int RunMove(const CommandLine& line, const Command& command) {
  if (!line.args.empty()) {
    return CommandUsageError(command, absl::StrCat("move takes no arguments, got '",
                                                   line.args[0], "'"));
  }
  const std::string from = absl::GetFlag(FLAGS_from);
  const std::string to = absl::GetFlag(FLAGS_to);
  okl::cli::MoveOptions options;
  options.route_map = absl::GetFlag(FLAGS_route_map);
  options.route_reload = absl::GetFlag(FLAGS_route_reload);
  options.route_to = line.Given("route_to") ? absl::GetFlag(FLAGS_route_to) : to;
  options.from = from;
  if (from.empty() || to.empty() || options.route_map.empty() || !line.Given("tenant")) {
    return CommandUsageError(command, "move needs --tenant, --from, --to and --route_map");
  }
  if (from == to) return CommandUsageError(command, "--from and --to are the same server");
  if (line.Given("server")) {
    return CommandUsageError(command, "move takes --from and --to, not --server");
  }
  absl::StatusOr<okl::cli::ConnectionOptions> connection =
      okl::cli::ConnectionFromFlags(line, absl::Minutes(10));
  if (!connection.ok()) return CommandUsageError(command, connection.status().message());
  connection->server = from;
  absl::StatusOr<okl::Client> source = okl::cli::Connect(*connection);
  if (!source.ok()) return Fail(source.status());
  connection->server = to;
  absl::StatusOr<okl::Client> target = okl::cli::Connect(*connection);
  if (!target.ok()) return Fail(target.status());
  return Finish(okl::cli::RunMove(*source, *target, TenantFromFlags(line), options,
                                  okl::cli::OutputFromFlags()));
}

int RunFence(const CommandLine& line, const Command& command) {
  if (!line.Given("tenant")) return CommandUsageError(command, "fence needs --tenant");
  const bool lift = absl::GetFlag(FLAGS_lift);
  const bool delete_models = absl::GetFlag(FLAGS_delete_models);
  if (lift && delete_models) {
    return CommandUsageError(command, "--lift and --delete_models exclude each other");
  }
  int exit_code = 0;
  std::optional<Session> session = StartSession(line, command, &exit_code, absl::Minutes(10));
  if (!session.has_value()) return exit_code;
  return Finish(okl::cli::RunFence(*session->client, TenantFromFlags(line), !lift,
                                   delete_models, session->output));
}

int RunHealth(const CommandLine& line, const Command& command) {
  int exit_code = 0;
  std::optional<Session> session = StartSession(line, command, &exit_code, absl::Seconds(5));
  if (!session.has_value()) return exit_code;
  const std::string service = absl::GetFlag(FLAGS_service);
  absl::StatusOr<bool> serving =
      okl::cli::RunHealth(*session->client, service, session->output);
  if (!serving.ok()) return Fail(serving.status());
  if (!*serving) {
    std::cerr << "okl: NOT_SERVING: " << session->server << " reports "
              << (service.empty() ? std::string("the server")
                                  : absl::StrCat("\"", service, "\""))
              << " not serving (starting or draining)\n";
  }
  return *serving ? 0 : 1;
}

int RunReplay(const CommandLine& line, const Command& command) {
  if (!line.args.empty()) {
    return CommandUsageError(
        command,
        absl::StrCat("replay takes no positional arguments, got '", line.args[0], "'"));
  }
  okl::ReplayOptions options;
  options.config_path = absl::GetFlag(FLAGS_config);
  options.input_path = absl::GetFlag(FLAGS_input);
  options.output_path = absl::GetFlag(FLAGS_output);
  if (options.config_path.empty()) return CommandUsageError(command, "replay needs --config");
  if (options.input_path.empty()) return CommandUsageError(command, "replay needs --input");
  if (options.output_path.empty()) return CommandUsageError(command, "replay needs --output");
  if (line.Given("local") && !absl::GetFlag(FLAGS_local)) {
    return CommandUsageError(command,
                             "replay runs only in this process: --local is its one mode");
  }
  absl::StatusOr<okl::InputFormat> format = okl::ParseInputFormat(absl::GetFlag(FLAGS_format));
  if (!format.ok()) return CommandUsageError(command, format.status().message());
  options.format = *format;
  const int64_t embedding = absl::GetFlag(FLAGS_embedding);
  if (embedding < 0) return CommandUsageError(command, "--embedding must not be negative");
  options.embedding = static_cast<size_t>(embedding);
  absl::StatusOr<okl::cli::CurveOptions> curve = CurveFromFlags();
  if (!curve.ok()) return CommandUsageError(command, curve.status().message());
  const okl::cli::Output output = okl::cli::OutputFromFlags();
  if (output.json && options.output_path == "-") {
    return CommandUsageError(command, "--json and --output=- would share stdout");
  }
  const absl::Status status = okl::cli::RunReplay(options, *curve, output);
  if (!status.ok()) {
    // As before the other commands existed: the message alone.
    std::cerr << "okl: " << OneLine(status.message()) << "\n";
    return 1;
  }
  return 0;
}

int RunToken(const CommandLine& line, const Command& command) {
  if (line.args.empty()) {
    return CommandUsageError(command, "token needs a subcommand: okl token new --role=ROLE");
  }
  if (line.args[0] != "new") {
    return CommandUsageError(
        command, absl::StrCat("unknown token subcommand '", line.args[0], "': expected new"));
  }
  if (line.args.size() > 1) {
    return CommandUsageError(
        command, absl::StrCat("token new takes no more arguments, got '", line.args[1], "'"));
  }
  if (!line.Given("role")) {
    return CommandUsageError(command, "token new needs --role=read, write or admin");
  }
  absl::StatusOr<okl::Role> role = okl::ParseRole(absl::GetFlag(FLAGS_role));
  if (!role.ok()) {
    return CommandUsageError(command, absl::StrCat("--role: ", role.status().message()));
  }
  absl::StatusOr<okl::Grant> grant = okl::ParseGrant(*role, absl::GetFlag(FLAGS_tenants));
  if (!grant.ok()) {
    return CommandUsageError(command, absl::StrCat("--tenants: ", grant.status().message()));
  }
  return Finish(okl::cli::RunTokenNew(*grant, okl::cli::OutputFromFlags()));
}

// A model's life on the server: create, get, list and delete.
std::vector<Command> ModelCommands() {
  return {
      {.name = "create",
       .summary = "create a model (config as flags, or --config FILE)",
       .synopsis =
           "okl create --model=NAME (--dim=D [config flags] | --config=FILE [overrides])",
       .description =
           "Creates a model on the server and prints its configuration. The configuration is\n"
           "given by flags (the defaults are core's, with a budget of 1000 terms) or as an\n"
           "okl.v1.ModelConfig in protobuf text format (--config; flags given as well "
           "override\n"
           "its fields). ALREADY_EXISTS if the model exists.",
       .flags =
           [] {
             std::vector<absl::string_view> flags = {"config"};
             flags.insert(flags.end(), std::begin(okl::cli::kConfigFlags),
                          std::end(okl::cli::kConfigFlags));
             return flags;
           }(),
       .run = RunCreate},
      {.name = "get",
       .summary = "show a model's configuration and statistics",
       .synopsis = "okl get --model=NAME",
       .description =
           "Prints the model's statistics and its configuration (in the text format\n"
           "that create --config reads).",
       .flags = {},
       .run = RunGet},
      {.name = "list",
       .summary = "list the models (of --tenant, or of every tenant)",
       .synopsis = "okl list [--tenant=T]",
       .description = "Lists the models of --tenant (or $OKL_TENANT), or of every tenant the\n"
                      "caller may see, ordered by tenant and name: each one's configuration,\n"
                      "steps, terms, mean loss, and events awaiting labels (PENDING).",
       .flags = {"tenant"},
       .model_ref = false,
       .run = RunList},
      {.name = "delete",
       .summary = "delete a model and its stored state",
       .synopsis = "okl delete --model=NAME",
       .description = "Deletes the model and everything stored about it. NOT_FOUND if absent.",
       .flags = {},
       .run = RunDelete},
  };
}

// Data through a model: labelled rows in, predictions out, and labels for remembered
// predictions.
std::vector<Command> DataCommands() {
  return {
      {.name = "observe",
       .summary = "stream labelled rows (CSV or LIBSVM, files or stdin) into a model",
       .synopsis = "okl observe --model=NAME [--format=csv|libsvm] FILE... (- for stdin)",
       .description =
           "Streams labelled rows into the model, in order, in batches (--batch_size rows a\n"
           "message, --batches_per_stream messages a stream; each stream is acknowledged once\n"
           "applied and durable). Shows progress on a terminal (rows, rows/s, running average\n"
           "loss, ETA when the input's size is known) and prints a summary: examples, time,\n"
           "rate, average loss, and mistakes for hinge and logistic models. --curve and "
           "--plot\n"
           "record the prequential learning curve. If the stream fails, the message says how\n"
           "many rows were applied and the --skip that resumes after them.",
       .flags = {"input", "format", "batch_size", "batches_per_stream", "skip", "limit",
                 "progress", "curve", "plot", "gnuplot"},
       .run = RunObserve},
      {.name = "predict",
       .summary = "predict inputs (--x or a file) and write one prediction per line",
       .synopsis =
           "okl predict --model=NAME (--x=v1,...,vd ... | [--format=csv|libsvm] FILE...) "
           "[--output=FILE]\n"
           "       [--remember [--event_ids=ID,...] [--wait_seconds=S] [--default_label=Y]]",
       .description =
           "Writes the model's prediction of each input, one per line (%.17g, which "
           "round-trips),\n"
           "to --output or stdout. Inputs come from --x flags (dense v1,...,vd, or sparse\n"
           "1-based idx:val,...), then from files: CSV rows of the d inputs (no label), or\n"
           "LIBSVM rows (a leading label is ignored). For a krls_tracker model each line\n"
           "is the prediction and its predictive variance, separated by a space (--json:\n"
           "a \"variances\" array beside \"predictions\").\n"
           "--remember (delayed feedback, write role): the server also keeps each input and\n"
           "its prediction under an event id, until okl label labels it (learning from it\n"
           "once) or its wait ends (then --default_label is learned, or it is dropped). Each\n"
           "line is then CSV, event_id,prediction (a tracker's: event_id,prediction,variance;\n"
           "--json: an \"event_ids\" array). --event_ids, one per input, are counted before\n"
           "anything is sent.",
       .flags = {"input", "format", "x", "output", "batch_size", "limit", "remember",
                 "event_ids", "wait_seconds", "default_label"},
       .run = RunPredict},
      {.name = "label",
       .summary = "label remembered predictions (event_id,y lines, files or stdin)",
       .synopsis = "okl label --model=NAME [--batch_size=N] FILE... (- for stdin)",
       .description =
           "Labels events remembered by okl predict --remember: lines event_id,y (blank lines\n"
           "and # comments skipped), sent in order, --batch_size (1000) a call. Each label\n"
           "applied is learned as an Observe of the remembered input. Prints per label\n"
           "event_id,outcome: applied; duplicate (the event was labelled before: the first\n"
           "label wins); unknown (no such event, or its wait ended). A summary goes to\n"
           "stderr: the counts of each and the model's steps (--json: one object with\n"
           "them). Duplicates and unknowns are not errors: exit 0. A malformed line fails\n"
           "(exit 1) before its batch is sent; rerunning is safe.",
       .flags = {"input", "batch_size"},
       .run = RunLabel},
  };
}

// A model's whole state to a file and back.
std::vector<Command> SnapshotCommands() {
  return {
      {.name = "snapshot",
       .summary = "save a model's whole state to a file",
       .synopsis = "okl snapshot --model=NAME --output=FILE",
       .description =
           "Writes the model's complete state to FILE (atomically: FILE holds either\n"
           "its old contents or the whole snapshot). restore reads it back.",
       .flags = {"output"},
       .run = RunSnapshot},
      {.name = "restore",
       .summary = "install a model from a snapshot file",
       .synopsis = "okl restore --model=NAME --input=FILE",
       .description =
           "Installs the snapshot in FILE as the model (replacing one of that name); it\n"
           "continues bit-identically to the model the snapshot was taken from. DATA_LOSS for\n"
           "a file that is not an intact snapshot.",
       .flags = {"input"},
       .run = RunRestore},
  };
}

// Operating the servers: move a tenant to another replica, fence its writes, check health.
std::vector<Command> OperationsCommands() {
  return {
      {.name = "move",
       .summary = "move a tenant's models to another replica, losing nothing acknowledged",
       .synopsis = "okl move --tenant=T --from=HOST:PORT --to=HOST:PORT --route_map=FILE "
                   "[--route_reload=CMD] [--route_to=ADDR]",
       .description =
           "Moves every model of the tenant from one okl_server (--from) to another (--to)\n"
           "behind a router that reads a per-tenant override map (deploy/cluster's nginx):\n"
           "fences the tenant's writes on the source (they are refused, applying nothing,\n"
           "and okl's client library retries them), copies each model (Snapshot, Restore),\n"
           "pins the tenant to the target in --route_map and runs --route_reload, then\n"
           "deletes the models on the source, whose fence stays up. A failure before the\n"
           "map names the target rolls back: the tenant stays on the source, whole. If the\n"
           "reload fails, nothing is rolled back (the router may have switched): the target\n"
           "holds the tenant, the source stays fenced with its copies; reload by hand, then\n"
           "okl fence --delete_models on the source. Needs an admin token (--token) on both\n"
           "servers. --timeout (default 10m) bounds each call.\n"
           "deploy/cluster/local_cluster.sh move TENANT REPLICA runs it for a local cluster.",
       .flags = {"tenant", "from", "to", "route_map", "route_reload", "route_to"},
       .model_ref = false,
       .run = RunMove},
      {.name = "fence",
       .summary = "fence a tenant's writes on one server, or lift the fence (admin)",
       .synopsis = "okl fence --tenant=T [--lift | --delete_models] [--server=HOST:PORT]",
       .description =
           "The steps of a move by hand (okl move does them for a router with an override\n"
           "map). Without flags: fences the tenant's writes on --server (each is refused\n"
           "with UNAVAILABLE, nothing applied, and okl's client library retries it) and\n"
           "returns once the writes already running have finished; prints the tenant's\n"
           "models there. --delete_models: the same, then deletes those models; the fence\n"
           "stays, so calls still reaching this server are refused, not NOT_FOUND. --lift:\n"
           "lifts the fence (writes are served again). Needs an admin token. A restart lifts\n"
           "every fence.",
       .flags = {"tenant", "lift", "delete_models"},
       .model_ref = false,
       .run = RunFence},
      {.name = "health",
       .summary = "exit 0 if the server is SERVING, 1 otherwise (quiet on success)",
       .synopsis = "okl health [--server=HOST:PORT] [--timeout=5s] [--service=NAME]",
       .description =
           "Checks grpc.health.v1.Health: exit 0 if SERVING (printing nothing, unless "
           "--json),\n"
           "1 if not serving or unreachable (one line on stderr). Made for container\n"
           "HEALTHCHECKs.",
       .flags = {"service"},
       .model_ref = false,
       .run = RunHealth},
  };
}

// The commands that run in this process and need no server.
std::vector<Command> LocalCommands() {
  return {
      {.name = "replay",
       .summary = "run NORMA over a data file in this process (offline, prequential)",
       .synopsis =
           "okl replay [--local] --config=FILE --input=FILE [--format=csv|libsvm|series] "
           "[--embedding=L] --output=FILE",
       .description =
           "Streams a data file through a model built in this process from --config: each row\n"
           "is predicted, then learned. Writes one prediction per row to --output (- for\n"
           "stdout) and a summary to stderr (or JSON to stdout with --json). No server is\n"
           "involved; --local says so explicitly.",
       .flags = {"local", "config", "input", "format", "embedding", "output", "curve", "plot",
                 "gnuplot", "json"},
       .remote = false,
       .model_ref = false,
       .run = RunReplay},
      {.name = "token",
       .summary = "make a bearer token and its line for the server's tokens file",
       .synopsis = "okl token new --role=read|write|admin [--tenants=T1,T2,...|*]",
       .description =
           "Makes a fresh random token (okl_ and 43 base64url characters: 256 bits) and\n"
           "prints it on the first line; the second line is what to append to okl_server's\n"
           "--auth_tokens_file (the token's SHA-256, role and tenants; the server re-reads\n"
           "the file on SIGHUP). The token is shown only this once and is not stored: hand\n"
           "it to its user (okl --token or $OKL_TOKEN), and keep it out of logs. No server\n"
           "is involved.",
       .flags = {"role", "tenants", "json"},
       .remote = false,
       .model_ref = false,
       .run = RunToken},
  };
}

// Every command, in the order `okl help` lists them.
const std::vector<Command>& Commands() {
  static const std::vector<Command>* const commands = [] {
    auto* all = new std::vector<Command>();
    for (const std::vector<Command>& group :
         {ModelCommands(), DataCommands(), SnapshotCommands(), OperationsCommands(),
          LocalCommands()}) {
      all->insert(all->end(), group.begin(), group.end());
    }
    return all;
  }();
  return *commands;
}

const Command* FindCommand(absl::string_view name) {
  for (const Command& command : Commands()) {
    if (command.name == name) return &command;
  }
  return nullptr;
}

// gRPC's own log lines (a failed TLS handshake, say) would break the one-line error
// promise; the error that matters reaches the caller as a status anyway.
void QuietGrpcLog(gpr_log_func_args* /*args*/) {}

}  // namespace

int main(int argc, char** argv) {
  // GRPC_VERBOSITY, when set, asks for gRPC's log: then it stays.
  if (std::getenv("GRPC_VERBOSITY") == nullptr) gpr_set_log_function(QuietGrpcLog);
  absl::StatusOr<CommandLine> line = okl::cli::SplitCommandLine(argc, argv);
  if (!line.ok()) return UsageError(line.status().message());
  if (line->version || line->command == "version") {
    std::cout << "okl " << OKL_VERSION << " (" << OKL_BUILD_TYPE << ")\n";
    return 0;
  }
  if (line->command.empty()) {
    if (line->help) {
      std::cout << GeneralUsage();
      return 0;
    }
    std::cerr << GeneralUsage();
    return 2;
  }
  if (line->command == "help") {
    if (line->args.empty()) {
      std::cout << GeneralUsage();
      return 0;
    }
    const Command* command = FindCommand(line->args[0]);
    if (command == nullptr) {
      return UsageError(absl::StrCat("unknown command '", line->args[0], "'"));
    }
    std::cout << CommandHelp(*command);
    return 0;
  }
  const Command* command = FindCommand(line->command);
  if (command == nullptr) {
    return UsageError(absl::StrCat("unknown command '", line->command, "'"));
  }
  if (line->help) {
    std::cout << CommandHelp(*command);
    return 0;
  }
  const std::vector<absl::string_view> allowed = command->AllFlags();
  if (absl::Status applied = okl::cli::ApplyFlags(*line, allowed, command->name);
      !applied.ok()) {
    return CommandUsageError(*command, applied.message());
  }
  return command->run(*line, *command);
}
