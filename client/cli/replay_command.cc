// client/cli/replay_command.cc
//
// `okl replay`. Without a learning curve it is okl::Replay, unchanged. With one, the
// same steps run here so that each step's loss and expansion size can be recorded: the
// config and data are read by the same functions, the model is the same core Model fed
// the same rows in the same order, so predictions and summary are identical.

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cli/commands.h"
#include "client/io/json_writer.h"
#include "client/io/data_reader.h"
#include "client/cli/learning_curve.h"
#include "core/model.h"
#include "proto/convert.h"

namespace okl::cli {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The --output of replay, opened before the work so that a bad path fails fast, and
// removed again if the replay fails (as okl::Replay does).
class PredictionFile {
 public:
  static absl::StatusOr<std::unique_ptr<PredictionFile>> Open(const std::string& path) {
    if (path == "-") return std::unique_ptr<PredictionFile>(new PredictionFile(path, stdout));
    std::FILE* file = std::fopen(path.c_str(), "w");
    if (file == nullptr) {
      const int error = errno;
      return absl::ErrnoToStatus(error, absl::StrCat("cannot create ", path));
    }
    return std::unique_ptr<PredictionFile>(new PredictionFile(path, file));
  }
  ~PredictionFile() {
    if (file_ != nullptr && file_ != stdout) {
      std::fclose(file_);
      std::remove(path_.c_str());
    }
  }

  // Writes the values, "%.17g" a line, and closes the file.
  absl::Status WriteAndClose(const std::vector<double>& values) {
    std::string text;
    text.reserve(values.size() * 24);
    char line[40];
    for (const double value : values) {
      const int n = std::snprintf(line, sizeof(line), "%.17g\n", value);
      text.append(line, static_cast<size_t>(n));
    }
    errno = 0;
    bool ok = std::fwrite(text.data(), 1, text.size(), file_) == text.size();
    std::FILE* file = std::exchange(file_, nullptr);
    ok = (file == stdout ? std::fflush(file) == 0 : std::fclose(file) == 0) && ok;
    if (!ok) {
      return absl::ErrnoToStatus(errno != 0 ? errno : EIO,
                                 absl::StrCat("cannot write ", path_));
    }
    return absl::OkStatus();
  }

 private:
  PredictionFile(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}

  std::string path_;
  std::FILE* file_;
};

// okl::Replay with a curve row per step.
absl::StatusOr<ReplaySummary> ReplayWithCurve(const ReplayOptions& options,
                                              CurveWriter* curve) {
  if (options.embedding != 0 && options.format != InputFormat::kSeries) {
    return absl::InvalidArgumentError("--embedding applies only to --format=series");
  }
  absl::StatusOr<std::string> config_text = ReadTextFile(options.config_path);
  if (!config_text.ok()) return config_text.status();
  absl::StatusOr<ModelConfig> config = ParseModelConfigText(*config_text, options.config_path);
  if (!config.ok()) return config.status();
  if (options.format == InputFormat::kSeries && options.embedding != 0 &&
      options.embedding != config->dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--embedding=", options.embedding, " differs from the config's dim ", config->dim, " (",
        options.config_path, "): an embedding of L lags makes L inputs"));
  }
  std::unique_ptr<PredictionFile> output;
  if (!options.output_path.empty()) {
    absl::StatusOr<std::unique_ptr<PredictionFile>> opened =
        PredictionFile::Open(options.output_path);
    if (!opened.ok()) return opened.status();
    output = std::move(*opened);
  }

  const Clock::time_point read_start = Clock::now();
  absl::StatusOr<Dataset> data = ReadReplayInput(options, config->dim);
  if (!data.ok()) return data.status();
  const double read_seconds = SecondsSince(read_start);
  const auto in_input = [&options](const absl::Status& status) {
    return absl::Status(status.code(),
                        absl::StrCat(options.input_path, ": ", status.message()));
  };
  if (data->dim != config->dim) {
    return in_input(absl::InvalidArgumentError(absl::StrCat(
        "the data has dimension ", data->dim, " but the config's dim is ", config->dim)));
  }
  absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(*config);
  if (!model.ok()) return in_input(model.status());

  std::vector<double> predictions;
  predictions.reserve(data->size());
  const Clock::time_point start = Clock::now();
  for (size_t i = 0; i < data->size(); ++i) {
    absl::StatusOr<Observation> observation = (*model)->Observe(data->row(i), data->y[i]);
    if (!observation.ok()) {
      return in_input(
          absl::Status(observation.status().code(),
                       absl::StrCat("example ", i + 1, ": ", observation.status().message())));
    }
    predictions.push_back(observation->prediction);
    if (absl::Status added = curve->Add(i + 1, observation->loss, (*model)->expansion_size());
        !added.ok()) {
      return added;
    }
  }
  ReplaySummary summary;
  summary.elapsed_seconds = SecondsSince(start);
  summary.read_seconds = read_seconds;
  summary.config = *config;
  summary.stats = (*model)->stats();
  summary.examples = data->size();
  summary.mean_loss = data->size() > 0
                          ? summary.stats.cumulative_loss / static_cast<double>(data->size())
                          : 0.0;
  summary.counts_mistakes = IsClassificationLoss(config->loss.type);
  summary.examples_per_second =
      summary.elapsed_seconds > 0 ? static_cast<double>(data->size()) / summary.elapsed_seconds
                                  : 0.0;
  if (output != nullptr) {
    if (absl::Status written = output->WriteAndClose(predictions); !written.ok())
      return written;
  }
  return summary;
}

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
    summary = ReplayWithCurve(options, curve->get());
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
