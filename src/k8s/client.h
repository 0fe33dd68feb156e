// tessera's Kubernetes API client (ADR 0011): JSON over HTTP/1.1 + TLS (cpp-httplib, OpenSSL).
//
// Thread-safe: one Client serves all threads of a process. Calls borrow a kept-alive
// connection from a small pool (a new one when all are busy); each Watch has its own.
//
// Every call: waits for the client-side rate limit (token bucket: Config::qps/burst, shared by
// all calls) and finishes within Config::timeout, retries included. Retries:
//   - 429 Too Many Requests: any verb (the server did not act), after Retry-After (else 1 s);
//   - the connection or TLS handshake failed (nothing was sent): any verb, except that a
//     failed certificate verification is final;
//   - other transport errors (reset, timeout): only GET/HEAD/DELETE, and Update() of an object
//     that carries metadata.resourceVersion (a compare-and-swap); never POST or PATCH;
//   - 401 with a token file: the file is re-read and the call repeated once.
// Backoff between retries: 100 ms doubling to 2 s, with jitter.
//
// The first Client::New() sets SIGPIPE to SIG_IGN if it is still SIG_DFL (TLS writes to a
// closed connection would otherwise kill the process).
//
// Paths are API paths ("/api/v1/namespaces/ns/pods/x", see paths.h); the server's own path
// prefix, if its URL has one, is added here.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/status.h"

#include "k8s/config.h"
#include "k8s/errors.h"
#include "k8s/watch.h"

namespace tessera::k8s {

// A raw answer: any HTTP status (errors are only for the transport, the rate limit, the
// deadline).
struct HttpResponse {
  int status = 0;
  std::string body;
};

enum class PatchType : std::uint8_t {
  kMerge,           // application/merge-patch+json (RFC 7386)
  kStrategicMerge,  // application/strategic-merge-patch+json (built-in kinds only)
  kJson,            // application/json-patch+json (RFC 6902)
};
std::string_view PatchContentType(PatchType type);

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  std::int64_t limit = 500;      // page size; List() follows "continue" until the last page
  std::string continue_token;    // start here (normally empty)
  std::string resource_version;  // "" = most recent (a consistent read)
};

struct ListResult {
  std::vector<Json> items;
  std::string resource_version;  // of the list: where a watch continues
};

struct DeleteOptions {
  std::optional<std::int64_t> grace_period_seconds;
  std::string precondition_uid;               // delete only this incarnation
  std::string precondition_resource_version;  // delete only this version
};

struct ClientStats {
  std::int64_t requests = 0;     // HTTP requests sent (attempts, watches included)
  std::int64_t retries = 0;      // attempts after the first, any reason
  std::int64_t throttled = 0;    // 429 answers
  std::int64_t connections = 0;  // connection objects made (pooled ones and one per watch)
};

class Client {
 public:
  // Checks the configuration (URL, PEM material) and prepares TLS; connects lazily.
  static StatusOr<std::unique_ptr<Client>> New(Config config);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const Config& config() const;

  // One request (with the retries above); the body is sent when not empty.
  StatusOr<HttpResponse> Do(std::string_view method, std::string_view path,
                            std::string_view body = {}, std::string_view content_type = {});

  StatusOr<Json> Get(std::string_view path);
  // All pages of a collection.
  StatusOr<ListResult> List(std::string_view path, const ListOptions& options = {});
  // POST to a collection path (also subresources such as pods/x/binding).
  StatusOr<Json> Create(std::string_view path, const Json& object);
  // PUT; the object's metadata.resourceVersion makes it a compare-and-swap (409 if stale).
  StatusOr<Json> Update(std::string_view path, const Json& object);
  StatusOr<Json> Patch(std::string_view path, const Json& patch, PatchType type);
  Status Delete(std::string_view path, const DeleteOptions& options = {});

  // GET, mutate, PUT; on 409 Conflict GET again and repeat, at most `attempts` times.
  // `mutate` may return an error to give up (returned as is). Returns the stored object.
  StatusOr<Json> UpdateWithRetry(std::string_view path,
                                 const std::function<Status(Json& object)>& mutate,
                                 int attempts = 5);

  // Streams a watch of a collection until the server ends it (OK), `on_event` returns false
  // (OK), `stop` is requested (OK, within about 50 ms even on an idle stream) or an error:
  // an HTTP error answer, a transport error, or an ERROR event (not passed to on_event;
  // IsGone() for code 410). One request, no retries: the caller (Reflector) decides.
  Status Watch(std::string_view path, const WatchOptions& options,
               const std::function<bool(const WatchEvent& event)>& on_event,
               std::stop_token stop = {});

  ClientStats stats() const;

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// metadata.resourceVersion of an object ("" if none).
std::string ResourceVersionOf(const Json& object);

}  // namespace tessera::k8s
