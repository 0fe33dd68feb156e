// The one set of OpenSSL (libcrypto) helpers: owning pointers for its objects, PEM parsing from
// memory and PEM encoding, and the thread's error queue as text. The API client's TLS, the
// decision signatures (src/contract/), the webhook's serving certificate (src/webhook/) and the
// certificate minting (k8s/pki.h) all use these. libcrypto only: nothing here needs libssl.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include "tessera/status.h"

namespace tessera::k8s {

// The deleter of every pointer below: the matching OpenSSL free function.
struct OpenSslFree {
  void operator()(X509* p) const { X509_free(p); }
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(X509_STORE* p) const { X509_STORE_free(p); }
  void operator()(X509_STORE_CTX* p) const { X509_STORE_CTX_free(p); }
  void operator()(X509_EXTENSION* p) const { X509_EXTENSION_free(p); }
  void operator()(EVP_MD_CTX* p) const { EVP_MD_CTX_free(p); }
  void operator()(BIGNUM* p) const { BN_free(p); }
  void operator()(STACK_OF(X509) * p) const { sk_X509_pop_free(p, X509_free); }
};

using X509Ptr = std::unique_ptr<X509, OpenSslFree>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, OpenSslFree>;
using BioPtr = std::unique_ptr<BIO, OpenSslFree>;
using X509StorePtr = std::unique_ptr<X509_STORE, OpenSslFree>;
using X509StoreCtxPtr = std::unique_ptr<X509_STORE_CTX, OpenSslFree>;
using X509ExtensionPtr = std::unique_ptr<X509_EXTENSION, OpenSslFree>;
using MdCtxPtr = std::unique_ptr<EVP_MD_CTX, OpenSslFree>;
using BignumPtr = std::unique_ptr<BIGNUM, OpenSslFree>;
// Owns the stack and the certificates in it.
using X509StackPtr = std::unique_ptr<STACK_OF(X509), OpenSslFree>;

// The OpenSSL errors queued on this thread, as text joined by "; " ("" if none); clears the
// queue. `verify_failed`: set when one of them is a failed certificate verification (TLS).
std::string OpenSslErrors(bool* verify_failed = nullptr);

// A read-only memory BIO over `data`, which must outlive it; null when OpenSSL fails.
BioPtr MemoryBio(std::string_view data);

// Every PEM certificate in `pem`, in order (none: empty). Clears the error queue: the end of the
// input reads as an error.
std::vector<X509Ptr> ReadCertificates(std::string_view pem);
// The first PEM private key (any PEM private-key form) or public key (SubjectPublicKeyInfo) in
// `pem`; null when there is none. The reason stays on the error queue (OpenSslErrors()).
PkeyPtr ReadPrivateKey(std::string_view pem);
PkeyPtr ReadPublicKey(std::string_view pem);

// PEM text: a certificate, a private key (unencrypted PKCS#8) and a public key
// (SubjectPublicKeyInfo). InternalError with OpenSSL's reason when encoding fails.
StatusOr<std::string> CertificatePem(const X509* cert);
StatusOr<std::string> PrivateKeyPem(const EVP_PKEY* key);
StatusOr<std::string> PublicKeyPem(const EVP_PKEY* key);

}  // namespace tessera::k8s
