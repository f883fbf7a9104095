// client/replay.cc

#include "client/replay.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/create_model.h"
#include "core/runtime/file.h"
#include "core/status_macros.h"
#include "proto/config_text.h"
#include "proto/convert.h"

namespace okl {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The --output file, opened before the replay so that a bad path fails fast.
class PredictionWriter {
 public:
  static absl::StatusOr<PredictionWriter> Open(const std::string& path) {
    if (path == "-") return PredictionWriter(path, stdout);
    std::FILE* file = std::fopen(path.c_str(), "w");
    if (file == nullptr) {
      const int error = errno;
      return absl::ErrnoToStatus(error, absl::StrCat("cannot create ", path));
    }
    return PredictionWriter(path, file);
  }

  PredictionWriter(PredictionWriter&& other) noexcept
      : path_(std::move(other.path_)), file_(std::exchange(other.file_, nullptr)) {}
  PredictionWriter& operator=(PredictionWriter&& other) noexcept {
    Discard();
    path_ = std::move(other.path_);
    file_ = std::exchange(other.file_, nullptr);
    return *this;
  }
  ~PredictionWriter() { Discard(); }

  // Writes the values, one "%.17g" a line, and closes the file.
  absl::Status WriteAndClose(const std::vector<double>& values) {
    // One buffer and one write: fprintf per line would dominate a fast replay.
    std::string text;
    text.reserve(values.size() * 24);
    char line[40];
    for (double value : values) {
      const int n = std::snprintf(line, sizeof(line), "%.17g\n", value);
      text.append(line, static_cast<size_t>(n));
    }
    errno = 0;
    bool ok = std::fwrite(text.data(), 1, text.size(), file_) == text.size();
    int error = errno;
    std::FILE* file = std::exchange(file_, nullptr);
    const bool closed = file == stdout ? std::fflush(file) == 0 : std::fclose(file) == 0;
    if (ok && !closed) error = errno;
    ok = ok && closed;
    if (!ok) return absl::ErrnoToStatus(error, absl::StrCat("cannot write ", path_));
    return absl::OkStatus();
  }

 private:
  PredictionWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}

  // A replay that failed leaves no output file behind, rather than an empty one.
  void Discard() {
    if (file_ == nullptr || file_ == stdout) return;
    std::fclose(file_);
    std::remove(path_.c_str());
    file_ = nullptr;
  }

  std::string path_;
  std::FILE* file_;
};

}  // namespace

absl::StatusOr<Dataset> ReadReplayInput(const ReplayOptions& options, uint32_t dim) {
  switch (options.format) {
    case InputFormat::kCsv:
      return ReadCsv(options.input_path, dim);
    case InputFormat::kLibsvm:
      return ReadLibsvm(options.input_path, dim);
    case InputFormat::kSeries:
      return ReadSeries(options.input_path, options.embedding == 0 ? dim : options.embedding);
  }
  return absl::InvalidArgumentError("unknown input format");
}

absl::StatusOr<InputFormat> ParseInputFormat(absl::string_view name) {
  if (name == "csv") return InputFormat::kCsv;
  if (name == "libsvm") return InputFormat::kLibsvm;
  if (name == "series") return InputFormat::kSeries;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown input format '", name, "': expected csv, libsvm or series"));
}

absl::string_view InputFormatName(InputFormat format) {
  switch (format) {
    case InputFormat::kCsv:
      return "csv";
    case InputFormat::kLibsvm:
      return "libsvm";
    case InputFormat::kSeries:
      return "series";
  }
  return "unknown";
}

absl::StatusOr<ReplaySummary> ReplayDataset(const ModelConfig& config, const Dataset& data,
                                            std::vector<double>* predictions,
                                            const ReplayStepObserver& on_step) {
  if (data.dim != config.dim) {
    return absl::InvalidArgumentError(absl::StrCat("the data has dimension ", data.dim,
                                                   " but the config's dim is ", config.dim));
  }
  OKL_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, CreateModel(config));
  if (predictions != nullptr) predictions->reserve(predictions->size() + data.size());

  const Clock::time_point start = Clock::now();
  for (size_t i = 0; i < data.size(); ++i) {
    absl::StatusOr<Observation> observation = model->Observe(data.row(i), data.y[i]);
    if (!observation.ok()) {
      return absl::Status(
          observation.status().code(),
          absl::StrCat("example ", i + 1, ": ", observation.status().message()));
    }
    if (predictions != nullptr) predictions->push_back(observation->prediction);
    if (on_step) OKL_RETURN_IF_ERROR(on_step(i + 1, *observation, *model));
  }
  ReplaySummary summary;
  summary.elapsed_seconds = SecondsSince(start);
  summary.config = config;
  summary.stats = model->stats();
  summary.examples = data.size();
  summary.mean_loss =
      data.size() > 0 ? summary.stats.cumulative_loss / static_cast<double>(data.size()) : 0.0;
  summary.counts_mistakes = IsClassificationLoss(config.loss.type);
  summary.examples_per_second = summary.elapsed_seconds > 0
                                    ? static_cast<double>(data.size()) / summary.elapsed_seconds
                                    : 0.0;
  return summary;
}

absl::StatusOr<ReplaySummary> Replay(const ReplayOptions& options) {
  if (options.embedding != 0 && options.format != InputFormat::kSeries) {
    return absl::InvalidArgumentError("--embedding applies only to --format=series");
  }
  OKL_ASSIGN_OR_RETURN(std::string config_text, ReadFile(options.config_path));
  OKL_ASSIGN_OR_RETURN(ModelConfig config,
                       ParseModelConfigText(config_text, options.config_path));
  if (options.format == InputFormat::kSeries && options.embedding != 0 &&
      options.embedding != config.dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--embedding=", options.embedding, " differs from the config's dim ", config.dim, " (",
        options.config_path, "): an embedding of L lags makes L inputs"));
  }

  std::optional<PredictionWriter> writer;
  if (!options.output_path.empty()) {
    OKL_ASSIGN_OR_RETURN(writer, PredictionWriter::Open(options.output_path));
  }

  const Clock::time_point read_start = Clock::now();
  OKL_ASSIGN_OR_RETURN(Dataset data, ReadReplayInput(options, config.dim));
  const double read_seconds = SecondsSince(read_start);

  std::vector<double> predictions;
  absl::StatusOr<ReplaySummary> summary =
      ReplayDataset(config, data, writer.has_value() ? &predictions : nullptr, options.on_step);
  if (!summary.ok()) {
    return absl::Status(summary.status().code(),
                        absl::StrCat(options.input_path, ": ", summary.status().message()));
  }
  summary->read_seconds = read_seconds;
  if (writer.has_value()) OKL_RETURN_IF_ERROR(writer->WriteAndClose(predictions));
  return summary;
}

std::string FormatReplaySummary(const ReplaySummary& summary) {
  const ModelStats& stats = summary.stats;
  std::string text;
  absl::StrAppendFormat(&text, "steps            %d\n", stats.steps);
  absl::StrAppendFormat(&text, "cumulative loss  %.6g\n", stats.cumulative_loss);
  absl::StrAppendFormat(&text, "mean loss        %.6g\n", summary.mean_loss);
  if (summary.counts_mistakes) {
    const double rate = summary.examples > 0 ? static_cast<double>(stats.mistakes) /
                                                   static_cast<double>(summary.examples)
                                             : 0.0;
    absl::StrAppendFormat(&text, "mistakes         %d (%.2f%%)\n", stats.mistakes, 100 * rate);
  }
  absl::StrAppendFormat(&text, "expansion size   %d\n", stats.expansion_size);
  absl::StrAppendFormat(&text, "terms removed    %d\n", stats.terms_removed);
  if (stats.truncation_error_bound.has_value()) {
    absl::StrAppendFormat(&text, "truncation bound %.6g\n", *stats.truncation_error_bound);
  }
  absl::StrAppendFormat(&text, "read time        %.3f s\n", summary.read_seconds);
  absl::StrAppendFormat(&text, "elapsed          %.3f s\n", summary.elapsed_seconds);
  absl::StrAppendFormat(&text, "throughput       %.0f examples/s\n",
                        summary.examples_per_second);
  return text;
}

}  // namespace okl
