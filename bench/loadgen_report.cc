// bench/loadgen_report.cc

#include "bench/loadgen_report.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "client/io/json_writer.h"

namespace okl::loadgen {
namespace {

using ::okl::JsonString;

constexpr double kPredictVsHealthTarget = 0.7;
constexpr double kStreamExamplesTarget = 100000;
// Delayed feedback's targets (docs/delayed-feedback.md): a remembering Predict at 0.7x a
// plain one's rate (same batch), and labels applied into one model in batches of 100.
constexpr double kRememberVsPredictTarget = 0.7;
constexpr double kLabelsTarget = 50000;
constexpr int kTargetLabelBatch = 100;
constexpr double kPredictP99TargetUs = 2000;
// The conditions the targets are stated for.
constexpr int kTargetCallers = 32;
constexpr int kTargetDim = 16;
constexpr int kTargetBudget = 256;
constexpr int kTargetStreamBatch = 256;

std::string JsonNumber(double value) {
  if (!std::isfinite(value)) return "null";
  return absl::StrFormat("%.6g", value);
}

const Measurement* Find(const std::vector<Measurement>& all, absl::string_view name) {
  for (const Measurement& m : all) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

// "plaintext", "tls" or "mtls", with "+token" when calls carry one.
std::string SecurityName(const Settings& s) {
  std::string name = s.tls_root_certs.empty()   ? "plaintext"
                     : s.tls_cert_chain.empty() ? "tls"
                                                : "mtls";
  if (!s.authorization.empty()) name += "+token";
  return name;
}

}  // namespace

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return absl::StrCat(a, " ", b, " ", c);
}

std::vector<Target> EvaluateTargets(const Settings& s, const std::vector<Measurement>& all) {
  std::string conditions;
  if (s.dim != kTargetDim || s.budget != kTargetBudget) {
    conditions = absl::StrCat("target is for d=", kTargetDim, ", B=", kTargetBudget);
  }
  auto note = [&](bool callers_matter, bool stream) {
    std::vector<std::string> notes;
    if (!conditions.empty()) notes.push_back(conditions);
    if (callers_matter && s.callers != kTargetCallers) {
      notes.push_back(absl::StrCat("target is for ", kTargetCallers, " callers"));
    }
    if (stream && (s.stream_batch != kTargetStreamBatch || s.models != 1)) {
      notes.push_back(absl::StrCat("target is for one model, batches of ", kTargetStreamBatch));
    }
    return absl::StrJoin(notes, "; ");
  };

  std::vector<Target> targets;
  const Measurement* health = Find(all, "health");
  const Measurement* predict = Find(all, "predict");
  const Measurement* stream = Find(all, "stream");

  Target ratio;
  ratio.name = "predict_vs_health";
  ratio.description = "Predict rate / health Check rate";
  ratio.goal = absl::StrFormat(">= %.2f", kPredictVsHealthTarget);
  ratio.note = note(true, false);
  if (health != nullptr && predict != nullptr && health->requests_per_s > 0) {
    ratio.value = predict->requests_per_s / health->requests_per_s;
    ratio.measured = absl::StrFormat("%.3f", ratio.value);
    ratio.pass = ratio.value >= kPredictVsHealthTarget;
  }
  targets.push_back(ratio);

  Target examples;
  examples.name = "stream_examples_per_s";
  examples.description = "ObserveStream examples/s";
  examples.goal = absl::StrFormat(">= %.0f", kStreamExamplesTarget);
  examples.note = note(false, true);
  if (stream != nullptr) {
    examples.value = stream->examples_per_s;
    examples.measured = absl::StrFormat("%.0f", examples.value);
    examples.pass = examples.value >= kStreamExamplesTarget;
  }
  targets.push_back(examples);

  Target p99;
  p99.name = "predict_p99_us";
  p99.description = "Predict p99 (us)";
  p99.goal = absl::StrFormat("<= %.0f", kPredictP99TargetUs);
  p99.note = note(true, false);
  if (predict != nullptr && predict->result.completed > 0) {
    p99.value = predict->p99_us;
    p99.measured = absl::StrFormat("%.0f", p99.value);
    p99.pass = p99.value <= kPredictP99TargetUs;
  }
  targets.push_back(p99);

  Target p99_at_half;
  p99_at_half.name = "predict_p99_us_at_half_max";
  p99_at_half.description = "Predict p99 at 50% of max (us)";
  p99_at_half.goal = absl::StrFormat("<= %.0f", kPredictP99TargetUs);
  p99_at_half.note = conditions;
  const Measurement* half = Find(all, "predict@50%");
  if (half != nullptr && half->result.completed > 0) {
    p99_at_half.value = half->p99_us;
    p99_at_half.measured = absl::StrFormat("%.0f", p99_at_half.value);
    p99_at_half.pass = p99_at_half.value <= kPredictP99TargetUs;
  }
  targets.push_back(p99_at_half);

  // Delayed feedback (docs/delayed-feedback.md), when those scenarios ran.
  const Measurement* remember = Find(all, "remember");
  if (remember != nullptr && predict != nullptr && predict->requests_per_s > 0) {
    Target ratio;
    ratio.name = "remember_vs_predict";
    ratio.description = "remembering Predict / Predict";
    ratio.goal = absl::StrFormat(">= %.2f", kRememberVsPredictTarget);
    ratio.note = note(true, false);
    ratio.value = remember->requests_per_s / predict->requests_per_s;
    ratio.measured = absl::StrFormat("%.3f", ratio.value);
    ratio.pass = ratio.value >= kRememberVsPredictTarget;
    targets.push_back(ratio);
  }
  if (const Measurement* label = Find(all, "label"); label != nullptr) {
    Target labels;
    labels.name = "labels_per_s";
    labels.description = "labels applied/s";
    labels.goal = absl::StrFormat(">= %.0f", kLabelsTarget);
    std::vector<std::string> notes;
    if (!conditions.empty()) notes.push_back(conditions);
    if (s.label_batch != kTargetLabelBatch || s.models != 1) {
      notes.push_back(absl::StrCat("target is for one model, batches of ", kTargetLabelBatch));
    }
    labels.note = absl::StrJoin(notes, "; ");
    labels.value = label->examples_per_s;
    labels.measured = absl::StrFormat("%.0f", labels.value);
    labels.pass = labels.value >= kLabelsTarget;
    targets.push_back(labels);
  }
  return targets;
}

void PrintJson(const Settings& s, bool spawned, const std::vector<Measurement>& all,
               const std::vector<Target>& targets, const std::string& load_before,
               const std::string& load_after) {
  std::string json = "{\n";
  absl::StrAppend(&json, "  \"server\": ", JsonString(s.address), ",\n");
  absl::StrAppend(&json, "  \"spawned_server\": ", spawned ? "true" : "false", ",\n");
  absl::StrAppend(&json, "  \"pinning\": ", s.pinning.empty() ? "null" : JsonString(s.pinning),
                  ",\n");
  absl::StrAppend(&json, "  \"security\": ", JsonString(SecurityName(s)), ",\n");
  absl::StrAppend(&json, "  \"client_api\": ", JsonString(ClientApiName(s.api)), ",\n");
  absl::StrAppend(&json, "  \"client_threads\": ", s.client_threads, ",\n");
  absl::StrAppend(&json, "  \"callers\": ", s.callers, ",\n");
  absl::StrAppend(&json, "  \"channels\": ", s.channels, ",\n");
  absl::StrAppend(&json, "  \"models\": ", s.models, ",\n");
  absl::StrAppend(&json, "  \"dim\": ", s.dim, ",\n");
  absl::StrAppend(&json, "  \"budget\": ", s.budget, ",\n");
  absl::StrAppend(&json, "  \"predict_batch\": ", s.predict_batch, ",\n");
  absl::StrAppend(&json, "  \"stream_batch\": ", s.stream_batch, ",\n");
  absl::StrAppend(&json, "  \"stream_callers\": ", s.stream_callers, ",\n");
  absl::StrAppend(&json, "  \"stream_messages\": ", s.stream_messages, ",\n");
  absl::StrAppend(&json, "  \"duration_s\": ", JsonNumber(absl::ToDoubleSeconds(s.duration)),
                  ",\n");
  absl::StrAppend(&json, "  \"repetitions\": ", s.repetitions, ",\n");
  absl::StrAppend(&json, "  \"warmup_s\": ", JsonNumber(absl::ToDoubleSeconds(s.warmup)),
                  ",\n");
  absl::StrAppend(&json, "  \"cpus\": ", std::thread::hardware_concurrency(), ",\n");
  absl::StrAppend(&json, "  \"load_average_before\": ", JsonString(load_before), ",\n");
  absl::StrAppend(&json, "  \"load_average_after\": ", JsonString(load_after), ",\n");
  absl::StrAppend(&json, "  \"scenarios\": {");
  for (size_t i = 0; i < all.size(); ++i) {
    const Measurement& m = all[i];
    absl::StrAppend(&json, i == 0 ? "\n" : ",\n", "    ", JsonString(m.name), ": {");
    absl::StrAppend(&json, "\"requests\": ", m.result.completed);
    if (m.offered_rate > 0) {
      absl::StrAppend(&json, ", \"offered_per_s\": ", JsonNumber(m.offered_rate));
      absl::StrAppend(&json, ", \"send_lag_p99_us\": ", JsonNumber(m.send_lag_p99_us));
    }
    absl::StrAppend(&json, ", \"requests_per_s\": ", JsonNumber(m.requests_per_s));
    if (m.has_examples) {
      absl::StrAppend(&json, ", \"examples_per_s\": ", JsonNumber(m.examples_per_s));
    }
    if (m.stream) {
      absl::StrAppend(&json, ", \"streams\": ", m.result.streams);
      absl::StrAppend(&json, ", \"acknowledged_examples_per_s\": ",
                      JsonNumber(m.result.acknowledged_messages * s.stream_batch / m.seconds));
    }
    absl::StrAppend(&json, ", \"p50_us\": ", JsonNumber(m.p50_us));
    absl::StrAppend(&json, ", \"p90_us\": ", JsonNumber(m.p90_us));
    absl::StrAppend(&json, ", \"p99_us\": ", JsonNumber(m.p99_us));
    absl::StrAppend(&json, ", \"p999_us\": ", JsonNumber(m.p999_us));
    absl::StrAppend(&json, ", \"errors\": ", m.result.errors);
    if (!m.result.first_error.empty()) {
      absl::StrAppend(&json, ", \"first_error\": ", JsonString(m.result.first_error));
    }
    absl::StrAppend(&json, ", \"client_cpu_cores\": ", JsonNumber(m.client_cpu));
    if (m.requests_per_s > 0) {
      absl::StrAppend(&json, ", \"client_cpu_us_per_request\": ",
                      JsonNumber(m.client_cpu / m.requests_per_s * 1e6));
    }
    if (m.server_cpu >= 0) {
      absl::StrAppend(&json, ", \"server_cpu_cores\": ", JsonNumber(m.server_cpu));
      if (m.requests_per_s > 0) {
        absl::StrAppend(&json, ", \"server_cpu_us_per_request\": ",
                        JsonNumber(m.server_cpu / m.requests_per_s * 1e6));
      }
    }
    if (m.run_rates.size() > 1) {
      absl::StrAppend(&json, ", \"run_rates\": [");
      for (size_t r = 0; r < m.run_rates.size(); ++r) {
        absl::StrAppend(&json, r == 0 ? "" : ", ", JsonNumber(m.run_rates[r]));
      }
      absl::StrAppend(&json, "], \"run_other_cpu_cores\": [");
      for (size_t r = 0; r < m.run_other_cpu.size(); ++r) {
        absl::StrAppend(&json, r == 0 ? "" : ", ", JsonNumber(m.run_other_cpu[r]));
      }
      absl::StrAppend(&json, "]");
    }
    if (m.run_p99_us.size() > 1) {
      absl::StrAppend(&json, ", \"run_p99_us\": [");
      for (size_t r = 0; r < m.run_p99_us.size(); ++r) {
        absl::StrAppend(&json, r == 0 ? "" : ", ", JsonNumber(m.run_p99_us[r]));
      }
      absl::StrAppend(&json, "]");
    }
    if (m.machine_cpu >= 0) {
      absl::StrAppend(&json, ", \"machine_cpu_cores\": ", JsonNumber(m.machine_cpu));
    }
    absl::StrAppend(&json, "}");
  }
  absl::StrAppend(&json, "\n  },\n");
  const Target& ratio = targets[0];
  absl::StrAppend(&json, "  \"predict_vs_health\": ",
                  ratio.pass.has_value() ? JsonNumber(ratio.value) : "null", ",\n");
  absl::StrAppend(&json, "  \"targets\": {");
  for (size_t i = 0; i < targets.size(); ++i) {
    const Target& t = targets[i];
    absl::StrAppend(&json, i == 0 ? "\n" : ",\n", "    ", JsonString(t.name),
                    ": {\"value\": ", t.pass.has_value() ? JsonNumber(t.value) : "null",
                    ", \"goal\": ", JsonString(t.goal), ", \"result\": ",
                    JsonString(!t.pass.has_value() ? "not run"
                               : *t.pass           ? "PASS"
                                                   : "MISS"));
    if (!t.note.empty()) absl::StrAppend(&json, ", \"note\": ", JsonString(t.note));
    absl::StrAppend(&json, "}");
  }
  absl::StrAppend(&json, "\n  }\n}\n");
  std::fputs(json.c_str(), stdout);
  std::fflush(stdout);
}

std::string Thousands(double value) {
  const int64_t n = std::llround(value);
  std::string digits = absl::StrCat(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

void PrintTable(const Settings& s, bool spawned, const std::vector<Measurement>& all,
                const std::vector<Target>& targets, const std::string& load_before,
                const std::string& load_after) {
  std::string out = absl::StrFormat(
      "\nokl_loadgen: %s%s, %s; client %s%s; %d callers over %d channels; %d model(s), d=%d, "
      "B=%d; %s per scenario after %s warm-up, best of %d run(s)%s\nload average before %s, "
      "after %s (%u CPUs)\n\n",
      s.address, spawned ? " (spawned)" : "", SecurityName(s), ClientApiName(s.api),
      s.api == ClientApi::kAsync ? absl::StrCat(" x", s.client_threads, " thread(s)") : "",
      s.callers, s.channels, s.models, s.dim, s.budget, absl::FormatDuration(s.duration),
      absl::FormatDuration(s.warmup), s.repetitions,
      s.pinning.empty() ? "" : absl::StrCat("; ", s.pinning), load_before, load_after,
      std::thread::hardware_concurrency());
  absl::StrAppend(
      &out, absl::StrFormat("%-15s %11s %11s %9s %9s %9s %7s %7s %7s %7s\n", "scenario",
                            "requests/s", "examples/s", "p50 us", "p99 us", "p999 us", "errors",
                            "client", "server", "others"));
  for (const Measurement& m : all) {
    absl::StrAppend(
        &out, absl::StrFormat("%-15s %11s %11s %9s %9s %9s %7d %7s %7s %7s\n", m.name,
                              Thousands(m.requests_per_s),
                              m.has_examples ? Thousands(m.examples_per_s) : "-",
                              Thousands(m.p50_us), Thousands(m.p99_us), Thousands(m.p999_us),
                              m.result.errors, absl::StrFormat("%.2f", m.client_cpu),
                              m.server_cpu >= 0 ? absl::StrFormat("%.2f", m.server_cpu) : "-",
                              m.server_cpu >= 0 && m.machine_cpu >= 0
                                  ? absl::StrFormat("%.2f", m.other_cpu())
                                  : "-"));
  }
  absl::StrAppend(&out,
                  "(client, server, others: CPU cores each used during the window -- others "
                  "is every other process of the machine, i.e. noise; stream: requests are "
                  "messages, latency is per stream of ",
                  s.stream_messages,
                  " messages; NAME@F%: open loop at F% of NAME's "
                  "closed-loop rate, NAME@R/s: at R calls/s, latency from the scheduled "
                  "time)\n\n");
  for (const Measurement& m : all) {
    if (m.offered_rate > 0) {
      absl::StrAppend(&out, absl::StrFormat("%s: the client sent its calls late by up to %s us "
                                            "(p99; included in the latencies)\n",
                                            m.name, Thousands(m.send_lag_p99_us)));
    }
  }
  for (const Measurement& m : all) {
    if (!m.result.first_error.empty()) {
      absl::StrAppend(&out, m.name, " first error: ", m.result.first_error, "\n");
    }
  }
  absl::StrAppend(
      &out, absl::StrFormat("%-34s %12s %12s %8s\n", "target", "measured", "goal", "result"));
  for (const Target& t : targets) {
    absl::StrAppend(&out, absl::StrFormat("%-34s %12s %12s %8s%s\n", t.description,
                                          t.pass.has_value() ? t.measured : "-", t.goal,
                                          !t.pass.has_value() ? "not run"
                                          : *t.pass           ? "PASS"
                                                              : "MISS",
                                          t.note.empty() ? "" : "  (" + t.note + ")"));
  }
  std::fputs(out.c_str(), stderr);
}

}  // namespace okl::loadgen
