// bench/accuracy_bench.cc
//
// okl_accuracy_bench: okl's accuracy table, reproduced in one command. Each config (an
// okl.v1.ModelConfig in protobuf text format) makes a fresh model (okl::CreateModel) in this
// process, which learns in one pass over the data set its file name selects:
//   a9a*     one pass over data/a9a_train.txt (LIBSVM), then data/a9a_test.txt. Reports
//            the prequential accuracy (1 - mistakes / steps, a mistake being
//            sign(p_t) != y_t, p_t = 0 included), the test accuracy (the same rule on
//            PredictBatch of the final model, in the config's prediction mode; with
//            --averaged_too also the current model's), and test predictions/s.
//   mg30*    one pass over data/mg30.dat, embedded with L = the config's dim lags.
//            Reports the prequential mean squared error, mean (p_t - y_t)^2 (twice the
//            mean squared loss), and 10 log10 of it in dB: over the whole stream, and
//            over its last 1,000 steps (the steady state, the convention of KAFBOX's
//            profiler). Rank learners by the steady state: the whole-stream mean is
//            dominated by the first predictions (on lorenz the first alone, 0 against
//            34.77, adds 0.12 to it).
//   lorenz*  the same on data/lorenz.dat; santafe* on data/santafe.dat (the Santa Fe laser
//            series), seattle* on data/seattle_temps.dat (hourly temperatures, 2010).
//   spam*    as a9a, on data/spam_train.csv then data/spam_test.csv (UCI Spambase, CSV).
// Every row also has the expansion's terms and bytes (Model::MemoryBytes) at the
// end and the training examples/s: the wall time of the ObserveBatch calls (--chunk
// examples each) alone. Without --configs it runs every client/examples/*.textproto
// whose name starts with one of those. Exits 1, the error on stderr, if a file
// cannot be read or a model rejects its data (or diverges).
//
// Example:
//   cmake --build build/release --target okl_accuracy_bench
//   build/release/bench/okl_accuracy_bench                        # the shipped examples
//   build/release/bench/okl_accuracy_bench --format=markdown      # for the docs
//   build/release/bench/okl_accuracy_bench --configs=/tmp/lorenz.textproto --format=json
//   build/release/bench/okl_accuracy_bench --sizes=30,50,100,200
//       --configs=client/examples/lorenz_krls.textproto           # one row per size
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "bench/report_table.h"
#include "client/io/data_reader.h"
#include "client/io/json_writer.h"
#include "client/replay.h"
#include "core/config.h"
#include "core/create_model.h"
#include "core/model.h"
#include "core/runtime/file.h"
#include "core/status_macros.h"
#include "proto/config_text.h"
#include "proto/convert.h"

ABSL_FLAG(
    std::string, configs, "",
    "comma-separated config files (text-format okl.v1.ModelConfig); a relative path "
    "not found from the current directory is looked up in the source tree. Each "
    "file's name must start with a9a, spam, mg30, lorenz, santafe or seattle. Default: every "
    "client/examples/*.textproto whose name does");
ABSL_FLAG(std::string, data_dir, OKL_SOURCE_DIR "/data",
          "the directory holding the data sets (data/README.md)");
ABSL_FLAG(std::string, format, "table",
          "table (aligned text), markdown, or json (one object per row)");
ABSL_FLAG(bool, averaged_too, false,
          "for a classification config with averaged: true, also report the test accuracy "
          "of the current model f_{T+1}");
ABSL_FLAG(int64_t, max_rows, 0, "use at most N rows of each data file (0: all)");
ABSL_FLAG(int64_t, chunk, 256, "examples per ObserveBatch call");
ABSL_FLAG(bool, candidates_alone, false,
          "for a selection (config.select), also run each of its candidates alone on the "
          "same data (a default set's as the selection scaled them): one row each, named "
          "CONFIG#i, so the best single candidate in hindsight stands beside the selection");
ABSL_FLAG(std::string, sizes, "",
          "comma-separated model sizes: run each config once per size, with its "
          "budget.max_terms, random_features.dimension or krls_tracker.max_basis set to it "
          "(empty: as the config says)");

namespace {

using okl::Dataset;
using okl::ModelConfig;
using okl::Model;
using okl::Observation;
using Clock = std::chrono::steady_clock;
using okl::bench::Grouped;
using okl::bench::PrintTable;

enum class Task { kClassification, kRegression };
enum class Format { kLibsvm, kCsv, kSeries };

// A series' steady state: its last this many steps (fewer if it is shorter).
constexpr size_t kSteadySteps = 1000;

// The data set of every config whose file name starts with `prefix` (data/README.md).
struct DataSpec {
  absl::string_view prefix;
  Task task;
  Format format;
  absl::string_view train_file;  // the one pass
  absl::string_view test_file;   // classification only
};

constexpr DataSpec kDataSpecs[] = {
    {"a9a", Task::kClassification, Format::kLibsvm, "a9a_train.txt", "a9a_test.txt"},
    {"spam", Task::kClassification, Format::kCsv, "spam_train.csv", "spam_test.csv"},
    {"mg30", Task::kRegression, Format::kSeries, "mg30.dat", ""},
    {"lorenz", Task::kRegression, Format::kSeries, "lorenz.dat", ""},
    {"santafe", Task::kRegression, Format::kSeries, "santafe.dat", ""},
    {"seattle", Task::kRegression, Format::kSeries, "seattle_temps.dat", ""},
};
constexpr absl::string_view kDataPrefixes = "a9a, spam, mg30, lorenz, santafe or seattle";

// One config's results: a row of the table.
struct Row {
  std::string config_name;  // as given, or client/examples/NAME for the defaults
  const DataSpec* data = nullptr;
  ModelConfig config;
  size_t train_rows = 0;
  size_t test_rows = 0;
  double prequential_accuracy = 0.0;            // classification
  double test_accuracy = 0.0;                   // classification, the config's prediction mode
  std::optional<double> current_test_accuracy;  // --averaged_too on an averaged config
  double mse = 0.0;                             // regression, prequential, whole stream
  double steady_mse = 0.0;                      // the same over the last kSteadySteps
  size_t terms = 0;
  size_t model_bytes = 0;
  // A selection's: its candidates' configs and its champion at the end.
  std::vector<ModelConfig> candidates;
  uint32_t champion = 0;
  size_t serving = 0;  // the candidates the selection predicts with at the end
  double train_seconds = 0.0;
  double test_seconds = 0.0;
};

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double PerSecond(size_t count, double seconds) {
  return seconds > 0 ? static_cast<double>(count) / seconds : 0.0;
}

// `name` as a path: as given if it exists (or is absolute), else under the source tree.
absl::StatusOr<std::string> ResolveConfigPath(const std::string& name) {
  std::error_code error;
  const std::filesystem::path path(name);
  if (path.is_absolute() || std::filesystem::exists(path, error)) return name;
  const std::filesystem::path in_source = std::filesystem::path(OKL_SOURCE_DIR) / path;
  if (std::filesystem::exists(in_source, error)) return in_source.string();
  return absl::NotFoundError(absl::StrCat("config ", name,
                                          " not found (looked in the current directory and in ",
                                          OKL_SOURCE_DIR, ")"));
}

const DataSpec* DataSpecFor(const std::string& config_path) {
  const std::string file = std::filesystem::path(config_path).filename().string();
  for (const DataSpec& spec : kDataSpecs) {
    if (absl::StartsWith(file, spec.prefix)) return &spec;
  }
  return nullptr;
}

// client/examples/*.textproto with a data set, sorted by name.
absl::StatusOr<std::vector<std::string>> DefaultConfigs() {
  const std::filesystem::path dir = std::filesystem::path(OKL_SOURCE_DIR) / "client/examples";
  std::error_code error;
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string file = entry.path().filename().string();
    if (entry.path().extension() == ".textproto" && DataSpecFor(file) != nullptr) {
      names.push_back(absl::StrCat("client/examples/", file));
    }
  }
  if (error) {
    return absl::NotFoundError(
        absl::StrCat("cannot list ", dir.string(), ": ", error.message()));
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The data files, each read once per model dimension (a series is embedded with dim
// lags), keeping at most `max_rows` rows (0: all).
class DataFiles {
 public:
  DataFiles(std::string dir, size_t max_rows) : dir_(std::move(dir)), max_rows_(max_rows) {}

  absl::StatusOr<const Dataset*> Get(Format format, absl::string_view file, uint32_t dim) {
    const std::string path = (std::filesystem::path(dir_) / std::string(file)).string();
    const std::string key = absl::StrCat(path, "#", dim);
    if (auto it = cache_.find(key); it != cache_.end()) return &it->second;
    OKL_ASSIGN_OR_RETURN(Dataset data, format == Format::kLibsvm ? okl::ReadLibsvm(path, dim)
                                       : format == Format::kCsv  ? okl::ReadCsv(path, dim)
                                                                 : okl::ReadSeries(path, dim));
    if (max_rows_ > 0 && data.size() > max_rows_) {
      data.y.resize(max_rows_);
      data.x.resize(max_rows_ * data.dim);
    }
    if (data.size() == 0) return absl::InvalidArgumentError(absl::StrCat(path, ": no rows"));
    return &cache_.emplace(key, std::move(data)).first->second;
  }

 private:
  const std::string dir_;
  const size_t max_rows_;
  std::map<std::string, Dataset> cache_;
};

// One pass over `data` in chunks; returns the wall time of the ObserveBatch calls.
absl::StatusOr<double> Train(Model& model, const Dataset& data, size_t chunk,
                             std::vector<Observation>* observations) {
  observations->reserve(data.size());
  const Clock::time_point start = Clock::now();
  for (size_t begin = 0; begin < data.size(); begin += chunk) {
    const size_t n = std::min(chunk, data.size() - begin);
    absl::Status status =
        model.ObserveBatch(absl::MakeConstSpan(data.x).subspan(begin * data.dim, n * data.dim),
                           absl::MakeConstSpan(data.y).subspan(begin, n), observations);
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat("ObserveBatch of rows ", begin + 1, "-",
                                                      begin + n, ": ", status.message()));
    }
  }
  return SecondsSince(start);
}

// The fraction of `predictions` whose sign is the label's (0 is a mistake).
double Accuracy(absl::Span<const double> predictions, absl::Span<const double> labels) {
  size_t correct = 0;
  for (size_t i = 0; i < labels.size(); ++i) correct += predictions[i] * labels[i] > 0;
  return static_cast<double>(correct) / static_cast<double>(labels.size());
}

// `status` with its message prefixed by `context`.
absl::Status Prefixed(absl::string_view context, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

// `config` with its size set to `size`: the budget's max_terms, the number of random
// features, or the tracker's max_basis, whichever bounds this kind.
ModelConfig Resized(ModelConfig config, uint32_t size) {
  if (config.krls_tracker_kind()) {
    config.krls_tracker.max_basis = size;
  } else if (config.random_features.dimension > 0) {
    config.random_features.dimension = size;
  } else {
    config.budget.max_terms = size;
  }
  return config;
}

// Runs row.config on row.data's data set. Errors name the files they concern.
absl::StatusOr<Row> Evaluate(Row row, DataFiles& files, size_t chunk, bool averaged_too);

// Runs the config file `name` on its data set, at `size` if given.
absl::StatusOr<Row> RunConfig(const std::string& name, DataFiles& files, size_t chunk,
                              bool averaged_too, std::optional<uint32_t> size) {
  Row row;
  row.config_name = name;
  row.data = DataSpecFor(name);
  if (row.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": cannot tell its data set: the file name must start with ", kDataPrefixes));
  }
  OKL_ASSIGN_OR_RETURN(const std::string path, ResolveConfigPath(name));
  OKL_ASSIGN_OR_RETURN(const std::string text, okl::ReadFile(path));
  OKL_ASSIGN_OR_RETURN(row.config, okl::ParseModelConfigText(text, name));
  if (size.has_value()) {
    row.config = Resized(row.config, *size);
    OKL_RETURN_IF_ERROR(
        Prefixed(absl::StrCat(name, " at size ", *size), okl::ValidateConfig(row.config)));
  }
  return Evaluate(std::move(row), files, chunk, averaged_too);
}

absl::StatusOr<Row> Evaluate(Row row, DataFiles& files, size_t chunk, bool averaged_too) {
  const std::string& name = row.config_name;
  const Task task = row.data->task;
  absl::StatusOr<const Dataset*> train_data =
      files.Get(row.data->format, row.data->train_file, row.config.dim);
  if (!train_data.ok()) return Prefixed(name, train_data.status());
  const Dataset& train = **train_data;
  OKL_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, okl::CreateModel(row.config));

  std::vector<Observation> observations;
  absl::StatusOr<double> train_seconds = Train(*model, train, chunk, &observations);
  if (!train_seconds.ok()) {
    return Prefixed(absl::StrCat(name, " on ", row.data->train_file), train_seconds.status());
  }
  row.train_seconds = *train_seconds;
  row.train_rows = train.size();
  row.terms = model->expansion_size();
  row.model_bytes = model->MemoryBytes();
  if (row.config.select_kind()) {
    const okl::ModelStats stats = model->stats();
    for (const okl::CandidateStats& candidate : stats.candidates) {
      row.candidates.push_back(candidate.config);
      row.serving += candidate.serving;
    }
    row.champion = stats.champion;
  }

  std::vector<double> predictions;
  predictions.reserve(observations.size());
  for (const Observation& o : observations) predictions.push_back(o.prediction);
  if (task == Task::kRegression) {
    const size_t n = predictions.size();
    const size_t steady_from = n - std::min(n, kSteadySteps);
    double sum = 0.0;
    double steady_sum = 0.0;
    for (size_t i = 0; i < n; ++i) {
      const double error = predictions[i] - train.y[i];
      sum += error * error;
      if (i >= steady_from) steady_sum += error * error;
    }
    row.mse = sum / static_cast<double>(n);
    row.steady_mse = steady_sum / static_cast<double>(n - steady_from);
    return row;
  }
  row.prequential_accuracy = Accuracy(predictions, train.y);

  absl::StatusOr<const Dataset*> test_data =
      files.Get(row.data->format, row.data->test_file, row.config.dim);
  if (!test_data.ok()) return Prefixed(name, test_data.status());
  const Dataset* test = *test_data;
  row.test_rows = test->size();
  predictions.assign(test->size(), 0.0);
  const Clock::time_point start = Clock::now();
  OKL_RETURN_IF_ERROR(model->PredictBatch(test->x, absl::MakeSpan(predictions)));
  row.test_seconds = SecondsSince(start);
  row.test_accuracy = Accuracy(predictions, test->y);
  if (averaged_too && row.config.averaged) {
    OKL_RETURN_IF_ERROR(model->PredictBatch(test->x, absl::MakeSpan(predictions),
                                            okl::PredictionMode::kCurrent));
    row.current_test_accuracy = Accuracy(predictions, test->y);
  }
  return row;
}

// --- Output -------------------------------------------------------------------------

std::string Percent(double fraction) { return absl::StrFormat("%.2f%%", 100 * fraction); }

std::string DataLabel(const Row& row) {
  if (row.data->task == Task::kClassification) return std::string(row.data->prefix);
  return absl::StrCat(row.data->prefix, " (L=", row.config.dim, ")");
}

// The config's kind and size: "KRLS-T M=100", "NORMA OLDEST B=512", "RFF D=1000"; a
// selection's candidates, its champion at the end and how many leaders it predicts with
// then ("select of 8: #4 NORMA MERGE B=100 +2": the champion and 2 more leaders).
std::string ModelLabel(const ModelConfig& config);

std::string ModelLabel(const Row& row) {
  if (!row.config.select_kind() || row.candidates.empty()) return ModelLabel(row.config);
  return absl::StrCat("select of ", row.candidates.size(), ": #", row.champion, " ",
                      ModelLabel(row.candidates[row.champion]),
                      row.serving > 1 ? absl::StrCat(" +", row.serving - 1) : "");
}

std::string ModelLabel(const ModelConfig& config) {
  if (config.select_kind()) return "select";
  if (config.krls_tracker_kind())
    return absl::StrCat("KRLS-T M=", config.krls_tracker.max_basis);
  if (config.random_features.dimension > 0) {
    return absl::StrCat("RFF D=", config.random_features.dimension);
  }
  return absl::StrCat("NORMA ",
                      absl::AsciiStrToUpper(okl::BudgetPolicyName(config.budget.policy)),
                      " B=", config.budget.max_terms);
}

void PrintTables(const std::vector<Row>& rows, bool markdown) {
  const bool any_current = std::any_of(rows.begin(), rows.end(), [](const Row& row) {
    return row.current_test_accuracy.has_value();
  });
  std::vector<std::vector<std::string>> classification = {
      {"config", "data", "model", "steps", "prequential acc", "test acc"}};
  if (any_current) classification[0].push_back("test acc (current)");
  for (const char* column : {"terms", "model bytes", "train ex/s", "test pred/s"}) {
    classification[0].push_back(column);
  }
  std::vector<std::vector<std::string>> regression = {{"config", "data", "model", "steps",
                                                       "MSE last 1,000", "dB", "MSE all", "dB",
                                                       "terms", "model bytes", "us/step"}};
  for (const Row& row : rows) {
    if (row.data->task == Task::kClassification) {
      std::vector<std::string> line = {row.config_name,
                                       DataLabel(row),
                                       ModelLabel(row),
                                       Grouped(row.train_rows),
                                       Percent(row.prequential_accuracy),
                                       Percent(row.test_accuracy)};
      if (any_current) {
        line.push_back(
            row.current_test_accuracy.has_value() ? Percent(*row.current_test_accuracy) : "-");
      }
      for (const std::string& cell : {Grouped(row.terms), Grouped(row.model_bytes),
                                      Grouped(PerSecond(row.train_rows, row.train_seconds)),
                                      Grouped(PerSecond(row.test_rows, row.test_seconds))}) {
        line.push_back(cell);
      }
      classification.push_back(std::move(line));
    } else {
      regression.push_back({row.config_name, DataLabel(row), ModelLabel(row),
                            Grouped(row.train_rows), absl::StrFormat("%.3g", row.steady_mse),
                            absl::StrFormat("%.1f", 10 * std::log10(row.steady_mse)),
                            absl::StrFormat("%.3g", row.mse),
                            absl::StrFormat("%.1f", 10 * std::log10(row.mse)),
                            Grouped(row.terms), Grouped(row.model_bytes),
                            absl::StrFormat("%.1f", 1e6 * row.train_seconds /
                                                        static_cast<double>(row.train_rows))});
    }
  }
  const bool both = classification.size() > 1 && regression.size() > 1;
  if (classification.size() > 1) PrintTable(classification, 3, markdown, stdout);
  if (both) std::printf("\n");
  if (regression.size() > 1) PrintTable(regression, 3, markdown, stdout);
}

void PrintJson(const std::vector<Row>& rows) {
  for (const Row& row : rows) {
    okl::JsonObject json;
    json.AddString("config", row.config_name)
        .AddString("data", row.data->prefix)
        .AddString("task",
                   row.data->task == Task::kClassification ? "classification" : "regression")
        .AddUint("dim", row.config.dim)
        .AddString("model", ModelLabel(row))
        .AddUint("steps", row.train_rows);
    if (row.data->task == Task::kClassification) {
      json.AddDouble("prequential_accuracy", row.prequential_accuracy)
          .AddUint("test_rows", row.test_rows)
          .AddDouble("test_accuracy", row.test_accuracy);
      if (row.current_test_accuracy.has_value()) {
        json.AddDouble("current_test_accuracy", *row.current_test_accuracy);
      }
    } else {
      json.AddDouble("mse", row.mse)
          .AddDouble("mse_db", 10 * std::log10(row.mse))
          .AddDouble("steady_mse", row.steady_mse)
          .AddDouble("steady_mse_db", 10 * std::log10(row.steady_mse));
    }
    json.AddUint("terms", row.terms)
        .AddUint("model_bytes", row.model_bytes)
        .AddDouble("train_seconds", row.train_seconds)
        .AddDouble("train_examples_per_second", PerSecond(row.train_rows, row.train_seconds));
    if (row.data->task == Task::kClassification) {
      json.AddDouble("test_seconds", row.test_seconds)
          .AddDouble("test_predictions_per_second", PerSecond(row.test_rows, row.test_seconds));
    }
    std::printf("%s\n", json.str().c_str());
  }
}

absl::Status Run() {
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format != "table" && format != "markdown" && format != "json") {
    return absl::InvalidArgumentError(
        absl::StrCat("--format=", format, ": expected table, markdown or json"));
  }
  if (absl::GetFlag(FLAGS_max_rows) < 0 || absl::GetFlag(FLAGS_chunk) < 1) {
    return absl::InvalidArgumentError("--max_rows must be >= 0 and --chunk >= 1");
  }
  DataFiles files(absl::GetFlag(FLAGS_data_dir),
                  static_cast<size_t>(absl::GetFlag(FLAGS_max_rows)));

  std::vector<std::string> names =
      absl::StrSplit(absl::GetFlag(FLAGS_configs), ',', absl::SkipWhitespace());
  if (names.empty()) {
    OKL_ASSIGN_OR_RETURN(names, DefaultConfigs());
    if (names.empty()) return absl::NotFoundError("no config in client/examples to run");
  }

  const Clock::time_point start = Clock::now();
  std::vector<std::optional<uint32_t>> sizes;
  for (absl::string_view part :
       absl::StrSplit(absl::GetFlag(FLAGS_sizes), ',', absl::SkipWhitespace())) {
    uint32_t size = 0;
    if (!absl::SimpleAtoi(part, &size) || size == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--sizes: \"", part, "\" is not a positive size"));
    }
    sizes.push_back(size);
  }
  if (sizes.empty()) sizes.push_back(std::nullopt);
  std::vector<Row> rows;
  for (const std::string& name : names) {
    for (const std::optional<uint32_t> size : sizes) {
      const size_t chunk = static_cast<size_t>(absl::GetFlag(FLAGS_chunk));
      OKL_ASSIGN_OR_RETURN(
          Row row, RunConfig(name, files, chunk, absl::GetFlag(FLAGS_averaged_too), size));
      const std::vector<ModelConfig> candidates = row.candidates;
      const DataSpec* data = row.data;
      rows.push_back(std::move(row));
      if (!absl::GetFlag(FLAGS_candidates_alone)) continue;
      for (size_t i = 0; i < candidates.size(); ++i) {
        Row alone;
        alone.config_name = absl::StrCat(name, "#", i);
        alone.data = data;
        alone.config = candidates[i];
        OKL_ASSIGN_OR_RETURN(alone, Evaluate(std::move(alone), files, chunk, false));
        rows.push_back(std::move(alone));
      }
    }
  }
  if (format == "json") {
    PrintJson(rows);
  } else {
    PrintTables(rows, format == "markdown");
  }
  std::fprintf(stderr, "okl_accuracy_bench: %zu config%s in %.1f s (reading data included)\n",
               rows.size(), rows.size() == 1 ? "" : "s", SecondsSince(start));
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (absl::Status status = Run(); !status.ok()) {
    std::fprintf(stderr, "okl_accuracy_bench: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
