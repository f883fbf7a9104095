// client/cli/args.cc

#include "client/cli/args.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace okl::cli {
namespace {

constexpr size_t kHelpWidth = 92;

bool IsHelpName(absl::string_view name) {
  return name == "help" || name == "h" || name == "helpfull" || name == "helpshort";
}

// The registered bool flag `name`, or null.
const absl::CommandLineFlag* FindBoolFlag(absl::string_view name) {
  const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  return flag != nullptr && flag->IsOfType<bool>() ? flag : nullptr;
}

// Appends `text` wrapped at kHelpWidth, each line prefixed by `indent`.
void AppendWrapped(absl::string_view text, absl::string_view indent, std::string* out) {
  for (absl::string_view paragraph : absl::StrSplit(text, '\n')) {
    std::string line;
    for (absl::string_view word : absl::StrSplit(paragraph, ' ', absl::SkipEmpty())) {
      if (!line.empty() && indent.size() + line.size() + 1 + word.size() > kHelpWidth) {
        absl::StrAppend(out, indent, line, "\n");
        line.clear();
      }
      absl::StrAppend(&line, line.empty() ? "" : " ", word);
    }
    absl::StrAppend(out, indent, line, "\n");
  }
}

}  // namespace

bool CommandLine::Given(absl::string_view name) const {
  return std::any_of(flags.begin(), flags.end(),
                     [name](const FlagArgument& flag) { return flag.name == name; });
}

std::vector<std::string> CommandLine::Values(absl::string_view name) const {
  std::vector<std::string> values;
  for (const FlagArgument& flag : flags) {
    if (flag.name == name) values.push_back(flag.value.value_or("true"));
  }
  return values;
}

absl::StatusOr<CommandLine> SplitCommandLine(int argc, char** argv) {
  CommandLine line;
  bool flags_ended = false;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (flags_ended || arg == "-" || !absl::StartsWith(arg, "-")) {
      if (line.command.empty() && !flags_ended) {
        line.command = std::string(arg);
      } else {
        line.args.emplace_back(arg);
      }
      continue;
    }
    if (arg == "--") {
      flags_ended = true;
      continue;
    }
    absl::string_view body = arg.substr(absl::StartsWith(arg, "--") ? 2 : 1);
    const size_t equals = body.find('=');
    FlagArgument flag;
    flag.name = std::string(body.substr(0, equals));
    if (equals != absl::string_view::npos) flag.value = std::string(body.substr(equals + 1));
    if (IsHelpName(flag.name)) {
      line.help = true;
      continue;
    }
    if (flag.name == "version") {
      line.version = true;
      continue;
    }
    if (flag.name.empty())
      return absl::InvalidArgumentError(absl::StrCat("bad flag '", arg, "'"));
    const absl::CommandLineFlag* registered = absl::FindCommandLineFlag(flag.name);
    const absl::CommandLineFlag* negated =
        registered == nullptr && absl::StartsWith(flag.name, "no")
            ? FindBoolFlag(flag.name.substr(2))
            : nullptr;
    if (negated != nullptr) {
      // --noname for a bool flag `name`.
      if (flag.value.has_value()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", flag.name, " takes no value, got '", arg, "'"));
      }
      flag.name = flag.name.substr(2);
      flag.value = "false";
    } else if (registered != nullptr && !flag.value.has_value() &&
               !registered->IsOfType<bool>()) {
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError(absl::StrCat("--", flag.name, " needs a value"));
      }
      flag.value = std::string(argv[++i]);
    }
    // A flag registered nowhere is kept: ApplyFlags reports it once the command is known.
    line.flags.push_back(std::move(flag));
  }
  return line;
}

absl::Status ApplyFlags(const CommandLine& line, absl::Span<const absl::string_view> allowed,
                        absl::string_view command_name) {
  for (const FlagArgument& flag : line.flags) {
    absl::CommandLineFlag* registered = absl::FindCommandLineFlag(flag.name);
    if (registered == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", flag.name));
    }
    if (std::find(allowed.begin(), allowed.end(), flag.name) == allowed.end()) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag.name, " is not a flag of `okl ",
                                                     command_name, "` (okl help ", command_name,
                                                     " lists them)"));
    }
    std::string error;
    if (!registered->ParseFrom(flag.value.value_or("true"), &error)) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag.name, ": ", error));
    }
  }
  return absl::OkStatus();
}

std::string FormatFlagHelp(absl::Span<const absl::string_view> flags) {
  std::string out;
  for (absl::string_view name : flags) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr) continue;
    const std::string default_value = flag->DefaultValue();
    absl::StrAppend(&out, "  --", name);
    if (flag->IsOfType<bool>()) {
      absl::StrAppend(&out, default_value == "true" ? " (default: true)" : "");
    } else if (!default_value.empty()) {
      absl::StrAppend(&out, " (default: ", default_value, ")");
    }
    absl::StrAppend(&out, "\n");
    AppendWrapped(flag->Help(), "      ", &out);
  }
  return out;
}

}  // namespace okl::cli
