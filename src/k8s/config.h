// Where the API server is and how to authenticate to it: kubeconfig files, the in-cluster
// service account, and the usual resolution order. Only certificates, bearer tokens and token
// files are supported (no exec/auth-provider plugins, no basic auth, no proxies): ADR 0011.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "tessera/status.h"

namespace tessera::k8s {

inline constexpr std::string_view kServiceAccountDir =
    "/var/run/secrets/kubernetes.io/serviceaccount";

struct Config {
  std::string server;           // "https://10.0.0.1:6443" (an optional path prefix is kept)
  std::string ca_pem;           // empty: the system's trust store
  std::string client_cert_pem;  // with client_key_pem: TLS client authentication
  std::string client_key_pem;
  std::string bearer_token;
  // When set, the token is read from this file and re-read every minute and after a 401
  // (service-account tokens are rotated by the kubelet).
  std::string token_file;
  std::string ns = "default";  // the default namespace of the context
  bool insecure_skip_tls_verify = false;
  double qps = 100;  // client-side rate limit shared by all calls of a Client; <= 0: none
  int burst = 200;
  std::chrono::milliseconds timeout{30000};  // per call: rate-limit wait + attempts
  std::string user_agent = "tessera";
};

// Reads a kubeconfig (YAML). `context` empty: the file's current-context. Relative file paths
// are resolved against the kubeconfig's folder; *-data fields win over their file variants.
// Errors name the file and the field, e.g.
//   "kubeconfig /x: users[admin].user.client-key-data: not valid base64".
StatusOr<Config> LoadKubeconfig(const std::string& path, std::string_view context = {});

// The pod's service account: KUBERNETES_SERVICE_HOST/_PORT and token, ca.crt and namespace
// under `service_account_dir`. The token is re-read from its file (token_file is set).
StatusOr<Config> InClusterConfig(
    const std::string& service_account_dir = std::string(kServiceAccountDir));

// The order every tessera binary uses: the flag's file; else the first file of $KUBECONFIG;
// else in-cluster (when KUBERNETES_SERVICE_HOST is set); else $HOME/.kube/config.
StatusOr<Config> ResolveConfig(std::string_view kubeconfig_flag);

// A token file's contents without surrounding whitespace; an empty file is an error.
StatusOr<std::string> ReadTokenFile(const std::string& path);

// Standard base64 (RFC 4648 with padding); CR/LF are ignored, anything else is an error.
StatusOr<std::string> Base64Decode(std::string_view text);

}  // namespace tessera::k8s
