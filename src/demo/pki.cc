#include "demo/pki.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>
#include <utility>
#include <vector>

namespace tessera::demo {
namespace {

struct Free {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(X509_EXTENSION* p) const { X509_EXTENSION_free(p); }
  void operator()(BIGNUM* p) const { BN_free(p); }
};
using Key = std::unique_ptr<EVP_PKEY, Free>;
using Cert = std::unique_ptr<X509, Free>;

Status OpenSslError(const std::string& what) {
  const unsigned long code = ERR_get_error();
  char text[256] = {};
  if (code != 0) ERR_error_string_n(code, text, sizeof(text));
  ERR_clear_error();
  return InternalError("demo PKI: " + what + (code != 0 ? std::string(": ") + text : ""));
}

StatusOr<Key> NewKey() {
  Key key(EVP_EC_gen("P-256"));
  if (!key) return OpenSslError("EC key generation");
  return key;
}

// `issuer`/`issuer_key` null: self-signed.
StatusOr<Cert> NewCert(EVP_PKEY* key, const std::string& common_name, X509* issuer,
                       EVP_PKEY* issuer_key, int days,
                       const std::vector<std::pair<int, std::string>>& extensions) {
  Cert cert(X509_new());
  if (!cert) return OpenSslError("X509_new");
  std::unique_ptr<BIGNUM, Free> serial(BN_new());
  if (!serial || BN_rand(serial.get(), 64, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get())) == nullptr) {
    return OpenSslError("serial number");
  }
  if (X509_set_version(cert.get(), 2) != 1 ||
      X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(cert.get()), 86400L * days) == nullptr ||
      X509_set_pubkey(cert.get(), key) != 1) {
    return OpenSslError("certificate fields");
  }
  X509_NAME* name = X509_get_subject_name(cert.get());
  const auto* cn = reinterpret_cast<const unsigned char*>(common_name.c_str());
  if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, cn, -1, -1, 0) != 1) {
    return OpenSslError("subject");
  }
  X509* signer = issuer != nullptr ? issuer : cert.get();
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(signer)) != 1) {
    return OpenSslError("issuer");
  }
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, signer, cert.get(), nullptr, nullptr, 0);
  for (const auto& [nid, value] : extensions) {
    std::unique_ptr<X509_EXTENSION, Free> ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
    if (!ext || X509_add_ext(cert.get(), ext.get(), -1) != 1) {
      return OpenSslError("extension " + value);
    }
  }
  if (X509_sign(cert.get(), issuer_key != nullptr ? issuer_key : key, EVP_sha256()) == 0) {
    return OpenSslError("signing");
  }
  return cert;
}

StatusOr<std::string> ToPem(X509* cert, EVP_PKEY* key) {
  std::unique_ptr<BIO, Free> bio(BIO_new(BIO_s_mem()));
  if (!bio) return OpenSslError("BIO_new");
  const bool ok = cert != nullptr ? PEM_write_bio_X509(bio.get(), cert) == 1
                                  : PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0,
                                                             nullptr, nullptr) == 1;
  if (!ok) return OpenSslError("PEM encoding");
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<std::size_t>(size));
}

}  // namespace

StatusOr<ServingPki> MakeServingPki(const std::string& ca_name, int days) {
  TESSERA_ASSIGN_OR_RETURN(Key ca_key, NewKey());
  TESSERA_ASSIGN_OR_RETURN(
      Cert ca, NewCert(ca_key.get(), ca_name, nullptr, nullptr, days,
                       {{NID_basic_constraints, "critical,CA:TRUE"},
                        {NID_key_usage, "critical,keyCertSign,cRLSign"},
                        {NID_subject_key_identifier, "hash"}}));
  TESSERA_ASSIGN_OR_RETURN(Key key, NewKey());
  TESSERA_ASSIGN_OR_RETURN(
      Cert cert, NewCert(key.get(), "tessera-webhook", ca.get(), ca_key.get(), days,
                         {{NID_basic_constraints, "critical,CA:FALSE"},
                          {NID_key_usage, "critical,digitalSignature,keyEncipherment"},
                          {NID_ext_key_usage, "serverAuth"},
                          {NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost"},
                          {NID_authority_key_identifier, "keyid:always"}}));
  ServingPki pki;
  TESSERA_ASSIGN_OR_RETURN(pki.ca_pem, ToPem(ca.get(), nullptr));
  TESSERA_ASSIGN_OR_RETURN(pki.cert_pem, ToPem(cert.get(), nullptr));
  TESSERA_ASSIGN_OR_RETURN(pki.key_pem, ToPem(nullptr, key.get()));
  return pki;
}

}  // namespace tessera::demo
