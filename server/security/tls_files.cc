#include "server/security/tls_files.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace es {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using KeyPtr = std::unique_ptr<EVP_PKEY, KeyFree>;

// "field 'path': what" (the config field first: that is where the user looks).
Status Bad(const char* field, const std::string& path, const std::string& what) {
  std::string m = "tls.";
  m.append(field).append(" '").append(path).append("': ").append(what);
  return Status::InvalidArgument(std::move(m));
}

// OpenSSL's reason for the last failure on this thread (and clears its queue,
// so an old error is never reported for a later call).
std::string OpenSslError() {
  std::string text;
  unsigned long code = 0;
  while ((code = ERR_get_error()) != 0) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof(buf));
    if (!text.empty()) text += "; ";
    text += buf;
  }
  return text.empty() ? std::string("no details") : text;
}

StatusOr<std::string> ReadFile(const char* field, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Bad(field, path, "cannot be opened");
  std::string data;
  data.resize(kMaxTlsFileBytes + 1);
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  if (in.bad()) return Bad(field, path, "read error");
  data.resize(static_cast<size_t>(in.gcount()));
  if (data.size() > kMaxTlsFileBytes) {
    return Bad(field, path, "larger than " + std::to_string(kMaxTlsFileBytes) + " bytes: not a PEM file");
  }
  return data;
}

BioPtr MemBio(const std::string& pem) { return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()))); }

// The certificates of a PEM bundle, in order; an error unless there is at
// least one and every PEM block in it is a certificate that parses.
StatusOr<std::vector<X509Ptr>> ParseCertificates(const char* field, const std::string& path, const std::string& pem) {
  ERR_clear_error();
  BioPtr bio = MemBio(pem);
  std::vector<X509Ptr> certs;
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) certs.emplace_back(cert);
  // The loop ends with PEM_R_NO_START_LINE at the end of the data; anything
  // else is a block that did not parse.
  const unsigned long last = ERR_peek_last_error();
  if (last != 0 && !(ERR_GET_LIB(last) == ERR_LIB_PEM && ERR_GET_REASON(last) == PEM_R_NO_START_LINE)) {
    return Bad(field, path, "a PEM block is not a valid X.509 certificate (" + OpenSslError() + ")");
  }
  ERR_clear_error();
  if (certs.empty()) return Bad(field, path, "no PEM certificate in it (expected -----BEGIN CERTIFICATE-----)");
  return certs;
}

// Refuses to prompt: OpenSSL's default callback would read a passphrase from
// the terminal of a server that may have none.
int NoPassphrase(char*, int, int, void*) { return -1; }

}  // namespace

StatusOr<TlsFiles> LoadTlsFiles(const TlsConfig& tls) {
  if (!tls.enabled()) return Status::InvalidArgument("TLS is not configured (tls.cert is empty)");
  TlsFiles files;
  ES_ASSIGN_OR_RETURN(auto cert_pem, ReadFile("cert", tls.cert));
  files.cert_chain = std::move(cert_pem);
  ES_ASSIGN_OR_RETURN(auto chain, ParseCertificates("cert", tls.cert, files.cert_chain));
  X509* leaf = chain.front().get();
  if (X509_cmp_current_time(X509_get0_notBefore(leaf)) >= 0) {
    return Bad("cert", tls.cert, "the certificate is not valid yet (its notBefore is in the future)");
  }
  if (X509_cmp_current_time(X509_get0_notAfter(leaf)) <= 0) {
    return Bad("cert", tls.cert, "the certificate has expired (its notAfter is in the past)");
  }

  ES_ASSIGN_OR_RETURN(auto key_pem, ReadFile("key", tls.key));
  files.private_key = std::move(key_pem);
  ERR_clear_error();
  BioPtr key_bio = MemBio(files.private_key);
  KeyPtr key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, NoPassphrase, nullptr));
  if (!key) {
    const bool encrypted = files.private_key.find("ENCRYPTED") != std::string::npos;
    return Bad("key", tls.key,
               encrypted ? std::string("the private key is encrypted (give an unencrypted key; protect it with file "
                                       "permissions)")
                         : "not a PEM private key (" + OpenSslError() + ")");
  }
  ERR_clear_error();
  if (X509_check_private_key(leaf, key.get()) != 1) {
    std::string what = "the private key does not match the certificate '";
    what.append(tls.cert).append("' (").append(OpenSslError()).append(")");
    return Bad("key", tls.key, what);
  }

  if (!tls.client_ca.empty()) {
    ES_ASSIGN_OR_RETURN(auto ca_pem, ReadFile("client_ca", tls.client_ca));
    files.client_ca = std::move(ca_pem);
    ES_ASSIGN_OR_RETURN(auto cas, ParseCertificates("client_ca", tls.client_ca, files.client_ca));
  }
  return files;
}

}  // namespace es
