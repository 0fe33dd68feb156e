// The webhooks' HTTPS endpoint: POST /mutate and /validate (AdmissionReview v1), GET /healthz.
// The serving certificate and key are files (a mounted Secret); they are re-read when they
// change, at most once a second, so a rotated certificate is served without a restart.
#pragma once

#include <memory>
#include <string>

#include "tessera/status.h"

#include "webhook/webhook.h"

namespace tessera::webhook {

// The current certificate (with its chain) and key from two PEM files.
class CertReloader {
 public:
  // Loads once; kInvalidArgument naming the file if either is unreadable or they don't match.
  static StatusOr<std::unique_ptr<CertReloader>> Create(std::string cert_file,
                                                        std::string key_file);
  ~CertReloader();
  // Installs the current certificate on a TLS connection (an SSL*), reloading first if the
  // files changed. A failed reload keeps the previous pair (and logs).
  bool Install(void* ssl);
  // Times the pair was (re)loaded successfully.
  int loads() const;

 private:
  struct Impl;
  explicit CertReloader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class WebhookServer {
 public:
  WebhookServer(Admission* admission, CertReloader* certs, int threads);
  ~WebhookServer();
  StatusOr<int> Bind(const std::string& host, int port);  // port 0: any
  void Run();
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::webhook
