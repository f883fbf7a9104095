// core/file.h
//
// ReadFile: the one way okl reads a whole file into memory (data sets, configs, tokens
// files, certificates, /proc, test logs). Errors carry the errno-derived status code
// (NotFound for a missing file, PermissionDenied, ...) and say which file and why:
// "cannot open PATH: No such file or directory". Callers that must answer with another
// code (a tokens file is a FailedPrecondition of the server's start) map it themselves.
// Thread-safe: each call has its own descriptor.
//
// Example:
//   OKL_ASSIGN_OR_RETURN(std::string text, okl::ReadFile("client/examples/a9a.textproto"));
#ifndef OKL_CORE_FILE_H_
#define OKL_CORE_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace okl {

// The whole contents of the file at `path`, read with one descriptor to its end (a file
// that grows meanwhile is read as far as read(2) goes; /proc files, whose size stat
// reports as 0, are read whole).
absl::StatusOr<std::string> ReadFile(absl::string_view path);

}  // namespace okl

#endif  // OKL_CORE_FILE_H_
