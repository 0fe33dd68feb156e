// Certificate minting: throwaway certificate authorities and the certificates they sign, in
// memory (nothing is written to disk). Both calls leave this thread's OpenSSL error queue empty;
// their errors carry OpenSSL's reasons. The one implementation, used by the demo's admission
// webhooks (src/demo/pki.h) and by the tests' certificates (k8s/k8s_testing.h).
#pragma once

#include <string>

#include "tessera/status.h"

#include "k8s/openssl.h"

namespace tessera::k8s {

// A certificate and its private key.
struct CertifiedKey {
  X509Ptr cert;
  PkeyPtr key;
};

// What a leaf certificate is for: its extendedKeyUsage.
enum class CertUsage { kServer, kClient };

struct LeafSpec {
  std::string common_name;
  std::string organization;  // the subject's O (Kubernetes reads it as a group); "" for none
  CertUsage usage = CertUsage::kServer;
  // subjectAltName in OpenSSL's syntax, e.g. "IP:127.0.0.1,DNS:localhost"; "" for none.
  std::string subject_alt_names;
  int days = 1;
};

// A fresh EC P-256 key and a self-signed CA certificate (critical CA:TRUE, keyCertSign, cRLSign)
// whose subject is CN=`common_name`, valid from an hour ago for `days` days.
StatusOr<CertifiedKey> MintCa(const std::string& common_name, int days);

// A fresh EC P-256 key and a certificate for it signed by `ca` (critical CA:FALSE,
// digitalSignature and keyEncipherment, serverAuth or clientAuth, the authority key identifier),
// valid from an hour ago for `spec.days` days. Serial numbers are 64 random bits.
StatusOr<CertifiedKey> MintLeaf(const CertifiedKey& ca, const LeafSpec& spec);

}  // namespace tessera::k8s
