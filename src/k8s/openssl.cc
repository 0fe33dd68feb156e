#include "k8s/openssl.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/sslerr.h>

namespace tessera::k8s {
namespace {

// The memory BIO's text; "" when there is none.
std::string BioText(BIO* bio) {
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  if (data == nullptr || size <= 0) return std::string();
  return std::string(data, static_cast<std::size_t>(size));
}

// `write` into a fresh memory BIO, the text read back.
template <typename Write>
StatusOr<std::string> Encode(const char* what, Write write) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || write(bio.get()) != 1) {
    const std::string reason = OpenSslErrors();
    return InternalError(std::string(what) + ": PEM encoding failed" +
                         (reason.empty() ? "" : ": " + reason));
  }
  return BioText(bio.get());
}

}  // namespace

std::string OpenSslErrors(bool* verify_failed) {
  std::string out;
  while (unsigned long code = ERR_get_error()) {
    if (verify_failed != nullptr && ERR_GET_LIB(code) == ERR_LIB_SSL &&
        ERR_GET_REASON(code) == SSL_R_CERTIFICATE_VERIFY_FAILED) {
      *verify_failed = true;
    }
    char buffer[256];
    ERR_error_string_n(code, buffer, sizeof(buffer));
    if (!out.empty()) out += "; ";
    out += buffer;
  }
  return out;
}

BioPtr MemoryBio(std::string_view data) {
  return BioPtr(BIO_new_mem_buf(data.data(), static_cast<int>(data.size())));
}

std::vector<X509Ptr> ReadCertificates(std::string_view pem) {
  std::vector<X509Ptr> certs;
  BioPtr bio = MemoryBio(pem);
  if (bio) {
    while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
      certs.emplace_back(cert);
    }
  }
  ERR_clear_error();  // the end of the input reads as an error
  return certs;
}

PkeyPtr ReadPrivateKey(std::string_view pem) {
  BioPtr bio = MemoryBio(pem);
  if (!bio) return nullptr;
  return PkeyPtr(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
}

PkeyPtr ReadPublicKey(std::string_view pem) {
  BioPtr bio = MemoryBio(pem);
  if (!bio) return nullptr;
  return PkeyPtr(PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr));
}

StatusOr<std::string> CertificatePem(const X509* cert) {
  return Encode("certificate", [cert](BIO* bio) { return PEM_write_bio_X509(bio, cert); });
}

StatusOr<std::string> PrivateKeyPem(const EVP_PKEY* key) {
  return Encode("private key", [key](BIO* bio) {
    return PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  });
}

StatusOr<std::string> PublicKeyPem(const EVP_PKEY* key) {
  return Encode("public key", [key](BIO* bio) { return PEM_write_bio_PUBKEY(bio, key); });
}

}  // namespace tessera::k8s
