// client/cli/args.h
//
// Command lines of the form `okl <command> [flags] [arguments]` over Abseil's flag
// registry. The flags stay ordinary ABSL_FLAGs, defined beside main(); what this adds to
// absl::ParseCommandLine is what a tool with subcommands needs:
//   - each command accepts only its own flags: a flag of another command is a usage error,
//     not silently ignored;
//   - errors come back as a Status instead of exiting (absl exits 1; usage errors exit 2);
//   - a flag may be given several times, and the command can read every value (`--x`);
//   - which flags were given is known, so a command can tell "unset" from "the default";
//   - per-command help is rendered from the flags' own help text and defaults.
//
// Accepted forms: --name=value, --name value (not for bool flags), --name and --noname
// (bool flags), a single leading dash instead of two, and `--` to end the flags. The
// first argument that is not a flag is the command, so flags may come before it; the
// arguments after it are positional ("-" alone is positional: stdin). --help, -h and
// --helpfull ask for help, and --version for the version, instead of being flags.
//
// Not thread-safe: ApplyFlags sets process-wide flags. Call from main() before threads.
//
// Example:
//   OKL_ASSIGN_OR_RETURN(okl::cli::CommandLine line, okl::cli::SplitCommandLine(argc, argv));
//   OKL_RETURN_IF_ERROR(okl::cli::ApplyFlags(line, {"server", "model", "x"}));
//   for (const std::string& x : line.Values("x")) { ... }  // every --x, in order
//   if (line.Given("server")) { ... }
#ifndef OKL_CLIENT_CLI_ARGS_H_
#define OKL_CLIENT_CLI_ARGS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace okl::cli {

// One flag as written: its name without dashes (and without a "no" prefix of a bool
// flag, which becomes the value "false") and its value, absent for a bare bool flag.
struct FlagArgument {
  std::string name;
  std::optional<std::string> value;
};

struct CommandLine {
  std::string command;              // empty if none was given
  std::vector<FlagArgument> flags;  // in command-line order
  std::vector<std::string> args;    // positional arguments after the command
  bool help = false;                // --help, -h or --helpfull was given
  bool version = false;             // --version was given

  // Whether the flag `name` was given (in any form).
  bool Given(absl::string_view name) const;
  // Every value given to the flag `name`, in order ("true" for a bare bool flag).
  std::vector<std::string> Values(absl::string_view name) const;
};

// Splits argv (argv[0] is the program) into command, flags and positional arguments.
// Looks flags up in the registry only to know whether `--name value` takes the next
// argument (an unknown flag never does: ApplyFlags reports it). InvalidArgument for a
// registered value flag at the end without its value, or a value given to --noname.
absl::StatusOr<CommandLine> SplitCommandLine(int argc, char** argv);

// Sets every flag of `line`, in order (a later value wins), after checking that each is
// registered and one of `allowed`. InvalidArgument naming the flag for an unknown one,
// one `command_name` does not take, or a value that does not parse ("--timeout: ..."
// with Abseil's reason).
absl::Status ApplyFlags(const CommandLine& line, absl::Span<const absl::string_view> allowed,
                        absl::string_view command_name);

// The help of `flags`, one entry each: "  --name (default: value)\n      help\n", the
// help text wrapped at 92 columns. Flags not in the registry are skipped.
std::string FormatFlagHelp(absl::Span<const absl::string_view> flags);

}  // namespace okl::cli

#endif  // OKL_CLIENT_CLI_ARGS_H_
