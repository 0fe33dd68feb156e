#include "webhook/server.h"

#include <chrono>
#include <mutex>
#include <sys/stat.h>
#include <utility>
#include <vector>

#include <httplib.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "tessera/file.h"
#include "tessera/log.h"

#include "k8s/openssl.h"

namespace tessera::webhook {

using nlohmann::json;

namespace {

struct FileStamp {
  std::int64_t mtime_ns = 0;
  std::int64_t size = -1;
  std::uint64_t inode = 0;
  bool operator==(const FileStamp&) const = default;
};

FileStamp Stamp(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return {};
  return {static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec,
          static_cast<std::int64_t>(st.st_size), static_cast<std::uint64_t>(st.st_ino)};
}

struct Pair {
  k8s::X509Ptr cert;
  k8s::PkeyPtr key;
  k8s::X509StackPtr chain;  // the certificates after the first in the certificate file
};

StatusOr<Pair> LoadPair(const std::string& cert_file, const std::string& key_file) {
  StatusOr<std::string> cert_pem = ReadFile(cert_file);
  if (!cert_pem.ok()) {
    return cert_pem.status().WithContext("--tls-cert-file");
  }
  std::vector<k8s::X509Ptr> certs = k8s::ReadCertificates(*cert_pem);
  if (certs.empty()) {
    return InvalidInputError("--tls-cert-file " + cert_file + ": no PEM certificate");
  }
  Pair p;
  p.cert = std::move(certs[0]);
  p.chain.reset(sk_X509_new_null());
  for (std::size_t i = 1; i < certs.size() && p.chain; ++i) {
    if (sk_X509_push(p.chain.get(), certs[i].get()) > 0) {
      static_cast<void>(certs[i].release());  // the stack owns it now
    }
  }
  StatusOr<std::string> key_pem = ReadFile(key_file);
  if (!key_pem.ok()) {
    return key_pem.status().WithContext("--tls-key-file");
  }
  p.key = k8s::ReadPrivateKey(*key_pem);
  OPENSSL_cleanse(key_pem->data(), key_pem->size());
  if (!p.key || X509_check_private_key(p.cert.get(), p.key.get()) != 1) {
    ERR_clear_error();
    return InvalidInputError("--tls-key-file " + key_file +
                             ": no PEM private key matching the certificate");
  }
  return p;
}

}  // namespace

struct CertReloader::Impl {
  std::string cert_file;
  std::string key_file;
  std::mutex mu;
  Pair current;
  FileStamp cert_stamp;
  FileStamp key_stamp;
  std::chrono::steady_clock::time_point checked{};
  int loads = 0;

  void MaybeReload() {
    const auto now = std::chrono::steady_clock::now();
    if (now - checked < std::chrono::seconds(1)) return;
    checked = now;
    const FileStamp c = Stamp(cert_file);
    const FileStamp k = Stamp(key_file);
    if (c == cert_stamp && k == key_stamp) return;
    auto fresh = LoadPair(cert_file, key_file);
    if (!fresh.ok()) {  // e.g. caught between the two files' updates: keep serving the old pair
      TESSERA_LOG(kWarn, kWebhook, "certificate reload: %s (keeping the previous one)",
                  fresh.status().message().c_str());
      return;
    }
    current = std::move(*fresh);
    cert_stamp = c;
    key_stamp = k;
    ++loads;
    TESSERA_LOG(kInfo, kWebhook, "serving certificate loaded from %s", cert_file.c_str());
  }
};

CertReloader::CertReloader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CertReloader::~CertReloader() = default;

StatusOr<std::unique_ptr<CertReloader>> CertReloader::Create(std::string cert_file,
                                                             std::string key_file) {
  auto impl = std::make_unique<Impl>();
  impl->cert_file = std::move(cert_file);
  impl->key_file = std::move(key_file);
  TESSERA_ASSIGN_OR_RETURN(impl->current, LoadPair(impl->cert_file, impl->key_file));
  impl->cert_stamp = Stamp(impl->cert_file);
  impl->key_stamp = Stamp(impl->key_file);
  impl->checked = std::chrono::steady_clock::now();
  impl->loads = 1;
  return std::unique_ptr<CertReloader>(new CertReloader(std::move(impl)));
}

bool CertReloader::Install(void* ssl_ptr) {
  SSL* ssl = static_cast<SSL*>(ssl_ptr);
  std::lock_guard lock(impl_->mu);
  impl_->MaybeReload();
  const Pair& p = impl_->current;
  return SSL_use_cert_and_key(ssl, p.cert.get(), p.key.get(), p.chain.get(), 1) == 1;
}

int CertReloader::loads() const {
  std::lock_guard lock(impl_->mu);
  return impl_->loads;
}

struct WebhookServer::Impl {
  std::unique_ptr<httplib::SSLServer> http;
};

WebhookServer::WebhookServer(Admission* admission, CertReloader* certs, int threads)
    : impl_(std::make_unique<Impl>()) {
  impl_->http = std::make_unique<httplib::SSLServer>([certs](SSL_CTX& ctx) {
    SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION);
    SSL_CTX_set_cert_cb(
        &ctx,
        [](SSL* ssl, void* arg) { return static_cast<CertReloader*>(arg)->Install(ssl) ? 1 : 0; },
        certs);
    return true;
  });
  httplib::SSLServer& http = *impl_->http;
  const std::size_t n = static_cast<std::size_t>(std::max(threads, 1));
  http.new_task_queue = [n] { return new httplib::ThreadPool(n); };
  http.set_tcp_nodelay(true);
  http.set_keep_alive_timeout(1);
  // An AdmissionReview holds the object and, on update, the old one: etcd keeps each under
  // 1.5 MiB. A larger body is refused with 413 naming the limit.
  constexpr std::size_t kMaxReviewBytes = std::size_t{4} << 20;
  http.set_payload_max_length(kMaxReviewBytes);
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.status != 413) return;
    res.set_content("tessera-scheduler: " + req.path + ": request body over the limit of " +
                        std::to_string(kMaxReviewBytes >> 20) + " MiB",
                    "text/plain");
  });
  auto verb = [&http](const char* path, std::function<json(const json&)> fn) {
    http.Post(path, [fn = std::move(fn)](const httplib::Request& req, httplib::Response& res) {
      const json review = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
      res.set_content(fn(review.is_discarded() ? json() : review)
                          .dump(-1, ' ', false, json::error_handler_t::replace),
                      "application/json");
    });
  };
  verb("/mutate", [admission](const json& r) { return admission->Mutate(r); });
  verb("/validate", [admission](const json& r) { return admission->Validate(r); });
  http.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok", "text/plain");
  });
}

WebhookServer::~WebhookServer() { Stop(); }

StatusOr<int> WebhookServer::Bind(const std::string& host, int port) {
  const int bound = port == 0 ? impl_->http->bind_to_any_port(host)
                              : (impl_->http->bind_to_port(host, port) ? port : -1);
  if (bound < 0) {
    return UnavailableError("webhook listen " + host + ":" + std::to_string(port) +
                            ": cannot bind");
  }
  return bound;
}

void WebhookServer::Run() { impl_->http->listen_after_bind(); }
void WebhookServer::Stop() { impl_->http->stop(); }

}  // namespace tessera::webhook
