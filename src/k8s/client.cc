#include "k8s/client.h"

#include <algorithm>
#include <arpa/inet.h>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <mutex>
#include <signal.h>
#include <thread>
#include <utility>

#include <httplib.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "k8s/backoff.h"
#include "k8s/openssl.h"
#include "k8s/paths.h"
#include "k8s/rate_limiter.h"

namespace tessera::k8s {
namespace {

using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int kMaxAttempts = 5;
constexpr std::size_t kMaxIdleConnections = 16;
constexpr auto kTokenRereadInterval = std::chrono::minutes(1);
// An idle watch without timeoutSeconds is given up (as a transport error) after this long.
constexpr auto kWatchIdleLimit = std::chrono::minutes(10);

// All the PEM certificates in `pem`; `what` names it in the error when there is none.
StatusOr<std::vector<X509Ptr>> ParseCertificates(const std::string& pem, std::string_view what) {
  std::vector<X509Ptr> certs = ReadCertificates(pem);
  if (certs.empty()) {
    return InvalidArgumentError(std::string(what) + ": no PEM certificate found");
  }
  return certs;
}

struct Endpoint {
  bool tls = true;
  std::string host;  // without brackets
  int port = 443;
  std::string host_header;  // "host:port", "[v6]:port"
  std::string prefix;       // path prefix of the server URL, without a trailing '/'
};

StatusOr<Endpoint> ParseServer(const std::string& server) {
  Endpoint ep;
  std::string_view rest(server);
  if (rest.rfind("https://", 0) == 0) {
    rest.remove_prefix(8);
  } else if (rest.rfind("http://", 0) == 0) {
    ep.tls = false;
    ep.port = 80;
    rest.remove_prefix(7);
  } else {
    return InvalidArgumentError("server \"" + server + "\": not an http:// or https:// URL");
  }
  const std::size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) {
    ep.prefix = std::string(rest.substr(slash));
    while (!ep.prefix.empty() && ep.prefix.back() == '/') ep.prefix.pop_back();
  }
  std::string_view port;
  if (!authority.empty() && authority.front() == '[') {
    const std::size_t close = authority.find(']');
    if (close == std::string_view::npos) {
      return InvalidArgumentError("server \"" + server + "\": unterminated [IPv6] address");
    }
    ep.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return InvalidArgumentError("server \"" + server + "\": bad port");
      port = after.substr(1);
    }
  } else {
    const std::size_t colon = authority.find(':');
    ep.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  if (ep.host.empty()) return InvalidArgumentError("server \"" + server + "\": no host");
  if (!port.empty()) {
    int value = 0;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || end != port.data() + port.size() || value <= 0 || value > 65535) {
      return InvalidArgumentError("server \"" + server + "\": bad port");
    }
    ep.port = value;
  }
  const bool v6 = ep.host.find(':') != std::string::npos;
  ep.host_header = (v6 ? "[" + ep.host + "]" : ep.host) + ":" + std::to_string(ep.port);
  return ep;
}

bool IsIpAddress(const std::string& host) {
  unsigned char buffer[sizeof(struct in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buffer) == 1 ||
         inet_pton(AF_INET6, host.c_str(), buffer) == 1;
}

bool IsIdempotentMethod(std::string_view method) {
  return method == "GET" || method == "HEAD" || method == "DELETE";
}

std::string Describe(std::string_view method, std::string_view path) {
  std::string out(method);
  out += ' ';
  out += path;
  return out;
}

// Retry-After as seconds (the API server sends an integer); `fallback` otherwise.
milliseconds RetryAfter(const std::string& value, milliseconds fallback) {
  int seconds = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), seconds);
  if (ec != std::errc() || end != value.data() + value.size() || seconds < 0) return fallback;
  return std::chrono::seconds(std::min(seconds, 60));
}

}  // namespace

std::string_view PatchContentType(PatchType type) {
  switch (type) {
    case PatchType::kMerge:
      return "application/merge-patch+json";
    case PatchType::kStrategicMerge:
      return "application/strategic-merge-patch+json";
    case PatchType::kJson:
      return "application/json-patch+json";
  }
  return "application/merge-patch+json";
}

std::string ResourceVersionOf(const Json& object) {
  const auto metadata = object.find("metadata");
  if (metadata == object.end() || !metadata->is_object()) return {};
  const auto rv = metadata->find("resourceVersion");
  if (rv == metadata->end() || !rv->is_string()) return {};
  return rv->get<std::string>();
}

struct Client::Impl {
  Config config;
  Endpoint endpoint;
  // TLS material, parsed once; every connection's SSL_CTX takes references.
  std::vector<X509Ptr> client_chain;  // [0] is the client certificate
  PkeyPtr client_key;
  X509StorePtr ca_store;
  TokenBucket limiter;

  std::mutex pool_mu;
  std::vector<std::unique_ptr<httplib::ClientImpl>> idle;

  std::mutex token_mu;
  std::string token;
  SteadyClock::time_point token_read_at;

  std::atomic<std::int64_t> requests{0};
  std::atomic<std::int64_t> retries{0};
  std::atomic<std::int64_t> throttled{0};
  std::atomic<std::int64_t> connections{0};

  explicit Impl(Config c)
      : config(std::move(c)),
        limiter(config.qps, config.burst),
        token(config.bearer_token),
        token_read_at(SteadyClock::now()) {}

  Status PrepareTls() {
    if (!endpoint.tls) return Status::Ok();
    if (!config.ca_pem.empty()) {
      TESSERA_ASSIGN_OR_RETURN(std::vector<X509Ptr> cas,
                               ParseCertificates(config.ca_pem, "certificate authority"));
      ca_store.reset(X509_STORE_new());
      for (const X509Ptr& ca : cas) {
        if (X509_STORE_add_cert(ca_store.get(), ca.get()) != 1) {
          return InvalidArgumentError("certificate authority: " + OpenSslErrors());
        }
      }
    }
    if (!config.client_cert_pem.empty() || !config.client_key_pem.empty()) {
      if (config.client_cert_pem.empty() || config.client_key_pem.empty()) {
        return InvalidArgumentError("client certificate and key must be given together");
      }
      TESSERA_ASSIGN_OR_RETURN(client_chain,
                               ParseCertificates(config.client_cert_pem, "client certificate"));
      client_key = ReadPrivateKey(config.client_key_pem);
      if (!client_key) {
        return InvalidArgumentError("client key: no PEM private key found (" + OpenSslErrors() +
                                    ")");
      }
      if (X509_check_private_key(client_chain[0].get(), client_key.get()) != 1) {
        ERR_clear_error();
        return InvalidArgumentError("client certificate and client key do not match");
      }
    }
    return Status::Ok();
  }

  StatusOr<std::unique_ptr<httplib::ClientImpl>> NewConnection() {
    ++connections;
    std::unique_ptr<httplib::ClientImpl> conn;
    if (endpoint.tls) {
      X509* cert = client_chain.empty() ? nullptr : client_chain[0].get();
      auto ssl = std::make_unique<httplib::SSLClient>(endpoint.host, endpoint.port, cert,
                                                      client_key.get());
      if (!ssl->is_valid()) {
        return InternalError("TLS client setup failed: " + OpenSslErrors());
      }
      SSL_CTX* ctx = ssl->ssl_context();
      for (std::size_t i = 1; i < client_chain.size(); ++i) {
        SSL_CTX_add1_chain_cert(ctx, client_chain[i].get());
      }
      // We verify during the handshake with our own store and host check (httplib's check
      // would also trust the system's CAs): off in httplib, on in the SSL_CTX.
      ssl->enable_server_certificate_verification(false);
      if (config.insecure_skip_tls_verify) {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
      } else {
        if (ca_store) {
          X509_STORE_up_ref(ca_store.get());
          SSL_CTX_set_cert_store(ctx, ca_store.get());
        } else {
          SSL_CTX_set_default_verify_paths(ctx);
        }
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
        X509_VERIFY_PARAM* param = SSL_CTX_get0_param(ctx);
        const int set = IsIpAddress(endpoint.host)
                            ? X509_VERIFY_PARAM_set1_ip_asc(param, endpoint.host.c_str())
                            : X509_VERIFY_PARAM_set1_host(param, endpoint.host.c_str(), 0);
        if (set != 1) return InternalError("TLS host check setup failed: " + OpenSslErrors());
      }
      conn = std::move(ssl);
    } else {
      conn = std::make_unique<httplib::ClientImpl>(endpoint.host, endpoint.port);
    }
    conn->set_keep_alive(true);
    conn->set_tcp_nodelay(true);  // headers and body go out in separate writes: no Nagle delay
    conn->set_url_encode(false);  // paths are escaped by the caller (paths.h)
    conn->set_connection_timeout(std::min<milliseconds>(config.timeout, milliseconds(10000)));
    return conn;
  }

  StatusOr<std::unique_ptr<httplib::ClientImpl>> Acquire() {
    {
      std::lock_guard<std::mutex> lock(pool_mu);
      if (!idle.empty()) {
        std::unique_ptr<httplib::ClientImpl> conn = std::move(idle.back());
        idle.pop_back();
        return conn;
      }
    }
    return NewConnection();
  }

  void Release(std::unique_ptr<httplib::ClientImpl> conn) {
    std::lock_guard<std::mutex> lock(pool_mu);
    if (idle.size() < kMaxIdleConnections) idle.push_back(std::move(conn));
  }

  // The bearer token, re-read from the token file when due (or `force`d). Returns whether
  // it changed.
  bool RefreshToken(bool force) {
    if (config.token_file.empty()) return false;
    std::lock_guard<std::mutex> lock(token_mu);
    const auto now = SteadyClock::now();
    if (!force && now - token_read_at < kTokenRereadInterval) return false;
    token_read_at = now;
    StatusOr<std::string> fresh = ReadTokenFile(config.token_file);
    if (!fresh.ok() || *fresh == token) return false;  // keep the last good token
    token = std::move(fresh).value();
    return true;
  }

  std::string Token() {
    RefreshToken(false);
    std::lock_guard<std::mutex> lock(token_mu);
    return token;
  }

  httplib::Request BuildRequest(std::string_view method, std::string_view path,
                                std::string_view body, std::string_view content_type) {
    httplib::Request req;
    req.method = std::string(method);
    req.path = endpoint.prefix + std::string(path);
    req.set_header("Host", endpoint.host_header);
    req.set_header("Accept", "application/json");
    req.set_header("User-Agent", config.user_agent);
    const std::string bearer = Token();
    if (!bearer.empty()) req.set_header("Authorization", "Bearer " + bearer);
    if (!body.empty()) {
      req.body = std::string(body);
      req.set_header("Content-Type", content_type.empty() ? std::string("application/json")
                                                          : std::string(content_type));
    }
    return req;
  }

  static std::string TransportError(httplib::Error error, const std::string& tls_detail) {
    std::string out = httplib::to_string(error);
    if (!tls_detail.empty()) out += " (" + tls_detail + ")";
    return out;
  }

  StatusOr<HttpResponse> Send(std::string_view method, std::string_view path, std::string_view body,
                              std::string_view content_type, bool idempotent) {
    const auto deadline = SteadyClock::now() + config.timeout;
    Backoff backoff(milliseconds(100), milliseconds(2000));
    bool token_retried = false;
    for (int attempt = 1;; ++attempt) {
      Status limited = limiter.Wait(deadline);
      if (!limited.ok()) return limited.WithContext(Describe(method, path));
      if (attempt > 1) ++retries;
      ++requests;

      TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<httplib::ClientImpl> conn, Acquire());
      const auto left = std::max<milliseconds>(
          milliseconds(1), std::chrono::duration_cast<milliseconds>(deadline - SteadyClock::now()));
      conn->set_read_timeout(left);
      conn->set_write_timeout(left);
      httplib::Request req = BuildRequest(method, path, body, content_type);
      httplib::Response res;
      httplib::Error error = httplib::Error::Success;
      ERR_clear_error();
      const bool sent = conn->send(req, res, error);
      bool verify_failed = false;
      const std::string tls_detail = sent ? std::string() : OpenSslErrors(&verify_failed);
      Release(std::move(conn));

      milliseconds delay(0);
      if (!sent) {
        // Connecting and the TLS handshake come before the request is written.
        const bool not_sent = error == httplib::Error::Connection ||
                              error == httplib::Error::ConnectionTimeout ||
                              error == httplib::Error::SSLConnection;
        // A certificate the server or we refuse will be refused again.
        const bool permanent = verify_failed || error == httplib::Error::SSLServerVerification ||
                               error == httplib::Error::SSLLoadingCerts;
        Status failed = UnavailableError(Describe(method, path) + ": " + config.server + ": " +
                                         TransportError(error, tls_detail));
        if (permanent || !(not_sent || idempotent) || attempt >= kMaxAttempts) return failed;
        delay = backoff.Next();
        if (SteadyClock::now() + delay >= deadline) return failed;
      } else if (res.status == 429) {
        ++throttled;
        delay = RetryAfter(res.get_header_value("Retry-After"), milliseconds(1000));
        if (attempt >= kMaxAttempts || SteadyClock::now() + delay >= deadline) {
          return HttpResponse{res.status, std::move(res.body)};
        }
      } else if (res.status == 401 && !token_retried && RefreshToken(true)) {
        token_retried = true;  // the token file had a newer token: once more with it
      } else {
        return HttpResponse{res.status, std::move(res.body)};
      }
      if (delay.count() > 0) std::this_thread::sleep_for(delay);
    }
  }

  StatusOr<Json> JsonCall(std::string_view method, std::string_view path, std::string_view body,
                          std::string_view content_type, bool idempotent) {
    TESSERA_ASSIGN_OR_RETURN(HttpResponse response,
                             Send(method, path, body, content_type, idempotent));
    if (response.status < 200 || response.status >= 300) {
      return ErrorFromResponse(method, path, response.status, response.body);
    }
    Json parsed = Json::parse(response.body, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded()) {
      return DataLossError(Describe(method, path) + ": the answer is not JSON");
    }
    return parsed;
  }
};

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

// OpenSSL writes to the socket with write(2): a peer that has closed the connection raises
// SIGPIPE, whose default action kills the process. Ignore it (as gRPC does) unless the
// program has installed a handler of its own; the write then fails with EPIPE instead.
void IgnoreSigpipeOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      signal(SIGPIPE, SIG_IGN);
    }
  });
}

StatusOr<std::unique_ptr<Client>> Client::New(Config config) {
  IgnoreSigpipeOnce();
  auto impl = std::make_unique<Impl>(std::move(config));
  StatusOr<Endpoint> endpoint = ParseServer(impl->config.server);
  if (!endpoint.ok()) return endpoint.status().WithContext("k8s client");
  impl->endpoint = std::move(endpoint).value();
  Status tls = impl->PrepareTls();
  if (!tls.ok()) return tls.WithContext("k8s client");
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

const Config& Client::config() const { return impl_->config; }

ClientStats Client::stats() const {
  ClientStats s;
  s.requests = impl_->requests.load();
  s.retries = impl_->retries.load();
  s.throttled = impl_->throttled.load();
  s.connections = impl_->connections.load();
  return s;
}

StatusOr<HttpResponse> Client::Do(std::string_view method, std::string_view path,
                                  std::string_view body, std::string_view content_type) {
  return impl_->Send(method, path, body, content_type, IsIdempotentMethod(method));
}

StatusOr<Json> Client::Get(std::string_view path) {
  return impl_->JsonCall("GET", path, {}, {}, true);
}

StatusOr<ListResult> Client::List(std::string_view path, const ListOptions& options) {
  ListResult result;
  std::string continue_token = options.continue_token;
  do {
    std::string url(path);
    AppendQuery(url, "labelSelector", options.label_selector);
    AppendQuery(url, "fieldSelector", options.field_selector);
    if (options.limit > 0) AppendQuery(url, "limit", std::to_string(options.limit));
    if (continue_token.empty()) {
      AppendQuery(url, "resourceVersion", options.resource_version);
    } else {
      AppendQuery(url, "continue", continue_token);
    }
    TESSERA_ASSIGN_OR_RETURN(Json page, impl_->JsonCall("GET", url, {}, {}, true));
    const auto items = page.find("items");
    if (items != page.end() && items->is_array()) {
      for (Json& item : *items) result.items.push_back(std::move(item));
    } else if (items != page.end() && !items->is_null()) {
      return DataLossError("GET " + url + ": \"items\" is not a list");
    }
    continue_token.clear();
    const auto metadata = page.find("metadata");
    if (metadata != page.end() && metadata->is_object()) {
      result.resource_version = metadata->value("resourceVersion", "");
      continue_token = metadata->value("continue", "");
    }
  } while (!continue_token.empty());
  return result;
}

StatusOr<Json> Client::Create(std::string_view path, const Json& object) {
  return impl_->JsonCall("POST", path, object.dump(), "application/json", false);
}

StatusOr<Json> Client::Update(std::string_view path, const Json& object) {
  return impl_->JsonCall("PUT", path, object.dump(), "application/json",
                         !ResourceVersionOf(object).empty());
}

StatusOr<Json> Client::Patch(std::string_view path, const Json& patch, PatchType type) {
  return impl_->JsonCall("PATCH", path, patch.dump(), PatchContentType(type), false);
}

Status Client::Delete(std::string_view path, const DeleteOptions& options) {
  std::string body;
  if (options.grace_period_seconds || !options.precondition_uid.empty() ||
      !options.precondition_resource_version.empty()) {
    Json delete_options = {{"kind", "DeleteOptions"}, {"apiVersion", "v1"}};
    if (options.grace_period_seconds) {
      delete_options["gracePeriodSeconds"] = *options.grace_period_seconds;
    }
    if (!options.precondition_uid.empty()) {
      delete_options["preconditions"]["uid"] = options.precondition_uid;
    }
    if (!options.precondition_resource_version.empty()) {
      delete_options["preconditions"]["resourceVersion"] = options.precondition_resource_version;
    }
    body = delete_options.dump();
  }
  TESSERA_ASSIGN_OR_RETURN(HttpResponse response,
                           impl_->Send("DELETE", path, body, "application/json", true));
  if (response.status < 200 || response.status >= 300) {
    return ErrorFromResponse("DELETE", path, response.status, response.body);
  }
  return Status::Ok();
}

StatusOr<Json> Client::UpdateWithRetry(std::string_view path,
                                       const std::function<Status(Json& object)>& mutate,
                                       int attempts) {
  for (int attempt = 1;; ++attempt) {
    TESSERA_ASSIGN_OR_RETURN(Json object, Get(path));
    TESSERA_RETURN_IF_ERROR(mutate(object));
    StatusOr<Json> updated = Update(path, object);
    if (updated.ok() || !IsConflict(updated.status()) || attempt >= attempts) return updated;
  }
}

Status Client::Watch(std::string_view path, const WatchOptions& options,
                     const std::function<bool(const WatchEvent& event)>& on_event,
                     std::stop_token stop) {
  std::string url(path);
  AppendQuery(url, "watch", "1");
  AppendQuery(url, "resourceVersion", options.resource_version);
  if (options.allow_watch_bookmarks) AppendQuery(url, "allowWatchBookmarks", "true");
  if (options.timeout_seconds > 0) {
    AppendQuery(url, "timeoutSeconds", std::to_string(options.timeout_seconds));
  }
  AppendQuery(url, "labelSelector", options.label_selector);
  AppendQuery(url, "fieldSelector", options.field_selector);
  if (stop.stop_requested()) return Status::Ok();

  Impl& impl = *impl_;
  TESSERA_RETURN_IF_ERROR(
      impl.limiter.Wait(SteadyClock::now() + impl.config.timeout).WithContext("WATCH " + url));
  ++impl.requests;
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<httplib::ClientImpl> conn, impl.NewConnection());
  conn->set_keep_alive(false);
  conn->set_read_timeout(options.timeout_seconds > 0
                             ? std::chrono::seconds(options.timeout_seconds) +
                                   std::chrono::seconds(60)
                             : std::chrono::duration_cast<std::chrono::seconds>(kWatchIdleLimit));

  int http_status = 0;
  std::string error_body;
  Status stream_status;
  bool ended_by_callback = false;
  LineSplitter splitter;
  auto on_line = [&](std::string_view line) {
    StatusOr<WatchEvent> event = ParseWatchEvent(line);
    if (!event.ok()) {
      stream_status = event.status().WithContext("WATCH " + url);
      return false;
    }
    if (event->type == WatchEventType::kError) {
      stream_status = WatchErrorStatus(url, event->object);
      return false;
    }
    if (!on_event(*event)) {
      ended_by_callback = true;
      return false;
    }
    return true;
  };

  httplib::Request req = impl.BuildRequest("GET", url, {}, {});
  req.response_handler = [&](const httplib::Response& response) {
    http_status = response.status;
    return !stop.stop_requested();
  };
  req.content_receiver = [&](const char* data, std::size_t size, std::uint64_t, std::uint64_t) {
    if (stop.stop_requested()) return false;
    if (http_status != 200) {
      if (error_body.size() < 65536) error_body.append(data, size);
      return true;
    }
    Status fed = splitter.Feed(std::string_view(data, size), on_line);
    if (!fed.ok()) stream_status = fed.WithContext("WATCH " + url);
    return stream_status.ok() && !ended_by_callback;
  };

  // Stop: shutting the socket down wakes the blocked read. httplib's stop() only reaches a
  // socket that exists, and the request may still be connecting, so a watchdog repeats it
  // until the request has returned.
  std::mutex mu;
  std::condition_variable_any cv;
  bool done = false;
  std::thread watchdog;
  if (stop.stop_possible()) {
    watchdog = std::thread([&] {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, stop, [&] { return done; });
      while (!done) {
        lock.unlock();
        conn->stop();
        lock.lock();
        cv.wait_for(lock, milliseconds(20), [&] { return done; });
      }
    });
  }
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  ERR_clear_error();
  const bool sent = conn->send(req, res, error);
  const std::string tls_detail = sent ? std::string() : OpenSslErrors();
  if (watchdog.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
    }
    cv.notify_all();
    watchdog.join();
  }

  if (stop.stop_requested()) return Status::Ok();
  if (!stream_status.ok()) return stream_status;
  if (ended_by_callback) return Status::Ok();
  if (!sent) {
    if (http_status != 0 && http_status != 200) {
      return ErrorFromResponse("WATCH", url, http_status, error_body);
    }
    return UnavailableError("WATCH " + url + ": " + impl.config.server + ": " +
                            Impl::TransportError(error, tls_detail));
  }
  if (res.status == 401) impl.RefreshToken(true);
  if (res.status != 200) {
    return ErrorFromResponse("WATCH", url, res.status, error_body.empty() ? res.body : error_body);
  }
  const std::string rest = splitter.TakeRemainder();
  if (rest.find_first_not_of(" \t\r\n") != std::string::npos) {
    on_line(rest);
    if (!stream_status.ok()) return stream_status;
  }
  return Status::Ok();
}

}  // namespace tessera::k8s
