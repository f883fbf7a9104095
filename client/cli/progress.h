// client/cli/progress.h
//
// ProgressLine reports a long-running stream on stderr: rows so far, rows per second,
// the running average loss and, when the total is known, the percentage done and the
// time left (ETA). On a terminal it redraws one line in place ("\r", at most 10 times a
// second) and clears it when done; elsewhere (a log file, with `--progress`) it writes a
// whole line every few seconds, so that logs stay readable.
//
// Not thread-safe: one thread calls Update and Finish.
//
// Example:
//   okl::cli::ProgressLine progress("observe", stderr, /*terminal=*/isatty(2));
//   while (...) {
//     progress.Update(reader->rows(), fraction_done, average_loss);
//   }
//   progress.Finish();
#ifndef OKL_CLIENT_CLI_PROGRESS_H_
#define OKL_CLIENT_CLI_PROGRESS_H_

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace okl::cli {

// One progress report as text, without line ending: e.g.
//   "observe: 12,288 rows (37.7%)  40,960 rows/s  avg loss 0.4123  ETA 0:01"
// `fraction` (in [0, 1]) and `average_loss` may be absent; the ETA is shown only with a
// fraction above 0 and some time elapsed.
std::string FormatProgress(absl::string_view label, uint64_t rows, double elapsed_seconds,
                           std::optional<double> fraction, std::optional<double> average_loss);

// "1,234,567": thousands separated, for people.
std::string WithThousands(uint64_t value);

class ProgressLine {
 public:
  using Clock = std::chrono::steady_clock;

  // Reports to `out` (not owned). `terminal` chooses in-place redrawing.
  ProgressLine(std::string label, std::FILE* out, bool terminal);

  // Reports if the last report is old enough (or `force`); cheap otherwise.
  void Update(uint64_t rows, std::optional<double> fraction, std::optional<double> average_loss,
              bool force = false);
  // Clears a terminal line so the summary can follow; a no-op elsewhere.
  void Finish();

 private:
  const std::string label_;
  std::FILE* const out_;
  const bool terminal_;
  const Clock::time_point start_;
  Clock::time_point last_report_;
  bool drawn_ = false;  // a terminal line is showing
};

}  // namespace okl::cli

#endif  // OKL_CLIENT_CLI_PROGRESS_H_
