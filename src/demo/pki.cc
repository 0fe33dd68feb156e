#include "demo/pki.h"

#include "k8s/pki.h"

namespace tessera::demo {

namespace {

StatusOr<ServingPki> Mint(const std::string& ca_name, int days) {
  TESSERA_ASSIGN_OR_RETURN(k8s::CertifiedKey ca, k8s::MintCa(ca_name, days));
  TESSERA_ASSIGN_OR_RETURN(k8s::CertifiedKey serving,
                           k8s::MintLeaf(ca, {.common_name = "tessera-webhook",
                                              .organization = "",
                                              .usage = k8s::CertUsage::kServer,
                                              .subject_alt_names = "IP:127.0.0.1,DNS:localhost",
                                              .days = days}));
  ServingPki pki;
  TESSERA_ASSIGN_OR_RETURN(pki.ca_pem, k8s::CertificatePem(ca.cert.get()));
  TESSERA_ASSIGN_OR_RETURN(pki.cert_pem, k8s::CertificatePem(serving.cert.get()));
  TESSERA_ASSIGN_OR_RETURN(pki.key_pem, k8s::PrivateKeyPem(serving.key.get()));
  return pki;
}

}  // namespace

StatusOr<ServingPki> MakeServingPki(const std::string& ca_name, int days) {
  StatusOr<ServingPki> pki = Mint(ca_name, days);
  if (!pki.ok()) return Status(pki.status().code(), "demo " + pki.status().message());
  return pki;
}

}  // namespace tessera::demo
