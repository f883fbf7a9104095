// bench/krls_peer_bench.cc
//
// okl_krls_peer_bench: okl's KRLS tracker (core/krls_tracker.h) against its peer in dlib,
// dlib::krls (Engel, Mannor and Meir's KRLS with the approximate-linear-dependence test,
// dlib/svm/krls.h), side by side in one process on the same streams. Each stream is
// one-step-ahead prediction of a series, embedded with L lags (okl::ReadSeries):
//   lorenz  data/lorenz.dat, L = 6, Gaussian kernel gamma = 1/2048 (KAFBOX's protocol:
//           width sigma = 32, gamma = 1 / (2 sigma^2)), M in {30, 50, 100, 200};
//   mg30    data/mg30.dat, L = 7, gamma = 1, M in {100, 200, 500}.
// Both learners use the same kernel, exp(-gamma |x - x'|^2) (dlib::radial_basis_kernel;
// dlib::krls adds its constant 0.01 to every kernel value, an implicit offset), and the
// same dictionary bound M: okl's krls_tracker.max_basis (no forgetting), dlib's
// max_dictionary_size (when full it drops its oldest basis, okl the least useful one).
// Each learner has one parameter to tune, okl its noise variance (--okl_noise_variances)
// and dlib its ALD tolerance (--dlib_tolerances): each runs every value of its grid, and by
// default (--report=best) the table shows each learner's best value for each (stream, M),
// the best in hindsight for both, ranked by the steady-state MSE; --report=all shows
// every run.
//
// Protocol, prequential: for each row t, the current model predicts y_t from x_t, then
// learns (x_t, y_t) — okl's Observe returns that prediction; dlib is asked k(x_t), then
// k.train(x_t, y_t). Per (stream, M, learner) it reports the steady-state mean squared
// error (the last --steady_steps steps) and the whole stream's, each also in dB
// (10 log10), the dictionary size at the end, and the wall time (std::chrono::steady_clock)
// of the loop of predict + update divided by the steps; for dlib's reported runs also
// that of a second, identical pass that only trains (dlib's train does not predict; okl's
// Observe always does). Inputs are converted to dlib's matrix type before either clock starts;
// dlib's matrix products go through the system BLAS (Debian's default: the reference one). A
// benchmark, not a test: exits 0 whatever the numbers; 1, the error on stderr, if a data file
// cannot be read, a flag is malformed, or a model fails (okl's Observe returns an error, dlib
// throws). A dlib prediction that is not finite is reported as such (nan).
//
// Example:
//   cmake --build build/release --target okl_krls_peer_bench
//   build/release/bench/okl_krls_peer_bench                       # both streams, all M
//   build/release/bench/okl_krls_peer_bench --format=markdown     # for the docs
//   build/release/bench/okl_krls_peer_bench --learners=dlib --dlib_tolerances=1e-4
//       --lorenz_sizes=100 --mg30_sizes= --format=json          # one dlib setting
//   build/release/bench/okl_krls_peer_bench --report=all         # every grid point
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "bench/report_table.h"
#include "client/io/data_reader.h"
#include "client/io/json_writer.h"
#include "core/config.h"
#include "core/create_model.h"
#include "core/model.h"
#include "core/status_macros.h"
#include "dlib/svm/kernel.h"
#include "dlib/svm/krls.h"

ABSL_FLAG(std::string, data_dir, OKL_SOURCE_DIR "/data",
          "the directory holding lorenz.dat and mg30.dat");
ABSL_FLAG(std::string, lorenz_sizes, "30,50,100,200",
          "comma-separated dictionary sizes M for data/lorenz.dat (empty: skip the stream)");
ABSL_FLAG(std::string, mg30_sizes, "100,200,500",
          "comma-separated dictionary sizes M for data/mg30.dat (empty: skip the stream)");
ABSL_FLAG(int32_t, lorenz_lags, 6, "embedding dimension L of data/lorenz.dat");
ABSL_FLAG(int32_t, mg30_lags, 7, "embedding dimension L of data/mg30.dat");
ABSL_FLAG(double, lorenz_gamma, 1.0 / 2048,
          "Gaussian kernel gamma on lorenz (KAFBOX's width sigma = 32: 1 / (2 sigma^2))");
ABSL_FLAG(double, mg30_gamma, 1.0, "Gaussian kernel gamma on mg30");
ABSL_FLAG(std::string, okl_noise_variances, "1e-6,1e-5,1e-4,1e-3",
          "okl: the krls_tracker.noise_variance (sigma_n^2) values to run, comma-separated");
// dlib's useful range on the two streams: above 1e-3 its dictionary stays small (lorenz:
// 25 bases or fewer), and at 1e-6 or less it diverges on mg30 at M = 200 and 500 (its ALD
// has no regulariser) and a full dictionary's removal costs it ~20 ms per step.
ABSL_FLAG(std::string, dlib_tolerances, "1e-3,3e-4,2e-4,1.2e-4,5e-5,1e-5",
          "dlib: the ALD tolerances of dlib::krls to run (a basis joins when its residual "
          "exceeds it), comma-separated");
ABSL_FLAG(std::string, report, "best",
          "best: each learner's best setting per (stream, M), by the steady-state MSE; all: "
          "every run");
ABSL_FLAG(std::string, learners, "okl,dlib", "comma-separated learners to run: okl, dlib");
ABSL_FLAG(int64_t, steady_steps, 1000,
          "the steady-state MSE is that of the last N steps of each stream");
ABSL_FLAG(bool, dlib_train_alone, true,
          "for each dlib run reported, also time a second pass that only trains (us per "
          "update without the prediction)");
ABSL_FLAG(int64_t, max_rows, 0, "use at most N rows of each stream (0: all)");
ABSL_FLAG(std::string, format, "table",
          "table (aligned text), markdown, or json (one object per row)");

namespace {

using Clock = std::chrono::steady_clock;
using okl::bench::Grouped;
using okl::bench::PrintTable;
using DlibSample = dlib::matrix<double, 0, 1>;
using DlibKernel = dlib::radial_basis_kernel<DlibSample>;
using DlibKrls = dlib::krls<DlibKernel>;

enum class Learner { kOkl, kDlib };

absl::string_view LearnerName(Learner learner) {
  return learner == Learner::kOkl ? "okl" : "dlib";
}

// A series and how it is embedded and learned.
struct Stream {
  std::string name;  // "lorenz", "mg30"
  std::string file;  // under --data_dir
  size_t lags = 0;
  double gamma = 0.0;
  std::vector<uint32_t> sizes;  // the dictionary sizes M to run
};

// One learner's pass over one stream at one M: a row of the table.
struct Row {
  const Stream* stream = nullptr;
  uint32_t max_dictionary = 0;  // M
  Learner learner = Learner::kOkl;
  double setting = 0.0;  // okl: noise_variance; dlib: tolerance
  size_t steps = 0;
  size_t steady_steps = 0;  // the last steps the steady-state MSE averages
  double steady_mse = 0.0;
  double mse = 0.0;  // the whole stream
  size_t dictionary_size = 0;
  double us_per_step = 0.0;             // predict + update
  std::optional<double> us_per_update;  // dlib's train alone
};

Row MakeRow(const Stream& stream, uint32_t m, Learner learner, double setting) {
  Row row;
  row.stream = &stream;
  row.max_dictionary = m;
  row.learner = learner;
  row.setting = setting;
  return row;
}

double MicrosecondsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

// `status` with its message prefixed by `context`.
absl::Status Prefixed(absl::string_view context, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

// "30,50,100" -> {30, 50, 100}; each in 1..kMaxBasis. Empty gives none.
absl::StatusOr<std::vector<uint32_t>> ParseSizes(absl::string_view flag,
                                                 absl::string_view text) {
  std::vector<uint32_t> sizes;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    uint32_t size = 0;
    if (!absl::SimpleAtoi(part, &size) || size == 0 || size > okl::kMaxBasis) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, ": \"", part, "\" is not a dictionary size in 1..", okl::kMaxBasis));
    }
    sizes.push_back(size);
  }
  return sizes;
}

// "1e-6,1e-5" -> {1e-6, 1e-5}: a grid of one learner's parameter, each finite and >= 0.
absl::StatusOr<std::vector<double>> ParseGrid(absl::string_view flag, absl::string_view text) {
  std::vector<double> values;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    double value = 0;
    if (!absl::SimpleAtod(part, &value) || !std::isfinite(value) || value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": \"", part, "\" is not a finite value >= 0"));
    }
    values.push_back(value);
  }
  if (values.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, " is empty"));
  return values;
}

// The run of `rows` with the lowest steady-state MSE (a non-finite one is never best).
const Row& Best(const std::vector<Row>& rows) {
  const Row* best = &rows[0];
  for (const Row& row : rows) {
    if (std::isfinite(row.steady_mse) &&
        (!std::isfinite(best->steady_mse) || row.steady_mse < best->steady_mse)) {
      best = &row;
    }
  }
  return *best;
}

absl::StatusOr<std::vector<Learner>> ParseLearners(absl::string_view text) {
  std::vector<Learner> learners;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    if (part == "okl") {
      learners.push_back(Learner::kOkl);
    } else if (part == "dlib") {
      learners.push_back(Learner::kDlib);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--learners: \"", part, "\" is not a learner: expected okl or dlib"));
    }
  }
  if (learners.empty()) return absl::InvalidArgumentError("--learners names no learner");
  return learners;
}

// The stream's rows, and the same inputs as dlib column vectors.
struct StreamData {
  okl::Dataset data;
  std::vector<DlibSample> dlib_inputs;
};

absl::StatusOr<StreamData> ReadStream(const Stream& stream, const std::string& dir,
                                      size_t max_rows) {
  const std::string path = (std::filesystem::path(dir) / stream.file).string();
  StreamData out;
  OKL_ASSIGN_OR_RETURN(out.data, okl::ReadSeries(path, stream.lags));
  okl::Dataset& data = out.data;
  if (max_rows > 0 && data.size() > max_rows) {
    data.y.resize(max_rows);
    data.x.resize(max_rows * data.dim);
  }
  if (data.size() == 0) return absl::InvalidArgumentError(absl::StrCat(path, ": no rows"));
  out.dlib_inputs.reserve(data.size());
  for (size_t t = 0; t < data.size(); ++t) {
    DlibSample x(static_cast<long>(data.dim));
    for (size_t j = 0; j < data.dim; ++j) x(static_cast<long>(j)) = data.row(t)[j];
    out.dlib_inputs.push_back(std::move(x));
  }
  return out;
}

// Fills the row's errors from the prequential predictions.
void ScorePredictions(absl::Span<const double> predictions, absl::Span<const double> targets,
                      size_t steady_steps, Row& row) {
  row.steps = targets.size();
  row.steady_steps = std::min(steady_steps, targets.size());
  const size_t steady_begin = targets.size() - row.steady_steps;
  double sum = 0.0;
  double steady_sum = 0.0;
  for (size_t t = 0; t < targets.size(); ++t) {
    const double error = predictions[t] - targets[t];
    sum += error * error;
    if (t >= steady_begin) steady_sum += error * error;
  }
  row.mse = sum / static_cast<double>(row.steps);
  row.steady_mse = steady_sum / static_cast<double>(row.steady_steps);
}

absl::StatusOr<Row> RunOkl(const Stream& stream, const okl::Dataset& data, uint32_t m,
                           double noise_variance, size_t steady_steps) {
  okl::ModelConfig config;
  config.dim = static_cast<uint32_t>(data.dim);
  config.kernel = {.type = okl::KernelType::kGaussian, .gamma = stream.gamma};
  config.loss = {.type = okl::LossType::kSquared};
  config.krls_tracker = {.max_basis = m, .noise_variance = noise_variance, .forgetting = 1.0};
  OKL_ASSIGN_OR_RETURN(std::unique_ptr<okl::Model> model, okl::CreateModel(config));

  std::vector<double> predictions(data.size());
  const Clock::time_point start = Clock::now();
  for (size_t t = 0; t < data.size(); ++t) {
    absl::StatusOr<okl::Observation> observation = model->Observe(data.row(t), data.y[t]);
    if (!observation.ok()) {
      return Prefixed(absl::StrCat("row ", t + 1), observation.status());
    }
    predictions[t] = observation->prediction;
  }
  const double microseconds = MicrosecondsSince(start);

  Row row = MakeRow(stream, m, Learner::kOkl, noise_variance);
  ScorePredictions(predictions, data.y, steady_steps, row);
  row.dictionary_size = model->expansion_size();
  row.us_per_step = microseconds / static_cast<double>(data.size());
  return row;
}

// dlib reports its errors by exceptions; none leaves this function.
absl::StatusOr<Row> RunDlib(const Stream& stream, const StreamData& stream_data, uint32_t m,
                            double tolerance, size_t steady_steps, bool train_alone) {
  const okl::Dataset& data = stream_data.data;
  const std::vector<DlibSample>& inputs = stream_data.dlib_inputs;
  Row row = MakeRow(stream, m, Learner::kDlib, tolerance);
  try {
    DlibKrls learner(DlibKernel(stream.gamma), tolerance, m);
    std::vector<double> predictions(data.size());
    const Clock::time_point start = Clock::now();
    for (size_t t = 0; t < data.size(); ++t) {
      predictions[t] = learner(inputs[t]);
      learner.train(inputs[t], data.y[t]);
    }
    row.us_per_step = MicrosecondsSince(start) / static_cast<double>(data.size());
    ScorePredictions(predictions, data.y, steady_steps, row);
    row.dictionary_size = learner.dictionary_size();

    if (train_alone) {
      // A fresh learner on the same rows: predicting does not change dlib's state, so this
      // pass makes the same updates without the predictions.
      DlibKrls trainer(DlibKernel(stream.gamma), tolerance, m);
      const Clock::time_point train_start = Clock::now();
      for (size_t t = 0; t < data.size(); ++t) trainer.train(inputs[t], data.y[t]);
      row.us_per_update = MicrosecondsSince(train_start) / static_cast<double>(data.size());
      if (trainer.dictionary_size() != learner.dictionary_size()) {
        return absl::InternalError(
            absl::StrCat("dlib's train-only pass ended with ", trainer.dictionary_size(),
                         " bases, the prequential pass with ", learner.dictionary_size()));
      }
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("dlib::krls threw: ", e.what()));
  }
  return row;
}

// --- Output -------------------------------------------------------------------------

double Decibels(double mse) { return 10 * std::log10(mse); }

// 1/2048 as "1/2048" (KAFBOX's gammas are reciprocals of integers), others as %g.
std::string GammaLabel(double gamma) {
  const double reciprocal = 1 / gamma;
  if (gamma < 1 && reciprocal == std::round(reciprocal) && reciprocal < 1e9) {
    return absl::StrFormat("1/%.0f", reciprocal);
  }
  return absl::StrFormat("%g", gamma);
}

std::string StreamLabel(const Row& row) {
  return absl::StrFormat("%s (L=%d, gamma=%s)", row.stream->name, row.stream->lags,
                         GammaLabel(row.stream->gamma));
}

std::string SettingLabel(const Row& row) {
  return row.learner == Learner::kOkl ? absl::StrFormat("noise_variance=%g", row.setting)
                                      : absl::StrFormat("tolerance=%g", row.setting);
}

void PrintRows(const std::vector<Row>& rows, bool markdown) {
  const size_t steady = rows.empty() ? 0 : rows[0].steady_steps;
  std::vector<std::vector<std::string>> cells = {
      {"stream", "learner", "setting", "M", "steps",
       absl::StrCat("steady MSE (last ", Grouped(static_cast<double>(steady)), ")"),
       "steady dB", "MSE (all)", "dB (all)", "dictionary", "µs/step (predict + update)",
       "µs/update (alone)"}};
  for (const Row& row : rows) {
    cells.push_back(
        {StreamLabel(row), std::string(LearnerName(row.learner)), SettingLabel(row),
         absl::StrCat(row.max_dictionary), Grouped(static_cast<double>(row.steps)),
         absl::StrFormat("%.4g", row.steady_mse),
         absl::StrFormat("%.1f", Decibels(row.steady_mse)), absl::StrFormat("%.4g", row.mse),
         absl::StrFormat("%.1f", Decibels(row.mse)), absl::StrCat(row.dictionary_size),
         absl::StrFormat("%.1f", row.us_per_step),
         row.us_per_update.has_value() ? absl::StrFormat("%.1f", *row.us_per_update) : "-"});
  }
  PrintTable(cells, 3, markdown, stdout);
}

void PrintJson(const std::vector<Row>& rows) {
  for (const Row& row : rows) {
    okl::JsonObject json;
    json.AddString("stream", row.stream->name)
        .AddString("data", row.stream->file)
        .AddUint("lags", row.stream->lags)
        .AddDouble("gamma", row.stream->gamma)
        .AddUint("max_dictionary", row.max_dictionary)
        .AddString("learner", LearnerName(row.learner))
        .AddDouble(row.learner == Learner::kOkl ? "noise_variance" : "tolerance", row.setting)
        .AddUint("steps", row.steps)
        .AddUint("steady_steps", row.steady_steps)
        .AddDouble("steady_mse", row.steady_mse)
        .AddDouble("steady_mse_db", Decibels(row.steady_mse))
        .AddDouble("mse", row.mse)
        .AddDouble("mse_db", Decibels(row.mse))
        .AddUint("dictionary_size", row.dictionary_size)
        .AddDouble("us_per_step", row.us_per_step);
    if (row.us_per_update.has_value()) json.AddDouble("us_per_update", *row.us_per_update);
    std::printf("%s\n", json.str().c_str());
  }
}

// "okl has the lower steady-state MSE in 5 of 7 pairs", when both learners ran.
std::string Comparison(const std::vector<Row>& rows) {
  size_t pairs = 0;
  size_t okl_better = 0;
  for (const Row& a : rows) {
    if (a.learner != Learner::kOkl) continue;
    for (const Row& b : rows) {
      if (b.learner == Learner::kDlib && b.stream == a.stream &&
          b.max_dictionary == a.max_dictionary) {
        ++pairs;
        okl_better += a.steady_mse < b.steady_mse || !std::isfinite(b.steady_mse);
      }
    }
  }
  if (pairs == 0) return "";
  return absl::StrCat("; okl has the lower steady-state MSE in ", okl_better, " of ", pairs,
                      pairs == 1 ? " pair" : " pairs");
}

absl::Status Run() {
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format != "table" && format != "markdown" && format != "json") {
    return absl::InvalidArgumentError(
        absl::StrCat("--format=", format, ": expected table, markdown or json"));
  }
  if (absl::GetFlag(FLAGS_max_rows) < 0 || absl::GetFlag(FLAGS_steady_steps) < 1) {
    return absl::InvalidArgumentError("--max_rows must be >= 0 and --steady_steps >= 1");
  }
  if (absl::GetFlag(FLAGS_lorenz_lags) < 1 || absl::GetFlag(FLAGS_mg30_lags) < 1) {
    return absl::InvalidArgumentError("--lorenz_lags and --mg30_lags must be >= 1");
  }
  if (!(absl::GetFlag(FLAGS_lorenz_gamma) > 0) || !(absl::GetFlag(FLAGS_mg30_gamma) > 0)) {
    return absl::InvalidArgumentError("--lorenz_gamma and --mg30_gamma must be positive");
  }
  const std::string report = absl::GetFlag(FLAGS_report);
  if (report != "best" && report != "all") {
    return absl::InvalidArgumentError(
        absl::StrCat("--report=", report, ": expected best or all"));
  }
  // okl validates a noise variance itself (CreateModel names the field).
  OKL_ASSIGN_OR_RETURN(
      const std::vector<double> noise_variances,
      ParseGrid("okl_noise_variances", absl::GetFlag(FLAGS_okl_noise_variances)));
  OKL_ASSIGN_OR_RETURN(const std::vector<double> tolerances,
                       ParseGrid("dlib_tolerances", absl::GetFlag(FLAGS_dlib_tolerances)));
  OKL_ASSIGN_OR_RETURN(const std::vector<Learner> learners,
                       ParseLearners(absl::GetFlag(FLAGS_learners)));
  OKL_ASSIGN_OR_RETURN(std::vector<uint32_t> lorenz_sizes,
                       ParseSizes("lorenz_sizes", absl::GetFlag(FLAGS_lorenz_sizes)));
  OKL_ASSIGN_OR_RETURN(std::vector<uint32_t> mg30_sizes,
                       ParseSizes("mg30_sizes", absl::GetFlag(FLAGS_mg30_sizes)));
  const std::vector<Stream> streams = {
      {.name = "lorenz",
       .file = "lorenz.dat",
       .lags = static_cast<size_t>(absl::GetFlag(FLAGS_lorenz_lags)),
       .gamma = absl::GetFlag(FLAGS_lorenz_gamma),
       .sizes = std::move(lorenz_sizes)},
      {.name = "mg30",
       .file = "mg30.dat",
       .lags = static_cast<size_t>(absl::GetFlag(FLAGS_mg30_lags)),
       .gamma = absl::GetFlag(FLAGS_mg30_gamma),
       .sizes = std::move(mg30_sizes)},
  };
  std::vector<const Stream*> runs;
  for (const Stream& stream : streams) {
    if (!stream.sizes.empty()) runs.push_back(&stream);
  }
  if (runs.empty()) return absl::InvalidArgumentError("no dictionary size to run");

  const size_t steady_steps = static_cast<size_t>(absl::GetFlag(FLAGS_steady_steps));
  const Clock::time_point start = Clock::now();
  std::vector<Row> rows;
  for (const Stream* stream_pointer : runs) {
    const Stream& stream = *stream_pointer;
    OKL_ASSIGN_OR_RETURN(const StreamData stream_data,
                         ReadStream(stream, absl::GetFlag(FLAGS_data_dir),
                                    static_cast<size_t>(absl::GetFlag(FLAGS_max_rows))));
    for (uint32_t m : stream.sizes) {
      for (Learner learner : learners) {
        const bool okl = learner == Learner::kOkl;
        std::vector<Row> runs;
        for (const double setting : okl ? noise_variances : tolerances) {
          const std::string context = absl::StrCat(LearnerName(learner), " on ", stream.name,
                                                   " with M = ", m, " and ", setting);
          // dlib's train-only pass is timed for the runs reported only.
          absl::StatusOr<Row> row =
              okl ? RunOkl(stream, stream_data.data, m, setting, steady_steps)
                  : RunDlib(stream, stream_data, m, setting, steady_steps,
                            report == "all" && absl::GetFlag(FLAGS_dlib_train_alone));
          if (!row.ok()) return Prefixed(context, row.status());
          runs.push_back(*std::move(row));
        }
        if (report == "all") {
          rows.insert(rows.end(), runs.begin(), runs.end());
          continue;
        }
        Row best = Best(runs);
        if (!okl && absl::GetFlag(FLAGS_dlib_train_alone)) {
          OKL_ASSIGN_OR_RETURN(best, RunDlib(stream, stream_data, m, best.setting, steady_steps,
                                             /*train_alone=*/true));
        }
        rows.push_back(best);
      }
    }
  }
  if (format == "json") {
    PrintJson(rows);
  } else {
    PrintRows(rows, format == "markdown");
  }
  std::fprintf(stderr, "okl_krls_peer_bench: %zu run%s in %.1f s (reading data included)%s\n",
               rows.size(), rows.size() == 1 ? "" : "s",
               std::chrono::duration<double>(Clock::now() - start).count(),
               Comparison(rows).c_str());
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (absl::Status status = Run(); !status.ok()) {
    std::fprintf(stderr, "okl_krls_peer_bench: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
