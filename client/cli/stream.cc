// client/cli/stream.cc
//
// `okl observe`, `okl predict` and `okl label`: rows streamed from files or stdin to the server.

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
#include "core/status_macros.h"

namespace okl::cli {
namespace {

using Clock = std::chrono::steady_clock;

std::string InputsLabel(const std::vector<std::string>& inputs) {
  return absl::StrJoin(inputs, " ", [](std::string* out, const std::string& input) {
    absl::StrAppend(out, input == "-" ? "stdin" : input);
  });
}

// The label of an example sent and not yet acknowledged: y, or a multi-class model's
// class.
struct SentLabel {
  double y = 0;
  std::string class_label;
};

// What the acknowledgements told so far.
struct AckTotals {
  uint64_t acknowledged = 0;
  double loss_sum = 0;
  uint64_t mistakes = 0;
  uint64_t steps = 0;
  uint64_t expansion_size = 0;

  // Adds an acknowledged batch. `labels` are those of the examples added and not yet
  // acknowledged, oldest first: a classification's mistakes compare them with the
  // predictions (a multi-class model's with the predicted classes).
  void Add(const AckedBatch& ack, bool classification, std::deque<SentLabel>* labels) {
    for (uint64_t i = 0; i < ack.count; ++i) {
      const double loss = i < ack.losses.size() ? ack.losses[i] : 0.0;
      const double prediction = i < ack.predictions.size() ? ack.predictions[i] : 0.0;
      loss_sum += loss;
      if (!labels->empty()) {
        if (i < ack.predicted_classes.size()) {
          if (ack.predicted_classes[i] != labels->front().class_label) ++mistakes;
        } else if (classification && !(prediction * labels->front().y > 0)) {
          ++mistakes;
        }
        labels->pop_front();
      }
    }
    acknowledged += ack.count;
    steps = ack.steps;
    expansion_size = ack.expansion_size;
  }

  // The average loss of the examples acknowledged; none before the first.
  std::optional<double> AverageLoss() const {
    if (acknowledged == 0) return std::nullopt;
    return loss_sum / static_cast<double>(acknowledged);
  }
};

// What an observe did, for its summary.
struct ObserveResult {
  uint64_t sent = 0;  // rows added to the writer
  double seconds = 0;
  AckTotals totals;
};

// "1 row", "2 rows".
std::string Rows(uint64_t n) { return absl::StrCat(n, n == 1 ? " row" : " rows"); }

// The curve: in --curve, or in a temporary file when only a plot is wanted; null when
// neither is.
absl::StatusOr<std::unique_ptr<CurveWriter>> OpenCurve(const CurveOptions& options) {
  if (!options.wanted()) return std::unique_ptr<CurveWriter>();
  return options.csv_path.empty() ? CurveWriter::OpenTemporary()
                                  : CurveWriter::Open(options.csv_path);
}

// The curve's points of an acknowledged batch, one per example; none once a write has
// failed (*status keeps the failure).
void AddCurvePoints(const AckedBatch& ack, CurveWriter* curve, absl::Status* status) {
  for (uint64_t i = 0; i < ack.count; ++i) {
    const double loss = i < ack.losses.size() ? ack.losses[i] : 0.0;
    if (status->ok()) {
      *status = curve->Add(ack.steps - ack.count + i + 1, loss, ack.expansion_size);
    }
  }
}

// How far the rows sent have got, for the progress line: of --limit, or else of the
// input's bytes when their total is known.
std::optional<double> ProgressFraction(const RowReader& reader, const ObserveOptions& options,
                                       uint64_t sent) {
  std::optional<double> fraction;
  if (options.limit.has_value() && *options.limit > 0) {
    fraction = std::min(1.0, static_cast<double>(sent) / static_cast<double>(*options.limit));
  } else if (reader.total_bytes().has_value() && *reader.total_bytes() > 0) {
    fraction = std::min(1.0, static_cast<double>(reader.bytes_read()) /
                                 static_cast<double>(*reader.total_bytes()));
  }
  return fraction;
}

// Adds the rows after options.skip, at most options.limit of them, to `writer` and their
// labels to `labels`, calling report(false) every 64 rows; *sent counts them. Stops at a
// row the writer refuses (Close returns why) or one that cannot be read (returned).
template <typename Report>
absl::Status SendRows(RowReader& reader, ObserveWriter& writer, const ObserveOptions& options,
                      bool class_labels, std::deque<SentLabel>* labels, const Report& report,
                      uint64_t* sent) {
  std::vector<double> x;
  SentLabel label;
  for (;;) {
    if (options.limit.has_value() && *sent >= *options.limit) break;
    absl::StatusOr<bool> more = reader.Next(&x, &label.y, &label.class_label);
    if (!more.ok()) return more.status();
    if (!*more) break;
    if (reader.rows() <= options.skip) continue;
    labels->push_back(label);
    const absl::Status added =
        class_labels ? writer.AddClass(x, label.class_label) : writer.Add(x, label.y);
    if (!added.ok()) break;
    ++*sent;
    if ((*sent & 63) == 0) report(false);
  }
  return absl::OkStatus();
}

// The failed stream's error with how far the model got, which decides where a rerun
// resumes.
absl::Status StreamFailure(const absl::Status& closed, const ObserveWriter& writer,
                           uint64_t sent, uint64_t skip) {
  std::string applied;
  absl::StatusOr<uint64_t> since_open = writer.AppliedSinceOpen();
  if (since_open.ok()) {
    applied = absl::StrCat("applied: ", *since_open, " of ", Rows(sent),
                           " sent; --skip=", skip + *since_open, " resumes after them");
  } else {
    applied = absl::StrCat("acknowledged: ", writer.acknowledged(), " of ", Rows(sent),
                           " sent, and more may have been applied: okl get shows the "
                           "model's steps");
  }
  return absl::Status(closed.code(), absl::StrCat(closed.message(), " (", applied, ")"));
}

// The error of a row that could not be read, with the --skip that resumes after it once it
// is fixed (the rows before it are applied).
absl::Status ReadFailure(const absl::Status& read_status, uint64_t sent, uint64_t skip) {
  const uint64_t resume = skip + sent;
  return absl::Status(
      read_status.code(),
      absl::StrCat(read_status.message(), " (observed: the ", Rows(sent),
                   " before it; once it is fixed, --skip=", resume, " resumes after them)"));
}

// The summary of an observe: examples, time, rate, average loss, mistakes (classification
// losses), the model's size and where the curve went; as text or one JSON object.
void PrintObserveSummary(const ModelId& id, const ModelConfig& config,
                         const CurveOptions& curve, const ObserveResult& result,
                         const Output& output) {
  const bool classification =
      IsClassificationLoss(config.loss.type) || IsMulticlassLoss(config.loss.type);
  const uint64_t sent = result.sent;
  const AckTotals& totals = result.totals;
  const double seconds = result.seconds;
  const double average =
      sent > 0 ? totals.loss_sum / static_cast<double>(totals.acknowledged) : 0.0;
  const double rate = seconds > 0 ? static_cast<double>(sent) / seconds : 0.0;
  if (output.json) {
    JsonObject json = ModelJson(id);
    json.AddUint("examples", sent)
        .AddDouble("seconds", seconds)
        .AddDouble("examples_per_second", rate)
        .AddDouble("average_loss", average);
    if (classification) json.AddUint("mistakes", totals.mistakes);
    json.AddUint("steps", totals.steps).AddUint("expansion_size", totals.expansion_size);
    if (!curve.csv_path.empty()) json.AddString("curve", curve.csv_path);
    if (!curve.plot_path.empty()) json.AddString("plot", curve.plot_path);
    std::fprintf(output.out, "%s\n", json.str().c_str());
    return;
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
                  ModelSizeText(config, totals.expansion_size), "\n");
  if (!curve.csv_path.empty()) {
    absl::StrAppend(&text, "curve            ", curve.csv_path, "\n");
  }
  if (!curve.plot_path.empty()) {
    absl::StrAppend(&text, "plot             ", curve.plot_path, "\n");
  }
  std::fputs(text.c_str(), output.out);
}

}  // namespace

absl::Status RunObserve(const Client& client, const ModelId& id, const ObserveOptions& options,
                        const Output& output) {
  absl::StatusOr<ModelSummary> model = client.GetModel(id);
  if (!model.ok()) return model.status();
  const bool classification = IsClassificationLoss(model->config.loss.type);
  const bool class_labels = model->config.multiclass();
  OKL_ASSIGN_OR_RETURN(std::unique_ptr<RowReader> reader,
                       RowReader::Open(options.inputs, options.format, model->config.dim,
                                       /*labelled=*/true, class_labels));
  OKL_ASSIGN_OR_RETURN(std::unique_ptr<CurveWriter> curve, OpenCurve(options.curve));

  ObserveResult result;
  result.totals.steps = model->stats.steps;
  result.totals.expansion_size = model->stats.expansion_size;
  std::deque<SentLabel> labels;  // of the examples added and not yet acknowledged
  absl::Status curve_status;
  WriterOptions writer_options;
  writer_options.batch_size = options.batch_size;
  writer_options.batches_per_stream = options.batches_per_stream;
  writer_options.on_ack = [&](const AckedBatch& ack) {
    result.totals.Add(ack, classification, &labels);
    if (curve != nullptr) AddCurvePoints(ack, curve.get(), &curve_status);
  };
  OKL_ASSIGN_OR_RETURN(std::unique_ptr<ObserveWriter> writer,
                       client.OpenObserveWriter(id, writer_options));

  ProgressLine progress("observe", output.err, options.progress_terminal);
  const auto report = [&](bool force) {
    if (!options.progress) return;
    const uint64_t sent = reader->rows() > options.skip ? reader->rows() - options.skip : 0;
    progress.Update(sent, ProgressFraction(*reader, options, sent), result.totals.AverageLoss(),
                    force);
  };

  const Clock::time_point start = Clock::now();
  const absl::Status read_status =
      SendRows(*reader, *writer, options, class_labels, &labels, report, &result.sent);
  // Rows read before a malformed one are sent too: everything before it is applied, so
  // that --skip can resume right after it once it is fixed.
  const absl::Status closed = writer->Close();
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (closed.ok()) report(true);
  progress.Finish();
  if (curve != nullptr) {
    const absl::Status curve_closed = curve->Close();
    if (curve_status.ok()) curve_status = curve_closed;
  }

  if (!closed.ok()) return StreamFailure(closed, *writer, result.sent, options.skip);
  if (!read_status.ok()) return ReadFailure(read_status, result.sent, options.skip);
  if (!curve_status.ok()) return curve_status;
  if (!options.curve.plot_path.empty()) {
    const std::string title = absl::StrCat(ModelLabel(id), ": ", InputsLabel(options.inputs),
                                           " (", result.sent, " rows)");
    absl::Status plotted =
        PlotCurve(*curve, options.curve.plot_path, title, options.curve.gnuplot);
    if (!plotted.ok()) return plotted;
  }
  PrintObserveSummary(id, model->config, options.curve, result, output);
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
  // variance, separated by a space. With `event_ids` (remembered predictions), CSV
  // instead: "event_id,value" or "event_id,value,variance".
  void Write(absl::Span<const double> values, absl::Span<const double> variances = {},
             absl::Span<const std::string> event_ids = {}) {
    std::string text;
    char line[80];
    const char* const separator = event_ids.empty() ? " " : ",";
    for (size_t i = 0; i < values.size(); ++i) {
      if (!event_ids.empty()) absl::StrAppend(&text, event_ids[i], ",");
      const int n = variances.empty() ? std::snprintf(line, sizeof(line), "%.17g\n", values[i])
                                      : std::snprintf(line, sizeof(line), "%.17g%s%.17g\n",
                                                      values[i], separator, variances[i]);
      text.append(line, static_cast<size_t>(n));
    }
    if (std::fwrite(text.data(), 1, text.size(), file_) != text.size()) failed_ = true;
  }

  // A multi-class model's predictions: one predicted class a line (an empty line before
  // the model knew any class).
  void WriteClasses(absl::Span<const std::string> classes) {
    std::string text;
    for (const std::string& c : classes) absl::StrAppend(&text, c, "\n");
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

namespace {

// The predictions of `batch` in one call: Client::PredictRemembering under `event_ids`
// (none: the server makes them) when `remember` is set, else Client::Predict.
absl::StatusOr<RememberedPredictions> PredictBatch(
    const Client& client, const ModelId& id, absl::Span<const double> batch, uint32_t dim,
    const std::optional<RememberOptions>& remember, std::vector<std::string> event_ids) {
  if (remember.has_value()) {
    RememberOptions options = *remember;
    options.event_ids = std::move(event_ids);
    return client.PredictRemembering(id, batch, dim, options);
  }
  RememberedPredictions predicted;
  OKL_ASSIGN_OR_RETURN(predicted.predictions,
                       client.Predict(id, batch, dim, /*novel=*/nullptr, &predicted.variances,
                                      &predicted.classes));
  return predicted;
}

// Predict's inputs on their way to the server: kept until a batch is full, then sent,
// and their predictions written to the sink, or collected for JSON on stdout when there
// is none. Ids given: every input is read before the first is sent, so that a count that
// does not match remembers nothing.
class PredictBatcher {
 public:
  // `sink` null: collect.
  PredictBatcher(const Client& client, const ModelId& id, uint32_t dim,
                 const PredictOptions& options, PredictionSink* sink)
      : client_(client),
        id_(id),
        dim_(dim),
        remember_(options.remember),
        given_ids_(options.remember.has_value() && !options.remember->event_ids.empty()
                       ? &options.remember->event_ids
                       : nullptr),
        batch_(options.batch_size > 0 ? options.batch_size : 1),
        sink_(sink) {}

  // Adds inputs of dim values each, and sends the full batches.
  absl::Status Add(absl::Span<const double> xs) {
    xs_.insert(xs_.end(), xs.begin(), xs.end());
    if (given_ids_ != nullptr && xs_.size() / dim_ > given_ids_->size()) {
      return IdsMismatch(xs_.size() / dim_);
    }
    return Flush(false);
  }

  // Sends what is left, once every input is added.
  absl::Status Finish() {
    if (given_ids_ != nullptr && xs_.size() / dim_ != given_ids_->size()) {
      return IdsMismatch(xs_.size() / dim_);
    }
    return Flush(true);
  }

  // The inputs predicted.
  uint64_t count() const { return count_; }
  // Without a sink, every prediction (a KRLS tracker's variances, the remembered ids).
  const RememberedPredictions& collected() const { return collected_; }

 private:
  absl::Status IdsMismatch(size_t inputs) const {
    return absl::InvalidArgumentError(
        absl::StrCat("--event_ids gives ", given_ids_->size(), " ids for ", inputs,
                     inputs > given_ids_->size() ? " or more" : "",
                     " inputs: give one per input (nothing was predicted)"));
  }

  // Sends full batches (all of xs_ with `all_of_it`), unless the ids are still being
  // counted.
  absl::Status Flush(bool all_of_it) {
    if (given_ids_ != nullptr && !all_of_it) return absl::OkStatus();
    while (xs_.size() / dim_ >= batch_ || (all_of_it && !xs_.empty())) {
      if (absl::Status sent = Send(std::min(batch_, xs_.size() / dim_)); !sent.ok()) {
        return sent;
      }
    }
    return absl::OkStatus();
  }

  // Sends the first `inputs` inputs of xs_.
  absl::Status Send(size_t inputs) {
    const absl::Span<const double> batch = absl::MakeConstSpan(xs_).subspan(0, inputs * dim_);
    std::vector<std::string> event_ids;
    if (given_ids_ != nullptr) {
      event_ids.assign(given_ids_->begin() + static_cast<ptrdiff_t>(count_),
                       given_ids_->begin() + static_cast<ptrdiff_t>(count_ + inputs));
    }
    OKL_ASSIGN_OR_RETURN(
        RememberedPredictions predicted,
        PredictBatch(client_, id_, batch, dim_, remember_, std::move(event_ids)));
    count_ += predicted.predictions.size();
    if (sink_ == nullptr) {
      Append(predicted.predictions, &collected_.predictions);
      Append(predicted.variances, &collected_.variances);
      Append(predicted.event_ids, &collected_.event_ids);
      ClassPredictions& classes = collected_.classes;
      Append(predicted.classes.predicted_classes, &classes.predicted_classes);
      Append(predicted.classes.class_scores, &classes.class_scores);
      Append(predicted.classes.probabilities, &classes.probabilities);
    } else if (!predicted.classes.predicted_classes.empty()) {
      sink_->WriteClasses(predicted.classes.predicted_classes);
    } else {
      sink_->Write(predicted.predictions, predicted.variances, predicted.event_ids);
    }
    xs_.erase(xs_.begin(), xs_.begin() + static_cast<ptrdiff_t>(inputs * dim_));
    return absl::OkStatus();
  }

  template <typename T>
  static void Append(const std::vector<T>& values, std::vector<T>* all) {
    all->insert(all->end(), values.begin(), values.end());
  }

  const Client& client_;
  const ModelId& id_;
  const uint32_t dim_;
  const std::optional<RememberOptions>& remember_;
  const std::vector<std::string>* const given_ids_;
  const size_t batch_;
  PredictionSink* const sink_;
  std::vector<double> xs_;  // the inputs not sent yet
  uint64_t count_ = 0;
  RememberedPredictions collected_;
};

// Rows of numbers as a JSON array of arrays.
std::string JsonRows(const std::vector<std::vector<double>>& rows) {
  std::string json = "[";
  for (size_t i = 0; i < rows.size(); ++i) {
    absl::StrAppend(&json, i > 0 ? ",[" : "[");
    for (size_t c = 0; c < rows[i].size(); ++c) {
      absl::StrAppend(&json, c > 0 ? "," : "", JsonNumber(rows[i][c]));
    }
    absl::StrAppend(&json, "]");
  }
  return json + "]";
}

// Predict's JSON object on stdout, holding the collected predictions.
void PrintCollectedPredictions(const ModelId& id, const ModelConfig& config,
                               const PredictOptions& options, const PredictBatcher& batcher,
                               const Output& output) {
  const RememberedPredictions& collected = batcher.collected();
  JsonObject json = ModelJson(id);
  json.AddUint("count", batcher.count()).AddDoubles("predictions", collected.predictions);
  if (config.krls_tracker_kind()) json.AddDoubles("variances", collected.variances);
  if (options.remember.has_value()) json.AddStrings("event_ids", collected.event_ids);
  if (config.multiclass()) {
    const ClassPredictions& classes = collected.classes;
    json.AddStrings("predicted_classes", classes.predicted_classes)
        .AddRaw("class_scores", JsonRows(classes.class_scores));
    if (config.loss.type == LossType::kSoftmax) {
      json.AddRaw("probabilities", JsonRows(classes.probabilities));
    }
  }
  std::fprintf(output.out, "%s\n", json.str().c_str());
}

// Closes the sink and, when it is a file, says on Output::out where the `count`
// predictions went.
absl::Status CloseSink(PredictionSink& sink, const ModelId& id, const std::string& path,
                       uint64_t count, const Output& output) {
  if (absl::Status closed = sink.Close(); !closed.ok()) return closed;
  if (sink.to_file()) {
    if (output.json) {
      JsonObject json = ModelJson(id);
      json.AddUint("count", count).AddString("output", path);
      std::fprintf(output.out, "%s\n", json.str().c_str());
    } else {
      std::fprintf(output.out, "%s predictions written to %s\n", WithThousands(count).c_str(),
                   path.c_str());
    }
  }
  return absl::OkStatus();
}

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
  PredictBatcher batcher(client, id, dim, options, sink.get());
  if (absl::Status added = batcher.Add(xs); !added.ok()) return added;
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
      if (absl::Status added = batcher.Add(x); !added.ok()) return added;
    }
  }
  if (absl::Status done = batcher.Finish(); !done.ok()) return done;
  if (batcher.count() == 0) {
    return absl::InvalidArgumentError("no inputs to predict: give --x or rows in a file");
  }
  if (collect) {
    PrintCollectedPredictions(id, model->config, options, batcher, output);
    return absl::OkStatus();
  }
  return CloseSink(*sink, id, options.output_path, batcher.count(), output);
}

namespace {

// What `okl label` sent and was answered, for its summary.
struct LabelTally {
  uint64_t counts[3] = {0, 0, 0};  // by LabelOutcome
  uint64_t sent = 0;
  uint64_t steps = 0;               // the model's, after the last batch
  std::vector<std::string> ids;       // with outcomes, for --json
  std::vector<std::string> outcomes;

  // Counts a batch's answer, moving its ids out; prints a line per label unless --json.
  void Add(std::vector<EventLabel>& batch, const LabelResult& result, const Output& output) {
    std::string text;
    for (size_t i = 0; i < batch.size(); ++i) {
      const LabelOutcome outcome = result.outcomes[i];
      ++counts[static_cast<int>(outcome)];
      if (output.json) {
        ids.push_back(std::move(batch[i].event_id));
        outcomes.emplace_back(LabelOutcomeName(outcome));
      } else {
        absl::StrAppend(&text, batch[i].event_id, ",", LabelOutcomeName(outcome), "\n");
      }
    }
    std::fputs(text.c_str(), output.out);
    sent += batch.size();
    steps = result.steps;
  }

  uint64_t count(LabelOutcome outcome) const { return counts[static_cast<int>(outcome)]; }

  // `status`, saying how many labels were sent before it and that a rerun is safe.
  absl::Status SentBefore(const absl::Status& status) const {
    if (sent == 0) return status;
    return absl::Status(status.code(),
                        absl::StrCat(status.message(), " (", sent,
                                     " labels were sent before; a rerun of the whole input is "
                                     "safe: labels already applied answer duplicate)"));
  }

  // The summary: one JSON object on stdout, or a line on stderr.
  void Print(const ModelId& id, const Output& output) const {
    const uint64_t applied = count(LabelOutcome::kApplied);
    const uint64_t duplicate = count(LabelOutcome::kDuplicate);
    const uint64_t unknown = count(LabelOutcome::kUnknown);
    if (output.json) {
      JsonObject json = ModelJson(id);
      json.AddUint("count", sent)
          .AddUint("applied", applied)
          .AddUint("duplicate", duplicate)
          .AddUint("unknown", unknown)
          .AddUint("steps", steps)
          .AddStrings("event_ids", ids)
          .AddStrings("outcomes", outcomes);
      std::fprintf(output.out, "%s\n", json.str().c_str());
      return;
    }
    std::fprintf(
        output.err, "sent %s %s to %s: %s applied, %s duplicate, %s unknown; model %s steps\n",
        WithThousands(sent).c_str(), sent == 1 ? "label" : "labels", ModelLabel(id).c_str(),
        WithThousands(applied).c_str(), WithThousands(duplicate).c_str(),
        WithThousands(unknown).c_str(), WithThousands(steps).c_str());
  }
};

}  // namespace

absl::Status RunLabel(const Client& client, const ModelId& id, const LabelOptions& options,
                      const Output& output) {
  absl::StatusOr<std::unique_ptr<LabelReader>> reader = LabelReader::Open(options.inputs);
  if (!reader.ok()) return reader.status();
  const size_t batch_size = options.batch_size > 0 ? options.batch_size : 1;
  std::vector<EventLabel> batch;
  LabelTally tally;
  const auto send = [&]() -> absl::Status {
    if (batch.empty()) return absl::OkStatus();
    absl::StatusOr<LabelResult> result = client.Label(id, batch);
    if (!result.ok()) return tally.SentBefore(result.status());
    tally.Add(batch, *result, output);
    batch.clear();
    return absl::OkStatus();
  };
  std::string event_id;
  double y = 0;
  for (;;) {
    absl::StatusOr<bool> more = (*reader)->Next(&event_id, &y);
    if (!more.ok()) return tally.SentBefore(more.status());
    if (!*more) break;
    batch.push_back({.event_id = event_id, .y = y});
    if (batch.size() >= batch_size) {
      if (absl::Status done = send(); !done.ok()) return done;
    }
  }
  if (absl::Status done = send(); !done.ok()) return done;
  if (tally.sent == 0) return absl::InvalidArgumentError("no labels: give event_id,y lines");
  tally.Print(id, output);
  return absl::OkStatus();
}

}  // namespace okl::cli
