// bench/soak_report.cc

#include "bench/soak_report.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/io/json_writer.h"

namespace okl::soak {
namespace {

constexpr Method kAllMethods[] = {
    Method::kPredict,    Method::kObserve,  Method::kObserveStream,
    Method::kGetModel,   Method::kListModels, Method::kSnapshot,
    Method::kRestore,    Method::kDeleteModel, Method::kCreateModel};

double PerSecond(uint64_t count, absl::Duration over) {
  const double seconds = absl::ToDoubleSeconds(over);
  return seconds > 0 ? static_cast<double>(count) / seconds : 0;
}

std::string Row(absl::string_view name, const MethodStats& m, absl::Duration load) {
  return absl::StrFormat("%-14s %10d %9.1f %10s %8.0f %8.0f %8.0f %8.0f %9d %10d\n", name,
                         m.calls, PerSecond(m.calls, load),
                         m.examples > 0 ? absl::StrCat(m.examples) : "-",
                         m.latency.Percentile(0.5), m.latency.Percentile(0.99),
                         m.latency.Percentile(0.999), m.latency.max_us(), m.expected_errors,
                         m.unexpected_errors);
}

std::string Target(absl::string_view name, const std::string& measured, absl::string_view goal,
                   absl::string_view result) {
  return absl::StrFormat("%-44s %12s %10s  %s\n", name, measured, goal, result);
}

absl::string_view PassOrMiss(bool pass) { return pass ? "PASS" : "MISS"; }

std::string LatencyJson(const MethodStats& m, absl::Duration load) {
  JsonObject json;
  json.AddUint("calls", m.calls)
      .AddDouble("per_second", PerSecond(m.calls, load))
      .AddUint("examples", m.examples)
      .AddDouble("p50_us", m.latency.Percentile(0.5))
      .AddDouble("p99_us", m.latency.Percentile(0.99))
      .AddDouble("p999_us", m.latency.Percentile(0.999))
      .AddDouble("max_us", m.latency.max_us())
      .AddUint("expected_errors", m.expected_errors)
      .AddUint("unexpected_errors", m.unexpected_errors);
  return json.str();
}

}  // namespace

RssSummary SummarizeRss(std::vector<RssSample> samples, absl::Duration warmup) {
  RssSummary rss;
  rss.warmup = warmup;
  rss.samples = std::move(samples);
  if (rss.samples.empty()) {
    rss.note = "no samples";
    return rss;
  }
  // The first sample at or after the warm-up; the last one if the run was shorter.
  auto first = std::find_if(rss.samples.begin(), rss.samples.end(),
                            [&](const RssSample& s) { return s.at >= warmup; });
  if (first == rss.samples.end()) --first;
  rss.measured = true;
  rss.warmup_kb = first->kb;
  rss.end_kb = rss.samples.back().kb;
  // Least squares over the samples from the warm-up on: kb = a + b * seconds.
  double n = 0, sum_t = 0, sum_kb = 0, sum_tt = 0, sum_tkb = 0;
  for (auto it = first; it != rss.samples.end(); ++it) {
    const double t = absl::ToDoubleSeconds(it->at);
    const double kb = static_cast<double>(it->kb);
    rss.max_after_kb = std::max(rss.max_after_kb, it->kb);
    n += 1;
    sum_t += t;
    sum_kb += kb;
    sum_tt += t * t;
    sum_tkb += t * kb;
  }
  const double spread = n * sum_tt - sum_t * sum_t;
  const double slope = n >= 2 && spread > 0 ? (n * sum_tkb - sum_t * sum_kb) / spread : 0;
  const double intercept = (sum_kb - slope * sum_t) / n;
  rss.trend_start_kb = intercept + slope * absl::ToDoubleSeconds(first->at);
  rss.trend_end_kb = intercept + slope * absl::ToDoubleSeconds(rss.samples.back().at);
  rss.growth_ratio = rss.trend_end_kb / rss.trend_start_kb;
  rss.max_ratio = static_cast<double>(rss.max_after_kb) / static_cast<double>(rss.warmup_kb);
  return rss;
}

bool DataIntact(const SoakReport& report) {
  return report.unexpected_errors() == 0 && report.check.lost_examples == 0 &&
         report.check.not_exact() == 0 && report.check.unexpected_models == 0;
}

std::string RenderTable(const SoakReport& report) {
  const absl::Duration load = report.load;
  std::string out = absl::StrCat("\n", report.header, "\n\n");
  absl::StrAppend(&out, absl::StrFormat("%-14s %10s %9s %10s %8s %8s %8s %8s %9s %10s\n",
                                        "method", "calls", "calls/s", "examples", "p50 us",
                                        "p99 us", "p999 us", "max us", "expected",
                                        "unexpected"));
  for (const Method method : kAllMethods) {
    absl::StrAppend(&out, Row(MethodName(method), report.stats[method], load));
  }
  absl::StrAppend(&out, Row("all", report.stats.AllCalls(), load));
  absl::StrAppend(&out,
                  "(calls: RPCs completed, whatever their status; ObserveStream: one stream "
                  "each, timed from the client library's opening GetModel to the "
                  "acknowledgement; examples: acknowledged; expected/unexpected: errors)\n");

  if (!report.stats.expected_by_kind().empty()) {
    std::vector<std::string> kinds;
    for (const auto& [kind, count] : report.stats.expected_by_kind()) {
      kinds.push_back(absl::StrCat(kind, " x", count));
    }
    absl::StrAppend(&out, "expected errors: ", absl::StrJoin(kinds, ", "), "\n");
  }
  if (report.unexpected_errors() > 0) {
    absl::StrAppend(&out, "unexpected errors (", report.unexpected_errors(),
                    "; the first ones):\n");
    for (const std::string& what : report.other_errors) absl::StrAppend(&out, "  ", what, "\n");
    for (const std::string& what : report.stats.first_unexpected()) {
      absl::StrAppend(&out, "  ", what, "\n");
    }
  }

  const CheckSummary& check = report.check;
  absl::StrAppend(
      &out,
      absl::StrFormat("check: %d models, %d bit-identical to core twins fed their "
                      "acknowledged examples (%d in doubt, %d unexpected models listed); "
                      "they hold %d examples; lost %d, extra %d; took %s\n",
                      check.models, check.exact, check.in_doubt, check.unexpected_models,
                      check.examples_held, check.lost_examples, check.extra_examples,
                      absl::FormatDuration(absl::Trunc(check.took, absl::Milliseconds(1)))));
  for (const std::string& failure : check.first_failures) {
    absl::StrAppend(&out, "  ", failure, "\n");
  }

  const RssSummary& rss = report.rss;
  if (rss.measured) {
    std::vector<std::string> samples;
    for (const RssSample& s : rss.samples) {
      samples.push_back(absl::StrCat(absl::ToInt64Seconds(s.at), "s:", s.kb));
    }
    absl::StrAppend(&out, "server RSS (kB): ", absl::StrJoin(samples, " "), "\n");
    absl::StrAppend(
        &out, absl::StrFormat("  from the end of the %s warm-up: trend (least squares) %.0f -> "
                              "%.0f kB (x%.3f); samples %d kB at the warm-up, %d kB at the "
                              "end, largest %d kB (x%.3f)\n",
                              absl::FormatDuration(rss.warmup), rss.trend_start_kb,
                              rss.trend_end_kb, rss.growth_ratio, rss.warmup_kb, rss.end_kb,
                              rss.max_after_kb, rss.max_ratio));
  } else {
    absl::StrAppend(&out, "server RSS: not measured (", rss.note, ")\n");
  }

  absl::StrAppend(&out, "\n", Target("target", "measured", "goal", "result"));
  absl::StrAppend(&out, Target("unexpected errors", absl::StrCat(report.unexpected_errors()),
                               "0", PassOrMiss(report.unexpected_errors() == 0)));
  absl::StrAppend(&out, Target("lost examples", absl::StrCat(check.lost_examples), "0",
                               PassOrMiss(check.lost_examples == 0)));
  absl::StrAppend(&out, Target("models not holding exactly their examples",
                               absl::StrCat(check.not_exact() + check.unexpected_models), "0",
                               PassOrMiss(check.not_exact() + check.unexpected_models == 0)));
  absl::StrAppend(
      &out, Target("server RSS growth after warm-up (trend)",
                   rss.measured ? absl::StrFormat("%.3f", rss.growth_ratio) : "-",
                   absl::StrFormat("<= %.2f", kRssFlatRatio),
                   rss.measured ? PassOrMiss(rss.growth_ratio <= kRssFlatRatio) : "not run"));
  return out;
}

std::string RenderJson(const SoakReport& report) {
  const MethodStats all = report.stats.AllCalls();
  const CheckSummary& check = report.check;
  const RssSummary& rss = report.rss;
  JsonObject methods;
  for (const Method method : kAllMethods) {
    methods.AddRaw(MethodName(method), LatencyJson(report.stats[method], report.load));
  }
  JsonObject expected;
  for (const auto& [kind, count] : report.stats.expected_by_kind()) expected.AddUint(kind, count);
  std::vector<std::string> samples;
  for (const RssSample& s : rss.samples) samples.push_back(absl::StrCat(s.kb));

  JsonObject json;
  json.AddString("result", DataIntact(report) ? "PASS" : "FAIL")
      .AddUint("unexpected_errors", report.unexpected_errors())
      .AddUint("lost_examples", check.lost_examples)
      .AddUint("extra_examples", check.extra_examples)
      .AddInt("models", check.models)
      .AddInt("models_exact", check.exact)
      .AddInt("models_not_exact", check.not_exact())
      .AddInt("models_in_doubt", check.in_doubt)
      .AddInt("unexpected_models", check.unexpected_models)
      .AddUint("examples_acknowledged", all.examples)
      .AddUint("examples_held", check.examples_held)
      .AddUint("requests", all.calls)
      .AddDouble("requests_per_second", PerSecond(all.calls, report.load))
      .AddDouble("p50_us", all.latency.Percentile(0.5))
      .AddDouble("p99_us", all.latency.Percentile(0.99))
      .AddDouble("p999_us", all.latency.Percentile(0.999))
      .AddDouble("max_us", all.latency.max_us())
      .AddUint("expected_errors", all.expected_errors)
      .AddRaw("expected_errors_by_kind", expected.str())
      .AddDouble("duration_s", absl::ToDoubleSeconds(report.load));
  if (rss.measured) {
    json.AddDouble("rss_growth_ratio", rss.growth_ratio)
        .AddDouble("rss_max_ratio", rss.max_ratio)
        .AddDouble("rss_trend_start_kb", rss.trend_start_kb)
        .AddDouble("rss_trend_end_kb", rss.trend_end_kb)
        .AddInt("rss_warmup_kb", rss.warmup_kb)
        .AddInt("rss_end_kb", rss.end_kb)
        .AddDouble("rss_warmup_s", absl::ToDoubleSeconds(rss.warmup))
        .AddRaw("rss_samples_kb", absl::StrCat("[", absl::StrJoin(samples, ","), "]"));
  } else {
    json.AddNull("rss_growth_ratio").AddNull("rss_max_ratio").AddString("rss_note", rss.note);
  }
  json.AddRaw("methods", methods.str());
  return json.str();
}

}  // namespace okl::soak
