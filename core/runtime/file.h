// core/runtime/file.h
//
// ReadFile: the one way okl reads a whole file into memory (data sets, configs, tokens
// files, certificates, /proc, test logs). AtomicFile and WriteFileAtomically: the one way
// it replaces one (snapshots the client downloads, the router's tenant map, the server's
// port files), so that a reader sees the old file or the new one, never part of it.
// Errors carry the errno-derived status code (NotFound for a missing file,
// PermissionDenied, ...) and say which file and why: "cannot open PATH: No such file or
// directory". Callers that must answer with another code (a tokens file is a
// FailedPrecondition of the server's start) map it themselves.
// Thread-safe: each call (each AtomicFile) has its own descriptor.
//
// Example:
//   OKL_ASSIGN_OR_RETURN(std::string text, okl::ReadFile("client/examples/a9a.textproto"));
//   OKL_RETURN_IF_ERROR(okl::WriteFileAtomically("routes.map", "alice 10.0.0.2:50051;\n"));
#ifndef OKL_CORE_RUNTIME_FILE_H_
#define OKL_CORE_RUNTIME_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace okl {

// The whole contents of the file at `path`, read with one descriptor to its end (a file
// that grows meanwhile is read as far as read(2) goes; /proc files, whose size stat
// reports as 0, are read whole).
absl::StatusOr<std::string> ReadFile(absl::string_view path);

// A file written beside `path` (PATH.tmp.PID.N) and renamed over it once complete, so
// that `path` never holds a partial file; durable once Commit returns (the file and its
// directory synced). Removed unless committed.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path) : path_(std::move(path)) {}
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  // Creates the temporary file (mode 0666 less the umask).
  absl::Status Open();
  // Empties it (for a retried download).
  absl::Status Truncate();
  absl::Status Append(absl::string_view data);
  // Syncs the file, renames it to `path` and syncs the directory.
  absl::Status Commit();

 private:
  const std::string path_;
  std::string temp_path_;
  int fd_ = -1;
};

// Replaces (or creates) the file at `path` with `contents` through an AtomicFile.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);

}  // namespace okl

#endif  // OKL_CORE_RUNTIME_FILE_H_
