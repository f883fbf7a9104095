// server/base/failpoint.cc

#include "server/base/failpoint.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace okl {
namespace {

constexpr absl::string_view kNames[] = {
    "checkpoint.encoded", "checkpoint.written", "restore.received", "restore.written",
    "restore.installed",  "remember.written",   "label.checked",    "label.applied",
    "expiry.applied",     "expiry.forgotten",
};

// The armed failpoint: an index into kNames (-1: none) and the hits it has left.
std::atomic<int> armed{-1};
std::atomic<int64_t> hits_left{0};

int IndexOf(absl::string_view name) {
  const auto it = std::find(std::begin(kNames), std::end(kNames), name);
  return it == std::end(kNames) ? -1 : static_cast<int>(it - std::begin(kNames));
}

}  // namespace

absl::Status ArmFailpoint(absl::string_view spec) {
  absl::string_view name = spec;
  int64_t count = 1;
  if (const size_t at = spec.find('@'); at != absl::string_view::npos) {
    name = spec.substr(0, at);
    if (!absl::SimpleAtoi(spec.substr(at + 1), &count) || count < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--failpoint=", spec, ": the count after @ must be a whole number >= 1"));
    }
  }
  const int index = IndexOf(name);
  if (index < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--failpoint=", spec, ": no failpoint \"",
                                                   name, "\"; there are ",
                                                   absl::StrJoin(kNames, ", ")));
  }
  armed.store(-1);
  hits_left.store(count);
  armed.store(index);
  return absl::OkStatus();
}

void Failpoint(absl::string_view name) {
  const int index = armed.load(std::memory_order_relaxed);
  if (index < 0 || kNames[index] != name) return;
  if (hits_left.fetch_sub(1) != 1) return;
  const std::string line = absl::StrCat("okl_server: failpoint ", name, " reached: SIGKILL\n");
  // write(2), not stdio: nothing buffered may be lost, and nothing else runs after it.
  (void)!write(STDERR_FILENO, line.data(), line.size());
  kill(getpid(), SIGKILL);
}

}  // namespace okl
