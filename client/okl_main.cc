// client/okl_main.cc
//
// The `okl` command-line tool. Subcommands:
//   okl replay --config FILE --input FILE [--format csv|libsvm|series]
//              [--embedding L] --output FILE
//   okl help
// Exit codes: 0 success, 1 a failed command, 2 a usage error.

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/replay.h"

ABSL_FLAG(std::string, config, "",
          "replay: the model, a text-format okl.v1.ModelConfig file "
          "(see client/examples/*.textproto)");
ABSL_FLAG(std::string, input, "", "replay: the data file to stream through the model");
ABSL_FLAG(std::string, format, "csv",
          "replay: the input's format: csv (x1,...,xd,y), libsvm (y idx:val ...) or "
          "series (one value per line, time-delay embedded)");
ABSL_FLAG(int64_t, embedding, 0,
          "replay, series only: the number of lags L (inputs [s_n, ..., s_{n-L+1}], "
          "target s_{n+1}); 0 takes the config's dim");
ABSL_FLAG(std::string, output, "",
          "replay: where to write one prediction per input row (%.17g); - for stdout");

namespace {

constexpr char kUsage[] =
    "usage: okl <command> [flags]\n"
    "\n"
    "commands:\n"
    "  replay  stream a data file through a local NORMA model, prequentially\n"
    "          okl replay --config FILE --input FILE [--format csv|libsvm|series]\n"
    "                     [--embedding L] --output FILE\n"
    "          prints one prediction per row to --output and a summary on stderr\n"
    "  help    print this message\n"
    "\n"
    "okl --help lists every flag.\n";

int Fail(const absl::Status& status) {
  std::cerr << "okl: " << status.message() << "\n";
  return 1;
}

int UsageError(absl::string_view message) {
  std::cerr << "okl: " << message << "\n" << kUsage;
  return 2;
}

int RunReplay(const std::vector<char*>& args) {
  if (args.size() > 2) {
    return UsageError(
        absl::StrCat("replay takes no positional arguments, got '", args[2], "'"));
  }
  okl::ReplayOptions options;
  options.config_path = absl::GetFlag(FLAGS_config);
  options.input_path = absl::GetFlag(FLAGS_input);
  options.output_path = absl::GetFlag(FLAGS_output);
  if (options.config_path.empty()) return UsageError("replay needs --config");
  if (options.input_path.empty()) return UsageError("replay needs --input");
  if (options.output_path.empty()) return UsageError("replay needs --output");
  absl::StatusOr<okl::InputFormat> format =
      okl::ParseInputFormat(absl::GetFlag(FLAGS_format));
  if (!format.ok()) return UsageError(format.status().message());
  options.format = *format;
  const int64_t embedding = absl::GetFlag(FLAGS_embedding);
  if (embedding < 0) return UsageError("--embedding must not be negative");
  options.embedding = static_cast<size_t>(embedding);

  absl::StatusOr<okl::ReplaySummary> summary = okl::Replay(options);
  if (!summary.ok()) return Fail(summary.status());
  std::cerr << "okl replay: " << options.input_path << " ("
            << okl::InputFormatName(options.format) << ") through " << options.config_path
            << "\n"
            << okl::FormatReplaySummary(*summary);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() < 2) {
    std::cerr << kUsage;
    return 2;
  }
  const absl::string_view command = args[1];
  if (command == "help") {
    std::cout << kUsage;
    return 0;
  }
  if (command == "replay") return RunReplay(args);
  return UsageError(absl::StrCat("unknown command '", command, "'"));
}
