// A throwaway certificate authority and a serving certificate for the demo's admission
// webhooks (the API server calls them over HTTPS and checks them against the CA bundle in the
// webhook configurations). Minted by k8s/pki.h; nothing is written to disk here.
#pragma once

#include <string>

#include "tessera/status.h"

namespace tessera::demo {

struct ServingPki {
  std::string ca_pem;    // the CA certificate: the webhook configurations' caBundle
  std::string cert_pem;  // the serving certificate, signed by the CA
  std::string key_pem;   // its private key (PKCS#8)
};

// A fresh EC P-256 CA named `ca_name` and a serving certificate for 127.0.0.1 and localhost,
// both valid from an hour ago for `days` days.
StatusOr<ServingPki> MakeServingPki(const std::string& ca_name, int days = 2);

}  // namespace tessera::demo
