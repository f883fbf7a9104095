// server/metrics/process_metrics.cc
//
// /proc/self parsing for the process_* series: see process_metrics.h.

#include "server/metrics/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "core/runtime/file.h"
#include "prometheus/metric_type.h"
#include "server/metrics/metrics_families.h"

namespace okl::metrics_internal {
namespace {

using ::prometheus::MetricFamily;
using ::prometheus::MetricType;

// The fields of /proc/self/stat after the command name (which may hold spaces and
// parentheses, hence the last ')'): fields[0] is field 3 of proc(5), "state".
std::optional<std::vector<std::string>> ReadProcSelfStat() {
  absl::StatusOr<std::string> stat = ReadFile("/proc/self/stat");
  if (!stat.ok()) return std::nullopt;
  const size_t paren = stat->rfind(')');
  if (paren == std::string::npos) return std::nullopt;
  std::vector<std::string> fields =
      absl::StrSplit(absl::string_view(*stat).substr(paren + 1), ' ', absl::SkipWhitespace());
  if (fields.size() < 22) return std::nullopt;
  return fields;
}

// proc(5) field numbers, as indices into ReadProcSelfStat()'s fields.
constexpr size_t StatField(size_t number) { return number - 3; }
constexpr size_t kUtime = StatField(14);      // clock ticks
constexpr size_t kStime = StatField(15);      // clock ticks
constexpr size_t kStartTime = StatField(22);  // clock ticks after boot
constexpr size_t kVsize = StatField(23);      // bytes
constexpr size_t kRss = StatField(24);        // pages

double ParseNumber(const std::string& text) { return std::strtod(text.c_str(), nullptr); }

std::optional<size_t> CountOpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return std::nullopt;
  size_t count = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count > 0 ? count - 1 : 0;  // not the directory's own descriptor
}

}  // namespace

std::optional<double> ProcessStartTime() {
  std::optional<std::vector<std::string>> fields = ReadProcSelfStat();
  absl::StatusOr<std::string> stat = ReadFile("/proc/stat");
  if (!fields || !stat.ok()) return std::nullopt;
  for (absl::string_view line : absl::StrSplit(*stat, '\n')) {
    if (absl::ConsumePrefix(&line, "btime ")) {
      const double boot = std::strtod(std::string(line).c_str(), nullptr);
      return boot + ParseNumber((*fields)[kStartTime]) / sysconf(_SC_CLK_TCK);
    }
  }
  return std::nullopt;
}

void CollectProcessMetrics(const std::optional<double>& start_time,
                           std::vector<MetricFamily>* families) {
  if (start_time) {
    families->push_back(Single("process_start_time_seconds",
                               "Start time of the process since the Unix epoch, in seconds.",
                               MetricType::Gauge, *start_time));
  }
  if (std::optional<std::vector<std::string>> stat = ReadProcSelfStat()) {
    const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
    families->push_back(
        Single("process_cpu_seconds_total", "User and system CPU time spent, in seconds.",
               MetricType::Counter,
               (ParseNumber((*stat)[kUtime]) + ParseNumber((*stat)[kStime])) / ticks));
    families->push_back(Single(
        "process_resident_memory_bytes", "Resident memory size, in bytes.", MetricType::Gauge,
        ParseNumber((*stat)[kRss]) * static_cast<double>(sysconf(_SC_PAGESIZE))));
    families->push_back(Single("process_virtual_memory_bytes", "Virtual memory size, in bytes.",
                               MetricType::Gauge, ParseNumber((*stat)[kVsize])));
  }
  if (std::optional<size_t> fds = CountOpenFds()) {
    families->push_back(Single("process_open_fds", "Number of open file descriptors.",
                               MetricType::Gauge, static_cast<double>(*fds)));
  }
  // getrlimit reads the same limit /proc/self/limits prints, without parsing text.
  rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    families->push_back(Single("process_max_fds",
                               "Maximum number of open file descriptors (soft limit).",
                               MetricType::Gauge, static_cast<double>(limit.rlim_cur)));
  }
}

}  // namespace okl::metrics_internal
