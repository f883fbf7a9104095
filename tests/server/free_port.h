// tests/server/free_port.h
//
// PickUnusedPort: a TCP port on 127.0.0.1 for a child process to listen on, found by
// binding port 0 and releasing it. It is free a moment ago, not reserved: a process that
// can listen on port 0 and report its port (okl_server's --port_file) should; one that
// cannot (etcd) takes the port and is started again if it lost it. The ports come from
// the kernel's ephemeral range (32768-60999 on Debian), which outgoing connections also
// draw from. Thread-safe.
//
// Example:
//   OKL_ASSIGN_OR_RETURN(int port, okl::testing::PickUnusedPort());
//   std::string address = absl::StrCat("127.0.0.1:", port);
#ifndef OKL_TESTS_SERVER_FREE_PORT_H_
#define OKL_TESTS_SERVER_FREE_PORT_H_

#include "absl/status/statusor.h"

namespace okl::testing {

// A TCP port on 127.0.0.1 that was free a moment ago (bound, then released).
absl::StatusOr<int> PickUnusedPort();

}  // namespace okl::testing

#endif  // OKL_TESTS_SERVER_FREE_PORT_H_
