// tests/server/test_certs.cc

#include "tests/server/test_certs.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <system_error>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "core/runtime/file.h"
#include "core/status_macros.h"
#include "tests/server/server_process.h"

#ifndef OKL_OPENSSL
#error "OKL_OPENSSL must name the openssl program (set by tests/server/CMakeLists.txt)"
#endif

namespace okl::testing {
namespace {

// The extensions of each kind of certificate. `openssl req` needs a distinguished_name
// section even though every subject is given with -subj. Written out in full, so that
// nothing depends on the system's openssl.cnf.
constexpr char kConfig[] = R"(
[req]
distinguished_name = dn
[dn]
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost, IP:127.0.0.1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
)";

constexpr char kValidDays[] = "2";

// Runs `openssl args...`; an error quotes its output.
absl::Status RunOpenssl(std::vector<std::string> args) {
  args.insert(args.begin(), OKL_OPENSSL);
  OKL_ASSIGN_OR_RETURN(const CommandResult result, RunCommand(args));
  if (result.exit_code() != 0) {
    return absl::InternalError(absl::StrCat("`", absl::StrJoin(args, " "),
                                            "` failed (wait status ", result.wait_status,
                                            "):\n", result.out, result.err));
  }
  return absl::OkStatus();
}

absl::Status NewKey(const std::string& key) {
  return RunOpenssl(
      {"genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key});
}

absl::Status NewCa(const std::string& config, const std::string& name, const std::string& key,
                   const std::string& cert) {
  OKL_RETURN_IF_ERROR(NewKey(key));
  return RunOpenssl({"req", "-new", "-x509", "-config", config, "-extensions", "ca", "-key",
                     key, "-subj", absl::StrCat("/CN=", name), "-days", kValidDays, "-sha256",
                     "-out", cert});
}

// A key and a certificate for `subject` with `extensions` (a section of kConfig), signed
// by ca_cert/ca_key.
absl::Status NewLeaf(const std::string& config, const std::string& subject,
                     const std::string& extensions, const std::string& ca_cert,
                     const std::string& ca_key, const std::string& key, const std::string& cert,
                     int serial) {
  OKL_RETURN_IF_ERROR(NewKey(key));
  const std::string csr = cert + ".csr";
  OKL_RETURN_IF_ERROR(RunOpenssl({"req", "-new", "-config", config, "-key", key, "-subj",
                                  absl::StrCat("/CN=", subject), "-out", csr}));
  return RunOpenssl({"x509", "-req", "-in", csr, "-CA", ca_cert, "-CAkey", ca_key,
                     "-set_serial", absl::StrCat(serial), "-days", kValidDays, "-sha256",
                     "-extfile", config, "-extensions", extensions, "-out", cert});
}

}  // namespace

absl::StatusOr<std::unique_ptr<TestCertificates>> TestCertificates::Generate() {
  auto certs = absl::WrapUnique(new TestCertificates());
  std::string dir_template =
      (std::filesystem::temp_directory_path() / "okl_test_certs.XXXXXX").string();
  if (mkdtemp(dir_template.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp: ", std::strerror(errno)));
  }
  certs->dir_ = dir_template;
  const std::string& dir = certs->dir_;
  const std::string config = dir + "/openssl.cnf";
  {
    std::ofstream out(config);
    out << kConfig;
    if (!out.good()) return absl::InternalError(absl::StrCat("cannot write ", config));
  }

  auto path = [&dir](const char* name) { return absl::StrCat(dir, "/", name); };
  certs->ca.path = path("ca.pem");
  certs->server_cert.path = path("server.pem");
  certs->server_key.path = path("server.key");
  certs->client_cert.path = path("client.pem");
  certs->client_key.path = path("client.key");
  certs->other_ca.path = path("other_ca.pem");
  certs->other_client_cert.path = path("other_client.pem");
  certs->other_client_key.path = path("other_client.key");
  const std::string ca_key = path("ca.key");
  const std::string other_ca_key = path("other_ca.key");

  OKL_RETURN_IF_ERROR(NewCa(config, "okl test CA", ca_key, certs->ca.path));
  OKL_RETURN_IF_ERROR(NewLeaf(config, "localhost", "server", certs->ca.path, ca_key,
                              certs->server_key.path, certs->server_cert.path, 2));
  OKL_RETURN_IF_ERROR(NewLeaf(config, "okl test client", "client", certs->ca.path, ca_key,
                              certs->client_key.path, certs->client_cert.path, 3));
  OKL_RETURN_IF_ERROR(NewCa(config, "okl other CA", other_ca_key, certs->other_ca.path));
  OKL_RETURN_IF_ERROR(NewLeaf(config, "okl other client", "client", certs->other_ca.path,
                              other_ca_key, certs->other_client_key.path,
                              certs->other_client_cert.path, 4));
  for (PemFile* file : {&certs->ca, &certs->server_cert, &certs->server_key,
                        &certs->client_cert, &certs->client_key, &certs->other_ca,
                        &certs->other_client_cert, &certs->other_client_key}) {
    OKL_ASSIGN_OR_RETURN(file->pem, ReadFile(file->path));
    if (file->pem.find("-----BEGIN ") == std::string::npos) {
      return absl::InternalError(absl::StrCat(file->path, " holds no PEM"));
    }
  }
  return certs;
}

absl::StatusOr<std::shared_ptr<const TestCertificates>> TestCertificates::Shared() {
  static absl::Mutex mutex(absl::kConstInit);
  static std::shared_ptr<const TestCertificates>* shared = nullptr;  // never freed
  absl::MutexLock lock(&mutex);
  if (shared == nullptr) {
    OKL_ASSIGN_OR_RETURN(std::unique_ptr<TestCertificates> made, Generate());
    shared = new std::shared_ptr<const TestCertificates>(std::move(made));
  }
  return *shared;
}

TestCertificates::~TestCertificates() {
  if (dir_.empty()) return;
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

std::vector<std::string> TestCertificates::ServerFlags(bool mutual) const {
  std::vector<std::string> flags = {absl::StrCat("--tls_cert_file=", server_cert.path),
                                    absl::StrCat("--tls_key_file=", server_key.path)};
  if (mutual) flags.push_back(absl::StrCat("--tls_client_ca_file=", ca.path));
  return flags;
}

}  // namespace okl::testing
