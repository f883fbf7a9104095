// client/cli/learning_curve.h
//
// The prequential learning curve of a stream, for people to look at: one CSV row per
// example with the columns
//   step                     the model's step count after the example (1, 2, ... for a
//                            new model)
//   loss                     loss(y_t, p_t) of the prediction made before learning it
//   cumulative_average_loss  the mean of `loss` over this curve's rows so far
//   expansion_size           the stored terms after the example (`okl observe`: after the
//                            acknowledged batch that holds it, see there)
// written as rows arrive (a long stream never sits in memory), and its plot: PlotCurve runs
// gnuplot (Debian package gnuplot-nox) on a generated script, loss and average on a log
// y axis, expansion size on the second y axis, to a PNG or SVG file.
//
// Not thread-safe.
//
// Example:
//   OKL_ASSIGN_OR_RETURN(std::unique_ptr<okl::cli::CurveWriter> curve,
//                        okl::cli::CurveWriter::Open("curve.csv"));
//   for (...) OKL_RETURN_IF_ERROR(curve->Add(step, loss, expansion_size));
//   OKL_RETURN_IF_ERROR(curve->Close());
//   OKL_RETURN_IF_ERROR(okl::cli::PlotCurve(*curve, "curve.png", "a9a, hinge loss"));
#ifndef OKL_CLIENT_CLI_LEARNING_CURVE_H_
#define OKL_CLIENT_CLI_LEARNING_CURVE_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace okl::cli {

inline constexpr char kCurveHeader[] = "step,loss,cumulative_average_loss,expansion_size";

class CurveWriter {
 public:
  // Creates (truncates) `path` and writes the header.
  static absl::StatusOr<std::unique_ptr<CurveWriter>> Open(const std::string& path);
  // The same in a new file under $TMPDIR (or /tmp), removed when the writer is
  // destroyed: a curve that is only plotted.
  static absl::StatusOr<std::unique_ptr<CurveWriter>> OpenTemporary();
  ~CurveWriter();
  CurveWriter(const CurveWriter&) = delete;
  CurveWriter& operator=(const CurveWriter&) = delete;

  // Appends one row; numbers in their shortest round-trip form.
  absl::Status Add(uint64_t step, double loss, uint64_t expansion_size);
  // Flushes and closes the file; the error of any failed write.
  absl::Status Close();

  const std::string& path() const { return path_; }
  uint64_t rows() const { return rows_; }
  // The smallest positive loss and cumulative average written (0 if none): whether a
  // log axis has anything to show.
  double min_positive_value() const { return min_positive_; }

 private:
  CurveWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}

  std::string path_;
  std::FILE* file_;
  bool temporary_ = false;  // remove path_ on destruction
  uint64_t rows_ = 0;
  double loss_sum_ = 0;
  double min_positive_ = 0;
  bool failed_ = false;
};

enum class PlotFormat { kPng, kSvg };

// kPng for a path ending in .png, kSvg for .svg (case-insensitive); InvalidArgument else.
absl::StatusOr<PlotFormat> PlotFormatFor(absl::string_view path);

// The gnuplot script that renders the closed curve `curve` to `output`. Plots at most
// ~20,000 points per series (every k-th row of a longer curve).
std::string GnuplotScript(const CurveWriter& curve, const std::string& output,
                          PlotFormat format, absl::string_view title);

// Renders the closed curve to `output` with `gnuplot` (a program name looked up on PATH,
// or a path). FailedPrecondition "cannot run gnuplot ..." naming the Debian package if it
// is not installed; Internal with gnuplot's first error line if it fails.
absl::Status PlotCurve(const CurveWriter& curve, const std::string& output,
                       absl::string_view title, const std::string& gnuplot = "gnuplot");

}  // namespace okl::cli

#endif  // OKL_CLIENT_CLI_LEARNING_CURVE_H_
