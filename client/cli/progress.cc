// client/cli/progress.cc

#include "client/cli/progress.h"

#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace okl::cli {
namespace {

// A terminal redraws often; a log gets a line now and then.
constexpr double kTerminalIntervalSeconds = 0.1;
constexpr double kLogIntervalSeconds = 5.0;

std::string FormatDuration(double seconds) {
  const int64_t total = static_cast<int64_t>(std::llround(seconds));
  const int64_t hours = total / 3600;
  const int64_t minutes = (total / 60) % 60;
  const int64_t secs = total % 60;
  if (hours > 0) return absl::StrFormat("%d:%02d:%02d", hours, minutes, secs);
  return absl::StrFormat("%d:%02d", minutes, secs);
}

}  // namespace

std::string WithThousands(uint64_t value) {
  std::string digits = absl::StrCat(value);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string FormatProgress(absl::string_view label, uint64_t rows, double elapsed_seconds,
                           std::optional<double> fraction, std::optional<double> average_loss) {
  std::string text = absl::StrCat(label, ": ", WithThousands(rows), " rows");
  if (fraction.has_value()) absl::StrAppendFormat(&text, " (%.1f%%)", 100 * *fraction);
  if (elapsed_seconds > 0) {
    absl::StrAppend(&text, "  ", WithThousands(static_cast<uint64_t>(rows / elapsed_seconds)),
                    " rows/s");
  }
  if (average_loss.has_value()) absl::StrAppendFormat(&text, "  avg loss %.4g", *average_loss);
  if (fraction.has_value() && *fraction > 0 && elapsed_seconds > 0) {
    const double left = elapsed_seconds * (1 - *fraction) / *fraction;
    absl::StrAppend(&text, "  ETA ", FormatDuration(left > 0 ? left : 0));
  }
  return text;
}

ProgressLine::ProgressLine(std::string label, std::FILE* out, bool terminal)
    : label_(std::move(label)),
      out_(out),
      terminal_(terminal),
      start_(Clock::now()),
      last_report_(start_) {}

void ProgressLine::Update(uint64_t rows, std::optional<double> fraction,
                          std::optional<double> average_loss, bool force) {
  const Clock::time_point now = Clock::now();
  const double since_last = std::chrono::duration<double>(now - last_report_).count();
  if (!force && since_last < (terminal_ ? kTerminalIntervalSeconds : kLogIntervalSeconds)) {
    return;
  }
  last_report_ = now;
  const std::string text =
      FormatProgress(label_, rows, std::chrono::duration<double>(now - start_).count(),
                     fraction, average_loss);
  if (terminal_) {
    // "\r" back to the start, "\x1b[K" erases what a longer previous line left.
    std::fprintf(out_, "\r%s\x1b[K", text.c_str());
    drawn_ = true;
  } else {
    std::fprintf(out_, "%s\n", text.c_str());
  }
  std::fflush(out_);
}

void ProgressLine::Finish() {
  if (terminal_ && drawn_) {
    std::fprintf(out_, "\r\x1b[K");
    std::fflush(out_);
    drawn_ = false;
  }
}

}  // namespace okl::cli
