#include "tests/support/test_pki.h"

#include <fstream>
#include <stdexcept>

#include "tests/support/child_process.h"

namespace kvidx::testing {
namespace {

void openssl(const std::vector<std::string>& args) {
  std::vector<std::string> full = {"/usr/bin/openssl"};
  full.insert(full.end(), args.begin(), args.end());
  const CommandResult r = run_command(full);
  if (r.exit_code != 0) throw std::runtime_error("openssl " + args.front() + " failed: " + r.err);
}

void make_ca(const std::string& dir, const std::string& name) {
  openssl({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj",
           "/CN=kvidx test " + name, "-keyout", dir + "/" + name + ".key", "-out", dir + "/" + name + ".pem", "-addext",
           "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"});
}

// A key and a certificate signed by `ca` with the given extended key usage and subject names.
void make_leaf(const std::string& dir, const std::string& ca, const std::string& name, const std::string& usage,
               const std::string& san) {
  const std::string ext = dir + "/" + name + ".ext";
  std::ofstream(ext) << "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage="
                     << usage << "\n"
                     << (san.empty() ? "" : "subjectAltName=" + san + "\n");
  openssl({"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", "/CN=" + name,
           "-keyout", dir + "/" + name + ".key", "-out", dir + "/" + name + ".csr"});
  openssl({"x509", "-req", "-in", dir + "/" + name + ".csr", "-CA", dir + "/" + ca + ".pem", "-CAkey",
           dir + "/" + ca + ".key", "-CAcreateserial", "-days", "1", "-extfile", ext, "-out",
           dir + "/" + name + ".pem"});
}

}  // namespace

TestPki make_test_pki(const std::string& dir) {
  make_ca(dir, "ca");
  make_leaf(dir, "ca", "server", "serverAuth", "IP:127.0.0.1,DNS:localhost");
  make_leaf(dir, "ca", "client", "clientAuth", "");
  make_ca(dir, "rogue-ca");
  make_leaf(dir, "rogue-ca", "rogue-server", "serverAuth", "IP:127.0.0.1,DNS:localhost");
  TestPki pki;
  pki.ca_cert = dir + "/ca.pem";
  pki.server_cert = dir + "/server.pem";
  pki.server_key = dir + "/server.key";
  pki.client_cert = dir + "/client.pem";
  pki.client_key = dir + "/client.key";
  pki.rogue_ca_cert = dir + "/rogue-ca.pem";
  pki.rogue_server_cert = dir + "/rogue-server.pem";
  pki.rogue_server_key = dir + "/rogue-server.key";
  return pki;
}

}  // namespace kvidx::testing
