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

// `values` as a JSON array of strings.
std::string JsonStrings(absl::Span<const std::string> values) {
  std::string json = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    absl::StrAppend(&json, i == 0 ? "" : ",", JsonString(values[i]));
  }
  return json + "]";
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
  // Ids given: every input is read before the first is sent, so that a count that does
  // not match remembers nothing.
  const std::vector<std::string>* const given_ids =
      options.remember.has_value() && !options.remember->event_ids.empty()
          ? &options.remember->event_ids
          : nullptr;
  const auto ids_mismatch = [&](size_t inputs) {
    return absl::InvalidArgumentError(
        absl::StrCat("--event_ids gives ", given_ids->size(), " ids for ", inputs,
                     inputs > given_ids->size() ? " or more" : "",
                     " inputs: give one per input (nothing was predicted)"));
  };
  std::vector<double> all;
  std::vector<double> all_variances;  // a KRLS tracker's
  std::vector<std::string> all_ids;   // remembered
  std::vector<double> variances;
  uint64_t count = 0;
  // Sends the first `inputs` inputs of xs.
  const auto send = [&](size_t inputs) -> absl::Status {
    const absl::Span<const double> batch = absl::MakeConstSpan(xs).subspan(0, inputs * dim);
    std::vector<double> predictions;
    std::vector<std::string> ids;
    if (options.remember.has_value()) {
      RememberOptions remember = *options.remember;
      remember.event_ids.clear();
      if (given_ids != nullptr) {
        remember.event_ids.assign(given_ids->begin() + static_cast<ptrdiff_t>(count),
                                  given_ids->begin() + static_cast<ptrdiff_t>(count + inputs));
      }
      absl::StatusOr<RememberedPredictions> remembered =
          client.PredictRemembering(id, batch, dim, remember);
      if (!remembered.ok()) return remembered.status();
      predictions = std::move(remembered->predictions);
      variances = std::move(remembered->variances);
      ids = std::move(remembered->event_ids);
    } else {
      absl::StatusOr<std::vector<double>> predicted =
          client.Predict(id, batch, dim, /*novel=*/nullptr, &variances);
      if (!predicted.ok()) return predicted.status();
      predictions = *std::move(predicted);
    }
    count += predictions.size();
    if (collect) {
      all.insert(all.end(), predictions.begin(), predictions.end());
      all_variances.insert(all_variances.end(), variances.begin(), variances.end());
      all_ids.insert(all_ids.end(), ids.begin(), ids.end());
    } else {
      sink->Write(predictions, variances, ids);
    }
    xs.erase(xs.begin(), xs.begin() + static_cast<ptrdiff_t>(inputs * dim));
    return absl::OkStatus();
  };
  const size_t batch = options.batch_size > 0 ? options.batch_size : 1;
  // Sends full batches (all of xs with `all_of_it`), unless the ids are still being counted.
  const auto flush = [&](bool all_of_it) -> absl::Status {
    if (given_ids != nullptr && !all_of_it) return absl::OkStatus();
    while (xs.size() / dim >= batch || (all_of_it && !xs.empty())) {
      if (absl::Status sent = send(std::min(batch, xs.size() / dim)); !sent.ok()) return sent;
    }
    return absl::OkStatus();
  };
  if (given_ids != nullptr && xs.size() / dim > given_ids->size()) {
    return ids_mismatch(xs.size() / dim);
  }
  if (absl::Status done = flush(false); !done.ok()) return done;
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
      if (given_ids != nullptr && xs.size() / dim > given_ids->size()) {
        return ids_mismatch(xs.size() / dim);
      }
      if (absl::Status done = flush(false); !done.ok()) return done;
    }
  }
  if (given_ids != nullptr && xs.size() / dim != given_ids->size()) {
    return ids_mismatch(xs.size() / dim);
  }
  if (absl::Status done = flush(true); !done.ok()) return done;
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
    if (options.remember.has_value()) json.AddRaw("event_ids", JsonStrings(all_ids));
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

absl::Status RunLabel(const Client& client, const ModelId& id, const LabelOptions& options,
                      const Output& output) {
  absl::StatusOr<std::unique_ptr<LabelReader>> reader = LabelReader::Open(options.inputs);
  if (!reader.ok()) return reader.status();
  const size_t batch_size = options.batch_size > 0 ? options.batch_size : 1;
  std::vector<EventLabel> batch;
  std::vector<std::string> all_ids;  // for --json
  std::vector<std::string> all_outcomes;
  uint64_t counts[3] = {0, 0, 0};  // by LabelOutcome
  uint64_t sent = 0;
  uint64_t steps = 0;
  const auto sent_before = [&](const absl::Status& status) {
    if (sent == 0) return status;
    return absl::Status(status.code(),
                        absl::StrCat(status.message(), " (", sent,
                                     " labels were sent before; a rerun of the whole input is "
                                     "safe: labels already applied answer duplicate)"));
  };
  const auto send = [&]() -> absl::Status {
    if (batch.empty()) return absl::OkStatus();
    absl::StatusOr<LabelResult> result = client.Label(id, batch);
    if (!result.ok()) return sent_before(result.status());
    std::string text;
    for (size_t i = 0; i < batch.size(); ++i) {
      const LabelOutcome outcome = result->outcomes[i];
      ++counts[static_cast<int>(outcome)];
      if (output.json) {
        all_ids.push_back(std::move(batch[i].event_id));
        all_outcomes.emplace_back(LabelOutcomeName(outcome));
      } else {
        absl::StrAppend(&text, batch[i].event_id, ",", LabelOutcomeName(outcome), "\n");
      }
    }
    std::fputs(text.c_str(), output.out);
    sent += batch.size();
    steps = result->steps;
    batch.clear();
    return absl::OkStatus();
  };
  std::string event_id;
  double y = 0;
  for (;;) {
    absl::StatusOr<bool> more = (*reader)->Next(&event_id, &y);
    if (!more.ok()) return sent_before(more.status());
    if (!*more) break;
    batch.push_back({.event_id = event_id, .y = y});
    if (batch.size() >= batch_size) {
      if (absl::Status done = send(); !done.ok()) return done;
    }
  }
  if (absl::Status done = send(); !done.ok()) return done;
  if (sent == 0) return absl::InvalidArgumentError("no labels: give event_id,y lines");
  const uint64_t applied = counts[static_cast<int>(LabelOutcome::kApplied)];
  const uint64_t duplicate = counts[static_cast<int>(LabelOutcome::kDuplicate)];
  const uint64_t unknown = counts[static_cast<int>(LabelOutcome::kUnknown)];
  if (output.json) {
    JsonObject json;
    json.AddString("tenant", id.tenant)
        .AddString("model", id.model)
        .AddUint("count", sent)
        .AddUint("applied", applied)
        .AddUint("duplicate", duplicate)
        .AddUint("unknown", unknown)
        .AddUint("steps", steps)
        .AddRaw("event_ids", JsonStrings(all_ids))
        .AddRaw("outcomes", JsonStrings(all_outcomes));
    std::fprintf(output.out, "%s\n", json.str().c_str());
  } else {
    std::fprintf(
        output.err, "sent %s %s to %s: %s applied, %s duplicate, %s unknown; model %s steps\n",
        WithThousands(sent).c_str(), sent == 1 ? "label" : "labels", ModelLabel(id).c_str(),
        WithThousands(applied).c_str(), WithThousands(duplicate).c_str(),
        WithThousands(unknown).c_str(), WithThousands(steps).c_str());
  }
  return absl::OkStatus();
}

}  // namespace okl::cli
