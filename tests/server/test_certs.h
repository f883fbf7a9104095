// tests/server/test_certs.h
//
// TestCertificates makes a throw-away public-key infrastructure for TLS tests with the
// openssl command-line tool (its path is compiled in as OKL_OPENSSL), in a fresh
// temporary directory that the destructor removes:
//   - ca:            a self-signed CA ("okl test CA");
//   - server_*:      a server certificate signed by ca, for DNS:localhost and IP:127.0.0.1
//                    (so a client may connect to localhost:PORT or 127.0.0.1:PORT);
//   - client_*:      a client certificate signed by ca (extendedKeyUsage clientAuth);
//   - other_ca:      an unrelated self-signed CA ("okl other CA");
//   - other_client_*: a client certificate signed by other_ca, which a server trusting
//                    only ca must refuse.
// Keys are ECDSA P-256 (fast to make: the whole set takes well under a second);
// certificates are valid from now for two days.
//
// Thread-compatible; the PEM strings may be read from any thread.
//
// Example:
//   absl::StatusOr<std::unique_ptr<TestCertificates>> certs = TestCertificates::Generate();
//   ASSERT_TRUE(certs.ok()) << certs.status();
//   ServerProcessOptions options = {.flags = (*certs)->ServerFlags(/*mutual=*/true)};
//   options.channel_security.credentials = TlsCredentials(  // tests/server/server_process.h
//       (*certs)->ca.pem, (*certs)->client_cert.pem, (*certs)->client_key.pem);
//   absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
#ifndef OKL_TESTS_SERVER_TEST_CERTS_H_
#define OKL_TESTS_SERVER_TEST_CERTS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace okl::testing {

// One PEM file: where it is and what it holds.
struct PemFile {
  std::string path;
  std::string pem;
};

class TestCertificates {
 public:
  // Runs openssl to make every file below. An error carries openssl's own output.
  static absl::StatusOr<std::unique_ptr<TestCertificates>> Generate();
  // One set for the whole process, made on first use (a test that needs its own, say to
  // replace a file, calls Generate): making a set runs openssl 12 times, ~0.5 s, which
  // the authorization matrix's hundreds of servers would otherwise pay each.
  static absl::StatusOr<std::shared_ptr<const TestCertificates>> Shared();

  TestCertificates(const TestCertificates&) = delete;
  TestCertificates& operator=(const TestCertificates&) = delete;
  // Removes the directory and everything in it.
  ~TestCertificates();

  // The temporary directory that holds the files.
  const std::string& dir() const { return dir_; }

  // okl_server's TLS flags: --tls_cert_file and --tls_key_file (server_cert, server_key)
  // and, if `mutual`, --tls_client_ca_file=ca.
  std::vector<std::string> ServerFlags(bool mutual) const;

  PemFile ca;
  PemFile server_cert;
  PemFile server_key;
  PemFile client_cert;
  PemFile client_key;
  PemFile other_ca;
  PemFile other_client_cert;
  PemFile other_client_key;

 private:
  TestCertificates() = default;

  std::string dir_;
};

}  // namespace okl::testing

#endif  // OKL_TESTS_SERVER_TEST_CERTS_H_
