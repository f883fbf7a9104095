// client/cli/stream.cc
//
// `okl observe` and `okl predict`: rows streamed from files or stdin to the server.

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli/commands.h"
#include "client/cli/input.h"
#include "client/io/json_writer.h"
#include "client/cli/learning_curve.h"
#include "client/cli/progress.h"

namespace okl::cli {
namespace {

using Clock = std::chrono::steady_clock;

std::string InputsLabel(const std::vector<std::string>& inputs) {
  return absl::StrJoin(inputs, " ", [](std::string* out, const std::string& input) {
    absl::StrAppend(out, input == "-" ? "stdin" : input);
  });
}

// What the acknowledgements told so far.
struct AckTotals {
  uint64_t acknowledged = 0;
  double loss_sum = 0;
  uint64_t mistakes = 0;
  uint64_t steps = 0;
  uint64_t expansion_size = 0;
};

// "1 row", "2 rows".
std::string Rows(uint64_t n) { return absl::StrCat(n, n == 1 ? " row" : " rows"); }

}  // namespace

absl::Status RunObserve(const Client& client, const ModelId& id, const ObserveOptions& options,
                        const Output& output) {
  absl::StatusOr<ModelSummary> model = client.GetModel(id);
  if (!model.ok()) return model.status();
  const bool classification = IsClassificationLoss(model->config.loss.type);
  absl::StatusOr<std::unique_ptr<RowReader>> reader =
      RowReader::Open(options.inputs, options.format, model->config.dim, /*labelled=*/true);
  if (!reader.ok()) return reader.status();

  // The curve: in --curve, or in a temporary file when only a plot is wanted.
  std::unique_ptr<CurveWriter> curve;
  if (options.curve.wanted()) {
    absl::StatusOr<std::unique_ptr<CurveWriter>> opened =
        options.curve.csv_path.empty() ? CurveWriter::OpenTemporary()
                                       : CurveWriter::Open(options.curve.csv_path);
    if (!opened.ok()) return opened.status();
    curve = std::move(*opened);
  }

  AckTotals totals;
  totals.steps = model->stats.steps;
  totals.expansion_size = model->stats.expansion_size;
  std::deque<double> labels;  // of the examples added and not yet acknowledged
  absl::Status curve_status;
  WriterOptions writer_options;
  writer_options.batch_size = options.batch_size;
  writer_options.batches_per_stream = options.batches_per_stream;
  writer_options.on_ack = [&](const AckedBatch& ack) {
    for (uint64_t i = 0; i < ack.count; ++i) {
      const double loss = i < ack.losses.size() ? ack.losses[i] : 0.0;
      const double prediction = i < ack.predictions.size() ? ack.predictions[i] : 0.0;
      totals.loss_sum += loss;
      if (!labels.empty()) {
        if (classification && !(prediction * labels.front() > 0)) ++totals.mistakes;
        labels.pop_front();
      }
      if (curve != nullptr && curve_status.ok()) {
        curve_status = curve->Add(ack.steps - ack.count + i + 1, loss, ack.expansion_size);
      }
    }
    totals.acknowledged += ack.count;
    totals.steps = ack.steps;
    totals.expansion_size = ack.expansion_size;
  };
  absl::StatusOr<std::unique_ptr<ObserveWriter>> writer =
      client.OpenObserveWriter(id, writer_options);
  if (!writer.ok()) return writer.status();

  ProgressLine progress("observe", output.err, options.progress_terminal);
  const auto report = [&](bool force) {
    if (!options.progress) return;
    std::optional<double> fraction;
    const uint64_t sent =
        (*reader)->rows() > options.skip ? (*reader)->rows() - options.skip : 0;
    if (options.limit.has_value() && *options.limit > 0) {
      fraction = std::min(1.0, static_cast<double>(sent) / static_cast<double>(*options.limit));
    } else if ((*reader)->total_bytes().has_value() && *(*reader)->total_bytes() > 0) {
      fraction = std::min(1.0, static_cast<double>((*reader)->bytes_read()) /
                                   static_cast<double>(*(*reader)->total_bytes()));
    }
    std::optional<double> average;
    if (totals.acknowledged > 0) {
      average = totals.loss_sum / static_cast<double>(totals.acknowledged);
    }
    progress.Update(sent, fraction, average, force);
  };

  const Clock::time_point start = Clock::now();
  std::vector<double> x;
  double y = 0;
  absl::Status read_status;
  absl::Status add_status;
  uint64_t sent = 0;
  for (;;) {
    if (options.limit.has_value() && sent >= *options.limit) break;
    absl::StatusOr<bool> more = (*reader)->Next(&x, &y);
    if (!more.ok()) {
      read_status = more.status();
      break;
    }
    if (!*more) break;
    if ((*reader)->rows() <= options.skip) continue;
    labels.push_back(y);
    add_status = (*writer)->Add(x, y);
    if (!add_status.ok()) break;
    ++sent;
    if ((sent & 63) == 0) report(false);
  }
  // Rows read before a malformed one are sent too: everything before it is applied, so
  // that --skip can resume right after it once it is fixed.
  const absl::Status closed = (*writer)->Close();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (closed.ok()) report(true);
  progress.Finish();
  if (curve != nullptr) {
    const absl::Status curve_closed = curve->Close();
    if (curve_status.ok()) curve_status = curve_closed;
  }

  if (!closed.ok()) {
    // How far the model got decides where a rerun resumes.
    std::string applied;
    absl::StatusOr<uint64_t> since_open = (*writer)->AppliedSinceOpen();
    if (since_open.ok()) {
      applied =
          absl::StrCat("applied: ", *since_open, " of ", Rows(sent),
                       " sent; --skip=", options.skip + *since_open, " resumes after them");
    } else {
      applied = absl::StrCat("acknowledged: ", (*writer)->acknowledged(), " of ", Rows(sent),
                             " sent, and more may have been applied: okl get shows the "
                             "model's steps");
    }
    return absl::Status(closed.code(), absl::StrCat(closed.message(), " (", applied, ")"));
  }
  if (!read_status.ok()) {
    const uint64_t resume = options.skip + sent;
    return absl::Status(
        read_status.code(),
        absl::StrCat(read_status.message(), " (observed: the ", Rows(sent),
                     " before it; once it is fixed, --skip=", resume, " resumes after them)"));
  }
  if (!curve_status.ok()) return curve_status;
  if (!options.curve.plot_path.empty()) {
    const std::string title =
        absl::StrCat(ModelLabel(id), ": ", InputsLabel(options.inputs), " (", sent, " rows)");
    absl::Status plotted =
        PlotCurve(*curve, options.curve.plot_path, title, options.curve.gnuplot);
    if (!plotted.ok()) return plotted;
  }

  const double average =
      sent > 0 ? totals.loss_sum / static_cast<double>(totals.acknowledged) : 0.0;
  const double rate = seconds > 0 ? static_cast<double>(sent) / seconds : 0.0;
  if (output.json) {
    JsonObject json;
    json.AddString("tenant", id.tenant)
        .AddString("model", id.model)
        .AddUint("examples", sent)
        .AddDouble("seconds", seconds)
        .AddDouble("examples_per_second", rate)
        .AddDouble("average_loss", average);
    if (classification) json.AddUint("mistakes", totals.mistakes);
    json.AddUint("steps", totals.steps).AddUint("expansion_size", totals.expansion_size);
    if (!options.curve.csv_path.empty()) json.AddString("curve", options.curve.csv_path);
    if (!options.curve.plot_path.empty()) json.AddString("plot", options.curve.plot_path);
    std::fprintf(output.out, "%s\n", json.str().c_str());
    return absl::OkStatus();
  }
  std::string text = absl::StrFormat("observed %s examples into %s in %.2f s (%s examples/s)\n",
                                     WithThousands(sent), ModelLabel(id), seconds,
                                     WithThousands(static_cast<uint64_t>(rate)));
  absl::StrAppendFormat(&text, "average loss     %.6g\n", average);
  if (classification) {
    absl::StrAppendFormat(
        &text, "mistakes         %d (%.2f%%)\n", totals.mistakes,
        sent > 0 ? 100.0 * static_cast<double>(totals.mistakes) / static_cast<double>(sent)
                 : 0.0);
  }
  absl::StrAppend(&text, "model            ", totals.steps, " steps, ",
                  ModelSizeText(model->config, totals.expansion_size), "\n");
  if (!options.curve.csv_path.empty()) {
    absl::StrAppend(&text, "curve            ", options.curve.csv_path, "\n");
  }
  if (!options.curve.plot_path.empty()) {
    absl::StrAppend(&text, "plot             ", options.curve.plot_path, "\n");
  }
  std::fputs(text.c_str(), output.out);
  return absl::OkStatus();
}

namespace {

// The --output of predict: stdout, or a file removed again if the command fails.
class PredictionSink {
 public:
  static absl::StatusOr<std::unique_ptr<PredictionSink>> Open(const std::string& path,
                                                              std::FILE* out) {
    if (path.empty() || path == "-")
      return std::unique_ptr<PredictionSink>(new PredictionSink("", out));
    std::FILE* file = std::fopen(path.c_str(), "w");
    if (file == nullptr) {
      const int error = errno;
      return absl::ErrnoToStatus(error, absl::StrCat("cannot create ", path));
    }
    return std::unique_ptr<PredictionSink>(new PredictionSink(path, file));
  }
  ~PredictionSink() {
    if (!path_.empty() && file_ != nullptr) {
      std::fclose(file_);
      std::remove(path_.c_str());
    }
  }

  // One value per line; with `variances` (a KRLS tracker's), each value and its
  // variance, separated by a space.
  void Write(absl::Span<const double> values, absl::Span<const double> variances = {}) {
    std::string text;
    char line[80];
    for (size_t i = 0; i < values.size(); ++i) {
      const int n = variances.empty() ? std::snprintf(line, sizeof(line), "%.17g\n", values[i])
                                      : std::snprintf(line, sizeof(line), "%.17g %.17g\n",
                                                      values[i], variances[i]);
      text.append(line, static_cast<size_t>(n));
    }
    if (std::fwrite(text.data(), 1, text.size(), file_) != text.size()) failed_ = true;
  }

  absl::Status Close() {
    errno = 0;
    bool ok = !failed_ && std::fflush(file_) == 0;
    const int error = errno;
    if (!path_.empty()) {
      ok = std::fclose(file_) == 0 && ok;
      file_ = nullptr;
    }
    if (!ok) {
      return absl::ErrnoToStatus(
          error != 0 ? error : EIO,
          absl::StrCat("cannot write ", path_.empty() ? "stdout" : path_));
    }
    return absl::OkStatus();
  }

  bool to_file() const { return !path_.empty(); }

 private:
  PredictionSink(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}

  std::string path_;
  std::FILE* file_;
  bool failed_ = false;
};

}  // namespace

absl::Status RunPredict(const Client& client, const ModelId& id, const PredictOptions& options,
                        const Output& output) {
  absl::StatusOr<ModelSummary> model = client.GetModel(id);
  if (!model.ok()) return model.status();
  const uint32_t dim = model->config.dim;
  std::vector<double> xs;
  for (const std::string& text : options.vectors) {
    absl::StatusOr<std::vector<double>> x = ParseInputVector(text, dim);
    if (!x.ok()) return x.status();
    xs.insert(xs.end(), x->begin(), x->end());
  }
  std::unique_ptr<RowReader> reader;
  if (!options.inputs.empty()) {
    absl::StatusOr<std::unique_ptr<RowReader>> opened =
        RowReader::Open(options.inputs, options.format, dim, /*labelled=*/false);
    if (!opened.ok()) return opened.status();
    reader = std::move(*opened);
  }
  // JSON on stdout holds the predictions themselves; with --output it says where they went.
  const bool collect =
      output.json && (options.output_path.empty() || options.output_path == "-");
  std::unique_ptr<PredictionSink> sink;
  if (!collect) {
    absl::StatusOr<std::unique_ptr<PredictionSink>> opened =
        PredictionSink::Open(options.output_path, output.out);
    if (!opened.ok()) return opened.status();
    sink = std::move(*opened);
  }
  std::vector<double> all;
  std::vector<double> all_variances;  // a KRLS tracker's
  std::vector<double> variances;
  uint64_t count = 0;
  const auto flush = [&]() -> absl::Status {
    if (xs.empty()) return absl::OkStatus();
    absl::StatusOr<std::vector<double>> predictions =
        client.Predict(id, xs, dim, /*novel=*/nullptr, &variances);
    if (!predictions.ok()) return predictions.status();
    count += predictions->size();
    if (collect) {
      all.insert(all.end(), predictions->begin(), predictions->end());
      all_variances.insert(all_variances.end(), variances.begin(), variances.end());
    } else {
      sink->Write(*predictions, variances);
    }
    xs.clear();
    return absl::OkStatus();
  };
  const size_t batch = options.batch_size > 0 ? options.batch_size : 1;
  while (xs.size() / dim >= batch) {
    // Many --x inputs: the same batching as a file's.
    std::vector<double> rest(xs.begin() + static_cast<ptrdiff_t>(batch * dim), xs.end());
    xs.resize(batch * dim);
    if (absl::Status done = flush(); !done.ok()) return done;
    xs = std::move(rest);
  }
  if (reader != nullptr) {
    std::vector<double> x;
    double ignored = 0;
    uint64_t rows = 0;
    for (;;) {
      if (options.limit.has_value() && rows >= *options.limit) break;
      absl::StatusOr<bool> more = reader->Next(&x, &ignored);
      if (!more.ok()) return more.status();
      if (!*more) break;
      ++rows;
      xs.insert(xs.end(), x.begin(), x.end());
      if (xs.size() / dim >= batch) {
        if (absl::Status done = flush(); !done.ok()) return done;
      }
    }
  }
  if (absl::Status done = flush(); !done.ok()) return done;
  if (count == 0) {
    return absl::InvalidArgumentError("no inputs to predict: give --x or rows in a file");
  }
  if (collect) {
    JsonObject json;
    json.AddString("tenant", id.tenant)
        .AddString("model", id.model)
        .AddUint("count", count)
        .AddDoubles("predictions", all);
    if (model->config.krls_tracker_kind()) json.AddDoubles("variances", all_variances);
    std::fprintf(output.out, "%s\n", json.str().c_str());
    return absl::OkStatus();
  }
  if (absl::Status closed = sink->Close(); !closed.ok()) return closed;
  if (sink->to_file()) {
    if (output.json) {
      JsonObject json;
      json.AddString("tenant", id.tenant)
          .AddString("model", id.model)
          .AddUint("count", count)
          .AddString("output", options.output_path);
      std::fprintf(output.out, "%s\n", json.str().c_str());
    } else {
      std::fprintf(output.out, "%s predictions written to %s\n", WithThousands(count).c_str(),
                   options.output_path.c_str());
    }
  }
  return absl::OkStatus();
}

}  // namespace okl::cli
