// Test helpers for the Kubernetes client: throwaway certificates and a scripted API server
// (httplib::Server on 127.0.0.1:0) whose streaming answers the test feeds chunk by chunk.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <httplib.h>

#include "tessera/status.h"

#include "k8s/config.h"

namespace tessera::k8s::testing {

struct Pki {
  std::string ca_pem;
  std::string server_cert_pem;  // for IP 127.0.0.1 and DNS localhost
  std::string server_key_pem;
  std::string client_cert_pem;  // CN=tessera-test, O=system:masters
  std::string client_key_pem;
};

// A fresh CA (EC P-256) with a server and a client certificate, valid for a day (minted by
// k8s/pki.h); `cn` names the CA, `server_names` are the server certificate's subjectAltNames.
StatusOr<Pki> MakePki(const std::string& cn = "tessera-test-ca",
                      const std::string& server_names = "IP:127.0.0.1,DNS:localhost");

class FakeApiServer {
 public:
  // Plain HTTP without `pki`; HTTPS with its server certificate otherwise, and then client
  // certificates signed by its CA are required when `require_client_cert`.
  explicit FakeApiServer(const Pki* pki = nullptr, bool require_client_cert = false);
  ~FakeApiServer();
  FakeApiServer(const FakeApiServer&) = delete;
  FakeApiServer& operator=(const FakeApiServer&) = delete;

  // Register handlers here before Start().
  httplib::Server& http() { return *server_; }
  Status Start();  // binds 127.0.0.1:0 and serves on a thread
  void Stop();     // ends open streams, stops and joins (also done by the destructor)

  int port() const { return port_; }
  std::string url() const;
  // server = url(), the CA when TLS, no rate limit, a short timeout.
  Config ClientConfig() const;
  bool stopping() const { return stopping_.load(); }

 private:
  std::unique_ptr<httplib::Server> server_;
  bool tls_ = false;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
  std::string ca_pem_;
};

// A chunked answer fed by the test: Push() chunks (sent as they come), End() to finish the
// answer; a stream left open stays idle until End() or the server stops.
class ChunkStream {
 public:
  void Push(std::string chunk);
  void End();
  // Makes `res` a chunked application/json answer that plays this stream.
  static void Serve(const std::shared_ptr<ChunkStream>& stream, httplib::Response& res,
                    const FakeApiServer& server);
  // Whether a client has started reading it.
  bool served() const { return served_.load(); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> chunks_;
  bool ended_ = false;
  std::atomic<bool> served_{false};
};

// Waits (polling every millisecond) until `done()` or `limit` passes; returns done().
bool WaitUntil(const std::function<bool()>& done,
               std::chrono::milliseconds limit = std::chrono::seconds(20));

}  // namespace tessera::k8s::testing
