// core/runtime/file.cc

#include "core/runtime/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
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

namespace {

absl::Status ErrnoError(absl::string_view what, absl::string_view path) {
  return absl::ErrnoToStatus(errno, absl::StrCat(what, " ", path));
}

}  // namespace

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temp_path_.c_str());
  }
}

absl::Status AtomicFile::Open() {
  static std::atomic<uint64_t> counter{0};
  temp_path_ = absl::StrCat(path_, ".tmp.", ::getpid(), ".", counter.fetch_add(1));
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd_ < 0) return ErrnoError("cannot create", temp_path_);
  return absl::OkStatus();
}

absl::Status AtomicFile::Truncate() {
  if (::ftruncate(fd_, 0) != 0 || ::lseek(fd_, 0, SEEK_SET) != 0) {
    return ErrnoError("cannot truncate", temp_path_);
  }
  return absl::OkStatus();
}

absl::Status AtomicFile::Append(absl::string_view data) {
  while (!data.empty()) {
    const ssize_t written = ::write(fd_, data.data(), data.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot write", temp_path_);
    }
    data.remove_prefix(static_cast<size_t>(written));
  }
  return absl::OkStatus();
}

absl::Status AtomicFile::Commit() {
  if (::fsync(fd_) != 0) return ErrnoError("cannot sync", temp_path_);
  if (::close(fd_) != 0) {
    fd_ = -1;
    absl::Status status = ErrnoError("cannot close", temp_path_);
    ::unlink(temp_path_.c_str());
    return status;
  }
  fd_ = -1;
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    absl::Status status = ErrnoError(absl::StrCat("cannot rename ", temp_path_, " to"), path_);
    ::unlink(temp_path_.c_str());
    return status;
  }
  const size_t slash = path_.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path_.substr(0, slash + 1);
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {  // best effort: the rename is done either way
    (void)::fsync(dir_fd);
    ::close(dir_fd);
  }
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
  AtomicFile file(path);
  if (absl::Status status = file.Open(); !status.ok()) return status;
  if (absl::Status status = file.Append(contents); !status.ok()) return status;
  return file.Commit();
}

}  // namespace okl
