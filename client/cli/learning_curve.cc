// client/cli/learning_curve.cc

#include "client/cli/learning_curve.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "core/runtime/file.h"

extern char** environ;

namespace okl::cli {
namespace {

// Beyond this many points per series a plot shows nothing more, only takes longer.
constexpr uint64_t kMaxPlotPoints = 20000;

void AppendNumber(double value, std::string* out) {
  char buffer[32];
  const std::to_chars_result result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  out->append(buffer, result.ptr);
}

// `text` as a single-quoted gnuplot string (a quote inside is doubled).
std::string GnuplotQuote(absl::string_view text) {
  return absl::StrCat("'", absl::StrReplaceAll(text, {{"'", "''"}}), "'");
}

std::string TempDir() {
  const char* dir = std::getenv("TMPDIR");
  return dir != nullptr && *dir != '\0' ? dir : "/tmp";
}

// A new empty file from mkstemp's `pattern` (ending in XXXXXX); its path.
absl::StatusOr<std::string> MakeTempFile(std::string pattern) {
  const int fd = ::mkstemp(pattern.data());
  if (fd < 0) {
    const int error = errno;
    return absl::ErrnoToStatus(error, absl::StrCat("cannot create ", pattern));
  }
  ::close(fd);
  return pattern;
}

// Removes its files when it goes out of scope.
class TempFiles {
 public:
  ~TempFiles() {
    for (const std::string& path : paths_) std::remove(path.c_str());
  }
  void Add(std::string path) { paths_.push_back(std::move(path)); }

 private:
  std::vector<std::string> paths_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<CurveWriter>> CurveWriter::Open(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    const int error = errno;
    return absl::ErrnoToStatus(error, absl::StrCat("cannot create ", path));
  }
  std::unique_ptr<CurveWriter> writer(new CurveWriter(path, file));
  if (std::fprintf(file, "%s\n", kCurveHeader) < 0) writer->failed_ = true;
  return writer;
}

absl::StatusOr<std::unique_ptr<CurveWriter>> CurveWriter::OpenTemporary() {
  absl::StatusOr<std::string> path = MakeTempFile(TempDir() + "/okl-curve-XXXXXX");
  if (!path.ok()) return path.status();
  absl::StatusOr<std::unique_ptr<CurveWriter>> writer = Open(*path);
  if (!writer.ok()) {
    std::remove(path->c_str());
    return writer.status();
  }
  (*writer)->temporary_ = true;
  return writer;
}

CurveWriter::~CurveWriter() {
  if (file_ != nullptr) std::fclose(file_);
  if (temporary_) std::remove(path_.c_str());
}

absl::Status CurveWriter::Add(uint64_t step, double loss, uint64_t expansion_size) {
  if (file_ == nullptr) return absl::FailedPreconditionError("the curve is closed");
  ++rows_;
  loss_sum_ += loss;
  const double average = loss_sum_ / static_cast<double>(rows_);
  for (const double value : {loss, average}) {
    if (value > 0 && (min_positive_ == 0 || value < min_positive_)) min_positive_ = value;
  }
  std::string line = absl::StrCat(step, ",");
  AppendNumber(loss, &line);
  line += ',';
  AppendNumber(average, &line);
  absl::StrAppend(&line, ",", expansion_size, "\n");
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size()) failed_ = true;
  return absl::OkStatus();
}

absl::Status CurveWriter::Close() {
  if (file_ == nullptr) return absl::OkStatus();
  errno = 0;
  const bool flushed = std::fflush(file_) == 0;
  const int error = errno;
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  if (failed_ || !flushed || !closed) {
    return absl::ErrnoToStatus(error != 0 ? error : EIO, absl::StrCat("cannot write ", path_));
  }
  return absl::OkStatus();
}

absl::StatusOr<PlotFormat> PlotFormatFor(absl::string_view path) {
  const std::string lower = absl::AsciiStrToLower(path);
  if (absl::EndsWith(lower, ".png")) return PlotFormat::kPng;
  if (absl::EndsWith(lower, ".svg")) return PlotFormat::kSvg;
  return absl::InvalidArgumentError(
      absl::StrCat("--plot ", path, ": the file name must end in .png or .svg"));
}

std::string GnuplotScript(const CurveWriter& curve, const std::string& output,
                          PlotFormat format, absl::string_view title) {
  const uint64_t every =
      std::max<uint64_t>(1, (curve.rows() + kMaxPlotPoints - 1) / kMaxPlotPoints);
  const bool log_axis = curve.min_positive_value() > 0;
  std::string script;
  absl::StrAppend(&script,
                  format == PlotFormat::kPng
                      ? "set terminal pngcairo size 1000,600 noenhanced font ',10'\n"
                      : "set terminal svg size 1000,600 dynamic noenhanced font 'sans,10'\n");
  absl::StrAppend(&script, "set output ", GnuplotQuote(output), "\n");
  absl::StrAppend(&script, "set datafile separator ','\n");
  absl::StrAppend(&script, "set title ", GnuplotQuote(title), "\n");
  absl::StrAppend(&script, "set xlabel 'step'\n");
  if (log_axis) {
    absl::StrAppend(&script, "set logscale y\nset ylabel 'loss (log scale)'\n");
  } else {
    absl::StrAppend(&script, "set ylabel 'loss'\n");
  }
  absl::StrAppend(&script,
                  "set y2label 'expansion size'\n"
                  "set ytics nomirror\n"
                  "set y2tics\n"
                  "set y2range [0:*]\n"
                  "set autoscale xfix\n"
                  "set grid\n"
                  "set key outside bottom center horizontal\n");
  const std::string data = absl::StrCat(GnuplotQuote(curve.path()), " skip 1 every ", every);
  // A zero loss (a satisfied margin) has no place on a log axis: it is left out.
  const std::string loss_column = log_axis ? "($2 > 0 ? $2 : NaN)" : "2";
  const std::string average_column = log_axis ? "($3 > 0 ? $3 : NaN)" : "3";
  absl::StrAppend(&script, "plot ", data, " using 1:", loss_column,
                  " with points pt 7 ps 0.25 lc rgb '#9db8d9' title 'loss', \\\n");
  absl::StrAppend(&script, "     ", data, " using 1:", average_column,
                  " with lines lw 2 lc rgb '#1f4e9c' title 'cumulative average loss', \\\n");
  absl::StrAppend(&script, "     ", data,
                  " using 1:4 axes x1y2 with steps lw 1.5 lc rgb '#c0392b' "
                  "title 'expansion size'\n");
  return script;
}

absl::Status PlotCurve(const CurveWriter& curve, const std::string& output,
                       absl::string_view title, const std::string& gnuplot) {
  absl::StatusOr<PlotFormat> format = PlotFormatFor(output);
  if (!format.ok()) return format.status();
  if (curve.rows() == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("no rows to plot in ", output, ": the stream was empty"));
  }
  TempFiles temp;
  absl::StatusOr<std::string> script_path = MakeTempFile(TempDir() + "/okl-plot-XXXXXX");
  if (!script_path.ok()) return script_path.status();
  temp.Add(*script_path);
  absl::StatusOr<std::string> log_path = MakeTempFile(TempDir() + "/okl-plot-log-XXXXXX");
  if (!log_path.ok()) return log_path.status();
  temp.Add(*log_path);
  {
    std::ofstream script(*script_path, std::ios::binary);
    script << GnuplotScript(curve, output, *format, title);
    if (!script.good()) return absl::InternalError("cannot write the gnuplot script");
  }

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path->c_str(), O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::string program = gnuplot;
  std::string script_arg = *script_path;
  char* argv[] = {program.data(), script_arg.data(), nullptr};
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, program.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot run ", gnuplot, " to draw ", output, ": ", std::strerror(spawned),
                     " (install the Debian package gnuplot-nox: apt-get install gnuplot-nox)"));
  }
  int wait_status = 0;
  while (::waitpid(pid, &wait_status, 0) < 0) {
    if (errno != EINTR) {
      return absl::InternalError(
          absl::StrCat("waiting for ", gnuplot, ": ", std::strerror(errno)));
    }
  }
  const absl::StatusOr<std::string> log = ReadFile(*log_path);
  std::string first_error;
  if (log.ok()) {
    for (absl::string_view line : absl::StrSplit(*log, '\n', absl::SkipWhitespace())) {
      first_error = std::string(absl::StripAsciiWhitespace(line));
      if (absl::StrContains(line, "rror")) break;
    }
  }
  if (!WIFEXITED(wait_status) || WEXITSTATUS(wait_status) != 0) {
    return absl::InternalError(absl::StrCat(gnuplot, " failed to draw ", output,
                                            first_error.empty() ? "" : ": ", first_error));
  }
  struct stat st;
  if (::stat(output.c_str(), &st) != 0 || st.st_size == 0) {
    return absl::InternalError(absl::StrCat(gnuplot, " wrote no ", output,
                                            first_error.empty() ? "" : ": ", first_error));
  }
  return absl::OkStatus();
}

}  // namespace okl::cli
