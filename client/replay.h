// client/replay.h
//
// Replay streams a data file through a local model (core/model.h), prequentially: each example is
// first predicted, then learned (Model::Observe), exactly as the service would see
// it. It is the logic of `okl replay` (client/cli/ parses flags, records the learning
// curve through ReplayOptions::on_step, and prints) and of bench/okl_accuracy_bench.
//
// Thread-compatible: concurrent calls share nothing.
//
// Example:
//   okl::ReplayOptions options;
//   options.config_path = "client/examples/mg30.textproto";
//   options.input_path = "mg30.dat";
//   options.format = okl::InputFormat::kSeries;
//   options.output_path = "predictions.txt";
//   OKL_ASSIGN_OR_RETURN(okl::ReplaySummary summary, okl::Replay(options));
//   std::cerr << okl::FormatReplaySummary(summary);
#ifndef OKL_CLIENT_REPLAY_H_
#define OKL_CLIENT_REPLAY_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/io/data_reader.h"
#include "core/config.h"
#include "core/model.h"

namespace okl {

enum class InputFormat {
  kCsv,     // x_1,...,x_d,y per line (ReadCsv)
  kLibsvm,  // y idx:val ... per line (ReadLibsvm)
  kSeries,  // one value per line, time-delay embedded (ReadSeries)
};

// "csv", "libsvm" or "series"; InvalidArgument otherwise.
absl::StatusOr<InputFormat> ParseInputFormat(absl::string_view name);
absl::string_view InputFormatName(InputFormat format);

// Called after each step with its 1-based number, its observation and the model after
// it; an error stops the replay and is returned (with the input's name).
using ReplayStepObserver =
    std::function<absl::Status(uint64_t step, const Observation& observation, const Model& model)>;

struct ReplayOptions {
  // A text-format okl.v1.ModelConfig (see client/examples/). Its dim decides the input
  // dimension: a data file that disagrees is an error.
  std::string config_path;
  std::string input_path;
  InputFormat format = InputFormat::kCsv;
  // kSeries only: the number of lags L, which must equal the config's dim; 0 takes the
  // config's dim. Must be 0 for the other formats.
  size_t embedding = 0;
  // One prediction per input row, "%.17g\n" (round-trips every double); "-" is stdout;
  // empty writes none.
  std::string output_path;
  // Sees every step (a learning curve); empty: none.
  ReplayStepObserver on_step;
};

struct ReplaySummary {
  ModelConfig config;
  ModelStats stats;                  // after the last example
  uint64_t examples = 0;             // rows replayed
  double mean_loss = 0.0;            // stats.cumulative_loss / examples (0 without examples)
  bool counts_mistakes = false;      // a classification loss: stats.mistakes is meaningful
  double read_seconds = 0.0;         // reading and parsing the input file
  double elapsed_seconds = 0.0;      // the Observe loop alone
  double examples_per_second = 0.0;  // examples / elapsed_seconds
};

// Observes every row of `data` in order with a fresh model built from `config`, and
// appends each prequential prediction p_t = f_t(x_t) to `predictions` (if not null),
// calling `on_step` (if set) after each. InvalidArgument if the config is invalid,
// data.dim differs from config.dim or an example is rejected (the message names its
// 1-based row); on_step's error as it is.
absl::StatusOr<ReplaySummary> ReplayDataset(const ModelConfig& config, const Dataset& data,
                                            std::vector<double>* predictions,
                                            const ReplayStepObserver& on_step = {});

// options.input_path read in options.format for a model of dimension `dim` (a series is
// embedded with options.embedding lags, or dim if 0).
absl::StatusOr<Dataset> ReadReplayInput(const ReplayOptions& options, uint32_t dim);

// Reads options.config_path and options.input_path, replays, and writes the predictions.
absl::StatusOr<ReplaySummary> Replay(const ReplayOptions& options);

// A multi-line, human-readable report of `summary`, for stderr.
std::string FormatReplaySummary(const ReplaySummary& summary);

}  // namespace okl

#endif  // OKL_CLIENT_REPLAY_H_
