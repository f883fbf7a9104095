// client/cli/replay_command.cc
//
// `okl replay`: okl::Replay (client/replay.h), with a learning curve recorded through its
// per-step observer when --curve or --plot asks for one, and the summary printed.

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cli/commands.h"
#include "client/cli/learning_curve.h"
#include "client/io/json_writer.h"
#include "core/model.h"

namespace okl::cli {
namespace {

std::string ReplaySummaryJson(const ReplayOptions& options, const ReplaySummary& summary,
                              const CurveOptions& curve) {
  JsonObject json;
  json.AddString("input", options.input_path)
      .AddString("format", InputFormatName(options.format))
      .AddString("config", options.config_path)
      .AddUint("examples", summary.examples)
      .AddUint("steps", summary.stats.steps)
      .AddDouble("cumulative_loss", summary.stats.cumulative_loss)
      .AddDouble("mean_loss", summary.mean_loss);
  if (summary.counts_mistakes) json.AddUint("mistakes", summary.stats.mistakes);
  json.AddUint("expansion_size", summary.stats.expansion_size)
      .AddUint("terms_removed", summary.stats.terms_removed);
  if (summary.stats.truncation_error_bound.has_value()) {
    json.AddDouble("truncation_error_bound", *summary.stats.truncation_error_bound);
  }
  json.AddDouble("read_seconds", summary.read_seconds)
      .AddDouble("seconds", summary.elapsed_seconds)
      .AddDouble("examples_per_second", summary.examples_per_second);
  if (!curve.csv_path.empty()) json.AddString("curve", curve.csv_path);
  if (!curve.plot_path.empty()) json.AddString("plot", curve.plot_path);
  return json.str();
}

}  // namespace

absl::Status RunReplay(const ReplayOptions& options, const CurveOptions& curve_options,
                       const Output& output) {
  absl::StatusOr<ReplaySummary> summary;
  if (!curve_options.wanted()) {
    summary = Replay(options);
    if (!summary.ok()) return summary.status();
  } else {
    absl::StatusOr<std::unique_ptr<CurveWriter>> curve =
        curve_options.csv_path.empty() ? CurveWriter::OpenTemporary()
                                       : CurveWriter::Open(curve_options.csv_path);
    if (!curve.ok()) return curve.status();
    ReplayOptions with_curve = options;
    with_curve.on_step = [writer = curve->get()](uint64_t step, const Observation& observation,
                                                 const Model& model) {
      return writer->Add(step, observation.loss, model.expansion_size());
    };
    summary = Replay(with_curve);
    if (!summary.ok()) return summary.status();
    if (absl::Status closed = (*curve)->Close(); !closed.ok()) return closed;
    if (!curve_options.plot_path.empty()) {
      const std::string title =
          absl::StrCat("okl replay: ", options.input_path, " through ", options.config_path,
                       " (", summary->examples, " steps)");
      if (absl::Status plotted =
              PlotCurve(**curve, curve_options.plot_path, title, curve_options.gnuplot);
          !plotted.ok()) {
        return plotted;
      }
    }
  }
  if (output.json) {
    std::fprintf(output.out, "%s\n",
                 ReplaySummaryJson(options, *summary, curve_options).c_str());
  } else {
    std::fprintf(output.err, "okl replay: %s (%s) through %s\n%s", options.input_path.c_str(),
                 std::string(InputFormatName(options.format)).c_str(),
                 options.config_path.c_str(), FormatReplaySummary(*summary).c_str());
  }
  return absl::OkStatus();
}

}  // namespace okl::cli
