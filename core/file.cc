// core/file.cc

#include "core/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace okl {

absl::StatusOr<std::string> ReadFile(absl::string_view path) {
  const std::string name(path);
  int fd;
  do {
    fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  // Read straight into the string, never through a stack buffer: callers include threads
  // with small stacks (the metrics exposer's reads /proc). One byte beyond a regular
  // file's size lets the read that finds its end need no growth.
  struct stat st;
  const size_t expected =
      ::fstat(fd, &st) == 0 && st.st_size > 0 ? static_cast<size_t>(st.st_size) + 1 : 4096;
  std::string contents(expected, '\0');
  size_t used = 0;
  for (;;) {
    if (used == contents.size()) contents.resize(2 * contents.size());
    const ssize_t n = ::read(fd, contents.data() + used, contents.size() - used);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd);
      // A directory opens but does not read (EISDIR).
      return absl::ErrnoToStatus(error, absl::StrCat("cannot read ", path));
    }
    if (n == 0) break;
    used += static_cast<size_t>(n);
  }
  contents.resize(used);
  ::close(fd);
  return contents;
}

}  // namespace okl
