// client/cli/commands.cc
//
// The commands about whole models: create, get, list, delete, snapshot, restore, health.
// observe and predict are in cli_stream.cc, replay in cli_replay.cc.

#include "client/cli/commands.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "client/io/json_writer.h"
#include "core/runtime/file.h"
#include "core/select.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "proto/convert.h"

namespace okl::cli {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, absl::string_view what) {
  absl::StatusOr<std::string> pem = ReadFile(path);
  if (!pem.ok()) {
    return absl::Status(pem.status().code(),
                        absl::StrCat(what, " file: ", pem.status().message()));
  }
  return pem;
}

void Print(const Output& output, absl::string_view text) {
  std::fwrite(text.data(), 1, text.size(), output.out);
}

std::string ConfigText(const ModelConfig& config) {
  google::protobuf::TextFormat::Printer printer;
  printer.SetInitialIndentLevel(1);
  std::string text;
  printer.PrintToString(ToProto(config), &text);
  return text;
}

std::string ConfigJson(const ModelConfig& config) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(ToProto(config), &json, options).ok()) {
    return "null";
  }
  return json;
}

double MeanLoss(const ModelStats& stats) {
  return stats.steps > 0 ? stats.cumulative_loss / static_cast<double>(stats.steps) : 0.0;
}

std::string StatsJson(const ModelSummary& summary) {
  const ModelStats& stats = summary.stats;
  JsonObject json;
  json.AddUint("steps", stats.steps)
      .AddUint("expansion_size", stats.expansion_size)
      .AddDouble("cumulative_loss", stats.cumulative_loss)
      .AddDouble("mean_loss", MeanLoss(stats));
  const LossType loss = summary.config.loss.type;
  if (IsClassificationLoss(loss) || IsMulticlassLoss(loss)) {
    json.AddUint("mistakes", stats.mistakes);
  }
  if (IsMulticlassLoss(loss)) {
    json.AddUint("max_classes", summary.config.max_classes).AddStrings("classes", stats.classes);
  }
  if (const absl::string_view margin = MarginName(MarginKindOf(summary.config.loss.type)); !margin.empty()) {
    json.AddDouble(margin, stats.margin);
  }
  if (summary.config.offset) json.AddDouble("offset", stats.offset);
  json.AddUint("terms_removed", stats.terms_removed);
  if (summary.config.krls_tracker_kind()) {
    json.AddUint("dictionary_size", stats.expansion_size)
        .AddUint("bases_pruned", stats.terms_removed)
        .AddDouble("noise_variance", stats.noise_variance)
        .AddDouble("signal_power", stats.signal_power);
  }
  if (stats.truncation_error_bound.has_value()) {
    json.AddDouble("truncation_error_bound", *stats.truncation_error_bound);
  }
  if (summary.config.select_kind()) {
    std::string candidates = "[";
    for (size_t i = 0; i < stats.candidates.size(); ++i) {
      const CandidateStats& c = stats.candidates[i];
      JsonObject candidate;
      candidate.AddString("status", CandidateStatusName(c.status))
          .AddUint("steps", c.steps)
          .AddDouble("cumulative_loss", c.cumulative_loss)
          .AddDouble("recent_loss", c.recent_loss)
          .AddUint("started_at", c.started_at)
          .AddBool("serving", c.serving)
          .AddRaw("config", ConfigJson(c.config));
      absl::StrAppend(&candidates, i == 0 ? "" : ",", candidate.str());
    }
    json.AddUint("champion", stats.champion)
        .AddUint("champion_changes", stats.champion_changes)
        .AddRaw("candidates", candidates + "]");
  }
  if (stats.regret.has_value()) {
    JsonObject regret;
    regret.AddDouble("regret", stats.regret->regret)
        .AddUint("window", stats.regret->window)
        .AddUint("at_step", stats.regret->last_step)
        .AddDouble("duality_gap", stats.regret->duality_gap);
    json.AddRaw("regret", regret.str());
  }
  return json.str();
}

// "gaussian(gamma=0.1)": the kernel in a few characters, for `okl list`.
std::string KernelShort(const KernelConfig& kernel) {
  switch (kernel.type) {
    case KernelType::kGaussian:
    case KernelType::kLaplacian:
      return absl::StrFormat("%s(gamma=%g)", KernelTypeName(kernel.type), kernel.gamma);
    case KernelType::kLinear:
      return absl::StrFormat("linear(c=%g)", kernel.c);
    case KernelType::kPolynomial:
      return absl::StrFormat("polynomial(%g,%g,%d)", kernel.gamma, kernel.c, kernel.degree);
    case KernelType::kHeat:
      return absl::StrFormat("heat(t=%g)", kernel.t);
  }
  return std::string(KernelTypeName(kernel.type));
}

// A candidate's kind, size, kernel and step in one line, for `okl get`.
std::string CandidateText(const ModelConfig& config) {
  if (config.krls_tracker_kind()) {
    return absl::StrFormat("KRLS-T M=%d %s noise=%g", config.krls_tracker.max_basis,
                           KernelShort(config.kernel), config.krls_tracker.noise_variance);
  }
  const std::string step =
      absl::StrFormat("%s eta0=%g lambda=%g", ScheduleName(config.learning_rate.schedule),
                      config.learning_rate.eta0, config.lambda);
  if (config.random_features.dimension > 0) {
    return absl::StrFormat("RFF D=%d %s %s", config.random_features.dimension,
                           KernelShort(config.kernel), step);
  }
  return absl::StrFormat("NORMA %s B=%d %s %s", BudgetPolicyName(config.budget.policy),
                         config.budget.max_terms, KernelShort(config.kernel), step);
}

}  // namespace

absl::StatusOr<Client> Connect(const ConnectionOptions& options) {
  ClientOptions client_options;
  client_options.deadline = options.timeout;
  client_options.bearer_token = options.token;
  client_options.use_tls =
      options.tls || !options.tls_ca_file.empty() || !options.tls_cert_file.empty();
  if (!options.tls_ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadPem(options.tls_ca_file, "--tls_ca");
    if (!ca.ok()) return ca.status();
    client_options.tls_root_certs = *ca;
  }
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
  }
  if (!options.tls_cert_file.empty()) {
    absl::StatusOr<std::string> cert = ReadPem(options.tls_cert_file, "--tls_cert");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPem(options.tls_key_file, "--tls_key");
    if (!key.ok()) return key.status();
    client_options.tls_cert_chain = *cert;
    client_options.tls_private_key = *key;
  }
  return Client::Connect(options.server, client_options);
}

std::string ModelLabel(const ModelId& id) { return absl::StrCat(id.tenant, "/", id.model); }

JsonObject ModelJson(const ModelId& id) {
  JsonObject json;
  json.AddString("tenant", id.tenant).AddString("model", id.model);
  return json;
}

std::string ModelSizeText(const ModelConfig& config, uint64_t expansion_size) {
  return absl::StrCat(expansion_size, config.random_features.dimension > 0 ? " random features"
                                      : config.krls_tracker_kind()         ? " bases"
                                                                           : " terms");
}

std::string EventsText(const ModelEventCounts& events) {
  if (events == ModelEventCounts{}) return "";
  std::string text;
  absl::StrAppendFormat(&text, "events pending   %d\n", events.pending);
  absl::StrAppendFormat(&text, "labels applied   %d", events.applied);
  if (events.served_labels > 0) {
    absl::StrAppendFormat(&text, " (served loss %.6g a label)",
                          events.served_loss / static_cast<double>(events.served_labels));
  }
  absl::StrAppendFormat(&text, "\nevents expired   %d\n", events.expired);
  absl::StrAppendFormat(&text, "labels duplicate %d\n", events.duplicates);
  return text;
}

std::string EventsJson(const ModelEventCounts& events) {
  JsonObject json;
  json.AddUint("pending", events.pending)
      .AddUint("applied", events.applied)
      .AddUint("expired", events.expired)
      .AddUint("duplicates", events.duplicates)
      .AddDouble("served_loss", events.served_loss)
      .AddUint("served_labels", events.served_labels);
  return json.str();
}

std::string SummaryText(const ModelSummary& summary, const ModelEventCounts* events) {
  const ModelStats& stats = summary.stats;
  std::string text;
  absl::StrAppendFormat(&text, "model            %s/%s\n", summary.tenant, summary.model);
  absl::StrAppendFormat(&text, "steps            %d\n", stats.steps);
  const bool random_features = summary.config.random_features.dimension > 0;
  const bool tracker = summary.config.krls_tracker_kind();
  absl::StrAppendFormat(&text, "%s%d\n",
                        random_features ? "random features  "
                        : tracker       ? "dictionary size  "
                                        : "expansion size   ",
                        stats.expansion_size);
  absl::StrAppendFormat(&text, "cumulative loss  %.6g\n", stats.cumulative_loss);
  absl::StrAppendFormat(&text, "mean loss        %.6g\n", MeanLoss(stats));
  const LossType loss = summary.config.loss.type;
  if (IsMulticlassLoss(loss)) {
    // The first classes by name (all of them with --json).
    constexpr size_t kNamed = 12;
    const size_t named = std::min(stats.classes.size(), kNamed);
    absl::StrAppendFormat(
        &text, "classes          %d of at most %d%s%s%s\n", stats.classes.size(),
        summary.config.max_classes, named > 0 ? ": " : "",
        absl::StrJoin(absl::MakeConstSpan(stats.classes).first(named), ", "),
        stats.classes.size() > named ? ", ..." : "");
  }
  if (IsClassificationLoss(loss) || IsMulticlassLoss(loss)) {
    const double rate = stats.steps > 0 ? 100.0 * static_cast<double>(stats.mistakes) /
                                              static_cast<double>(stats.steps)
                                        : 0.0;
    absl::StrAppendFormat(&text, "mistakes         %d (%.2f%%)\n", stats.mistakes, rate);
  }
  if (const absl::string_view margin = MarginName(MarginKindOf(summary.config.loss.type)); !margin.empty()) {
    absl::StrAppendFormat(&text, "%-16s %.6g%s\n", margin, stats.margin,
                          summary.config.loss.nu > 0 ? " (learned)" : "");
  }
  if (summary.config.offset) {
    absl::StrAppendFormat(&text, "offset           %.6g\n", stats.offset);
  }
  if (tracker) {
    absl::StrAppendFormat(&text, "bases pruned     %d\n", stats.terms_removed);
    absl::StrAppendFormat(&text, "noise variance   %.6g (estimated, in the labels' units)\n",
                          stats.noise_variance);
    absl::StrAppendFormat(&text, "signal power     %.6g\n", stats.signal_power);
  } else if (!random_features) {
    absl::StrAppendFormat(&text, "terms removed    %d\n", stats.terms_removed);
  }
  if (stats.truncation_error_bound.has_value()) {
    absl::StrAppendFormat(&text, "truncation bound %.6g\n", *stats.truncation_error_bound);
  }
  if (summary.config.select_kind()) {
    if (stats.candidates.empty()) {
      absl::StrAppendFormat(
          &text, "candidates       none yet: the default set is built after %d examples\n",
          kScaleExamples);
    } else {
      absl::StrAppendFormat(&text, "champion         #%d (%d changes)\n", stats.champion,
                            stats.champion_changes);
      const auto serving = std::count_if(stats.candidates.begin(), stats.candidates.end(),
                                         [](const CandidateStats& c) { return c.serving; });
      absl::StrAppendFormat(&text, "predicts with    %s\n",
                            serving > 1 ? absl::StrCat("the mean of ", serving, " leaders (*)")
                                        : std::string("the champion (*)"));
      absl::StrAppend(&text, "candidates       #   status   steps  recent loss  model\n");
      for (size_t i = 0; i < stats.candidates.size(); ++i) {
        const CandidateStats& c = stats.candidates[i];
        absl::StrAppendFormat(&text, "                 %-3s %-8s %-6d %-12.6g %s\n",
                              absl::StrCat(i, c.serving ? "*" : ""),
                              CandidateStatusName(c.status), c.steps, c.recent_loss,
                              CandidateText(c.config));
      }
    }
  }
  if (stats.regret.has_value()) {
    absl::StrAppendFormat(
        &text,
        "regret           %.6g over %d examples, at step %d (comparator duality gap %.3g)\n",
        stats.regret->regret, stats.regret->window, stats.regret->last_step,
        stats.regret->duality_gap);
  }
  if (events != nullptr) text += EventsText(*events);
  absl::StrAppend(&text, "config\n", ConfigText(summary.config));
  return text;
}

std::string SummaryJson(const ModelSummary& summary, const ModelEventCounts* events) {
  JsonObject json;
  json.AddString("tenant", summary.tenant)
      .AddString("model", summary.model)
      .AddRaw("config", ConfigJson(summary.config))
      .AddRaw("stats", StatsJson(summary));
  if (events != nullptr) json.AddRaw("events", EventsJson(*events));
  return json.str();
}

absl::Status RunCreate(const Client& client, const ModelId& id, const ModelConfig& config,
                       const Output& output) {
  absl::StatusOr<ModelSummary> created = client.CreateModel(id, config);
  if (!created.ok()) return created.status();
  if (output.json) {
    Print(output, absl::StrCat(SummaryJson(*created), "\n"));
  } else {
    Print(output, absl::StrCat("created ", ModelLabel(id), "\n", ConfigText(created->config)));
  }
  return absl::OkStatus();
}

absl::Status RunGet(const Client& client, const ModelId& id, const Output& output) {
  ModelEventCounts events;
  absl::StatusOr<ModelSummary> summary = client.GetModel(id, &events);
  if (!summary.ok()) return summary.status();
  Print(output, output.json ? absl::StrCat(SummaryJson(*summary, &events), "\n")
                            : SummaryText(*summary, &events));
  return absl::OkStatus();
}

absl::Status RunList(const Client& client, absl::string_view tenant, const Output& output) {
  std::vector<ModelEventCounts> events;
  absl::StatusOr<std::vector<ModelSummary>> models = client.ListModels(tenant, &events);
  if (!models.ok()) return models.status();
  if (output.json) {
    std::string array = "[";
    for (size_t i = 0; i < models->size(); ++i) {
      absl::StrAppend(&array, i == 0 ? "" : ",", SummaryJson((*models)[i], &events[i]));
    }
    array += "]";
    JsonObject json;
    json.AddRaw("models", array);
    Print(output, absl::StrCat(json.str(), "\n"));
    return absl::OkStatus();
  }
  if (models->empty()) {
    Print(output, tenant.empty() ? "no models\n"
                                 : absl::StrCat("no models of tenant \"", tenant, "\"\n"));
    return absl::OkStatus();
  }
  // PENDING: events remembered and awaiting their labels (okl predict --remember).
  std::vector<std::vector<std::string>> rows = {
      {"TENANT", "MODEL", "DIM", "KERNEL", "LOSS", "STEPS", "TERMS", "MEAN LOSS", "PENDING"}};
  for (size_t i = 0; i < models->size(); ++i) {
    const ModelSummary& m = (*models)[i];
    rows.push_back(
        {m.tenant, m.model, absl::StrCat(m.config.dim),
         m.config.select_kind() ? std::string("select") : KernelShort(m.config.kernel),
         std::string(LossTypeName(m.config.loss.type)), absl::StrCat(m.stats.steps),
         absl::StrCat(m.stats.expansion_size), absl::StrFormat("%.6g", MeanLoss(m.stats)),
         absl::StrCat(events[i].pending)});
  }
  std::vector<size_t> widths(rows.front().size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  std::string text;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      absl::StrAppend(&line, row[c]);
      if (c + 1 < row.size()) line.append(widths[c] - row[c].size() + 2, ' ');
    }
    absl::StrAppend(&text, line, "\n");
  }
  Print(output, text);
  return absl::OkStatus();
}

absl::Status RunDelete(const Client& client, const ModelId& id, const Output& output) {
  if (absl::Status deleted = client.DeleteModel(id); !deleted.ok()) return deleted;
  if (output.json) {
    Print(output, absl::StrCat(ModelJson(id).AddBool("deleted", true).str(), "\n"));
  } else {
    Print(output, absl::StrCat("deleted ", ModelLabel(id), "\n"));
  }
  return absl::OkStatus();
}

absl::Status RunSnapshot(const Client& client, const ModelId& id, const std::string& path,
                         const Output& output) {
  if (absl::Status written = client.SnapshotToFile(id, path); !written.ok()) return written;
  struct stat st;
  const uint64_t bytes = ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  if (output.json) {
    JsonObject json = ModelJson(id);
    json.AddString("output", path).AddUint("bytes", bytes);
    Print(output, absl::StrCat(json.str(), "\n"));
  } else {
    Print(output, absl::StrCat("snapshot of ", ModelLabel(id), " written to ", path, " (",
                               bytes, " bytes)\n"));
  }
  return absl::OkStatus();
}

absl::Status RunRestore(const Client& client, const ModelId& id, const std::string& path,
                        const Output& output) {
  absl::StatusOr<ModelSummary> restored = client.RestoreFromFile(id, path);
  if (!restored.ok()) return restored.status();
  if (output.json) {
    Print(output, absl::StrCat(SummaryJson(*restored), "\n"));
  } else {
    Print(output,
          absl::StrCat("restored ", ModelLabel(id), " from ", path, ": ", restored->stats.steps,
                       " steps, ",
                       ModelSizeText(restored->config, restored->stats.expansion_size), "\n"));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> RunHealth(const Client& client, absl::string_view service,
                               const Output& output) {
  absl::StatusOr<bool> serving = client.Health(service);
  if (!serving.ok()) return serving.status();
  if (output.json) {
    JsonObject json;
    json.AddString("service", service)
        .AddString("status", *serving ? "SERVING" : "NOT_SERVING");
    Print(output, absl::StrCat(json.str(), "\n"));
  }
  return *serving;
}

}  // namespace okl::cli
