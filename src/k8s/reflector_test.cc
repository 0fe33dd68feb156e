// The Reflector against a scripted collection: each list and watch request gets the next
// scripted answer, so every protocol edge case is played exactly.
#include "k8s/reflector.h"

#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "k8s/k8s_testing.h"
#include "k8s/paths.h"
#include "testutil/status_matchers.h"

namespace tessera::k8s {
namespace {

using testing::ChunkStream;
using testing::FakeApiServer;
using testing::WaitUntil;
using Answer = std::function<void(httplib::Response&)>;

std::string Event(const std::string& type, const std::string& name, const std::string& rv) {
  return Json{{"type", type}, {"object", {{"metadata", {{"name", name}, {"resourceVersion", rv}}}}}}
             .dump() +
         "\n";
}

std::string Bookmark(const std::string& rv) {
  return Json{{"type", "BOOKMARK"},
              {"object", {{"kind", "ConfigMap"}, {"metadata", {{"resourceVersion", rv}}}}}}
             .dump() +
         "\n";
}

std::string Expired() {
  return R"j({"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure",)j"
         R"j("message":"too old resource version: 10 (30)","reason":"Expired","code":410}})j"
         "\n";
}

Answer List(const std::string& rv, const std::vector<std::string>& names) {
  Json list = {
      {"kind", "ConfigMapList"}, {"metadata", {{"resourceVersion", rv}}}, {"items", Json::array()}};
  for (const std::string& name : names) {
    list["items"].push_back({{"metadata", {{"name", name}, {"resourceVersion", rv}}}});
  }
  const std::string body = list.dump();
  return [body](httplib::Response& res) { res.set_content(body, "application/json"); };
}

Answer HttpError(int code) {
  return [code](httplib::Response& res) {
    res.status = code;
    res.set_content(Json{{"kind", "Status"},
                         {"code", code},
                         {"message", "scripted"},
                         {"reason", code == 410 ? "Expired" : "InternalError"}}
                        .dump(),
                    "application/json");
  };
}

// /api/v1/namespaces/ns/configmaps, answering lists and watches from two scripts. When the
// watch script is empty, a watch gets an idle stream; when the list script is empty, 500.
class ScriptedCollection {
 public:
  ScriptedCollection() {
    server_.http().Get(
        ConfigMapsPath("ns"), [this](const httplib::Request& req, httplib::Response& res) {
          Answer answer;
          {
            std::lock_guard<std::mutex> lock(mu_);
            const bool watch = req.get_param_value("watch") == "1";
            auto& script = watch ? watches_ : lists_;
            if (watch) {
              watch_rvs_.push_back(req.get_param_value("resourceVersion"));
              watch_queries_.push_back("bookmarks=" + req.get_param_value("allowWatchBookmarks") +
                                       " timeout=" + req.get_param_value("timeoutSeconds"));
            } else {
              ++list_requests_;
            }
            if (!script.empty()) {
              answer = std::move(script.front());
              script.pop_front();
            } else if (watch) {
              auto idle = std::make_shared<ChunkStream>();
              idle_streams_.push_back(idle);
              answer = [this, idle](httplib::Response& r) { ChunkStream::Serve(idle, r, server_); };
            } else {
              answer = HttpError(500);
            }
          }
          answer(res);
        });
    EXPECT_OK(server_.Start());
  }

  void AddList(Answer a) {
    std::lock_guard<std::mutex> lock(mu_);
    lists_.push_back(std::move(a));
  }
  void AddWatch(Answer a) {
    std::lock_guard<std::mutex> lock(mu_);
    watches_.push_back(std::move(a));
  }
  // A watch answer that plays `chunks` and then ends the stream (or stays idle).
  Answer Stream(const std::vector<std::string>& chunks, bool end) {
    auto stream = std::make_shared<ChunkStream>();
    for (const std::string& c : chunks) stream->Push(c);
    if (end) stream->End();
    return [this, stream](httplib::Response& r) { ChunkStream::Serve(stream, r, server_); };
  }
  std::vector<std::string> watch_rvs() {
    std::lock_guard<std::mutex> lock(mu_);
    return watch_rvs_;
  }
  std::vector<std::string> watch_queries() {
    std::lock_guard<std::mutex> lock(mu_);
    return watch_queries_;
  }
  // Whether an idle (unscripted) watch is being served: the reflector is up to date.
  bool IdleWatchServed() {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& s : idle_streams_) {
      if (s->served()) return true;
    }
    return false;
  }
  Config ClientConfig() const { return server_.ClientConfig(); }

 private:
  FakeApiServer server_;
  std::mutex mu_;
  std::deque<Answer> lists_;
  std::deque<Answer> watches_;
  std::vector<std::shared_ptr<ChunkStream>> idle_streams_;
  std::vector<std::string> watch_rvs_;
  std::vector<std::string> watch_queries_;
  int list_requests_ = 0;
};

class Recorder : public ReflectorHandler {
 public:
  void OnSync(std::vector<Json> items, const std::string& rv) override {
    std::string line = "SYNC " + rv + " [";
    for (const Json& item : items) line += item["metadata"]["name"].get<std::string>() + " ";
    line += "]";
    std::lock_guard<std::mutex> lock(mu_);
    log_.push_back(line);
  }
  void OnEvent(WatchEventType type, const Json& object) override {
    std::lock_guard<std::mutex> lock(mu_);
    log_.push_back(std::string(WatchEventTypeName(type)) + " " +
                   object["metadata"]["name"].get<std::string>());
  }
  std::vector<std::string> log() {
    std::lock_guard<std::mutex> lock(mu_);
    return log_;
  }
  std::size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return log_.size();
  }

 private:
  std::mutex mu_;
  std::vector<std::string> log_;
};

ReflectorOptions FastOptions() {
  ReflectorOptions options;
  options.initial_backoff = std::chrono::milliseconds(1);
  options.max_backoff = std::chrono::milliseconds(4);
  return options;
}

// Runs the reflector until `done()`, then stops it; the stop must return (bounded wait).
void RunUntil(Reflector& reflector, const std::function<bool()>& done) {
  std::stop_source stop;
  std::future<void> running =
      std::async(std::launch::async, [&] { reflector.Run(stop.get_token()); });
  EXPECT_TRUE(WaitUntil(done)) << "condition not reached";
  stop.request_stop();
  EXPECT_EQ(running.wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << "Run() did not return after stop";
}

TEST(Reflector, RelistsAfterHttp410) {
  ScriptedCollection api;
  api.AddList(List("10", {"a"}));
  api.AddWatch(HttpError(410));
  api.AddList(List("20", {"a", "b"}));
  api.AddWatch(api.Stream({Event("ADDED", "c", "21")}, /*end=*/false));
  std::unique_ptr<Client> client = Client::New(api.ClientConfig()).value();
  Recorder recorder;
  Reflector reflector(*client, ConfigMapsPath("ns"), recorder, FastOptions());
  EXPECT_FALSE(reflector.HasSynced());
  RunUntil(reflector, [&] { return recorder.size() >= 3; });
  EXPECT_TRUE(reflector.HasSynced());
  EXPECT_EQ(recorder.log(),
            (std::vector<std::string>{"SYNC 10 [a ]", "SYNC 20 [a b ]", "ADDED c"}));
  EXPECT_EQ(api.watch_rvs(), (std::vector<std::string>{"10", "20"}));
  EXPECT_EQ(reflector.stats().lists, 2);
  EXPECT_EQ(reflector.stats().gone, 1);
  EXPECT_EQ(reflector.stats().errors, 0);
  EXPECT_EQ(reflector.LastResourceVersion(), "21");
}

TEST(Reflector, RelistsAfterAnErrorEventWithCode410) {
  ScriptedCollection api;
  api.AddList(List("10", {"a"}));
  api.AddWatch(api.Stream({Event("ADDED", "x", "11"), Expired(), Event("ADDED", "y", "12")},
                          /*end=*/true));
  api.AddList(List("30", {"a", "x"}));
  std::unique_ptr<Client> client = Client::New(api.ClientConfig()).value();
  Recorder recorder;
  Reflector reflector(*client, ConfigMapsPath("ns"), recorder, FastOptions());
  RunUntil(reflector, [&] { return api.IdleWatchServed(); });
  EXPECT_EQ(recorder.log(),
            (std::vector<std::string>{"SYNC 10 [a ]", "ADDED x", "SYNC 30 [a x ]"}));
  EXPECT_EQ(api.watch_rvs(), (std::vector<std::string>{"10", "30"}));
  EXPECT_EQ(reflector.stats().gone, 1);
  EXPECT_EQ(reflector.stats().lists, 2);
}

TEST(Reflector, BookmarksAdvanceTheVersionAndAClosedStreamResumesFromIt) {
  ScriptedCollection api;
  api.AddList(List("10", {"a"}));
  api.AddWatch(api.Stream({Event("ADDED", "b", "11"), Bookmark("15")}, /*end=*/true));
  api.AddWatch(api.Stream({Event("MODIFIED", "b", "16")}, /*end=*/true));
  std::unique_ptr<Client> client = Client::New(api.ClientConfig()).value();
  Recorder recorder;
  Reflector reflector(*client, ConfigMapsPath("ns"), recorder, FastOptions());
  RunUntil(reflector, [&] { return api.IdleWatchServed(); });
  EXPECT_EQ(recorder.log(), (std::vector<std::string>{"SYNC 10 [a ]", "ADDED b", "MODIFIED b"}));
  // Each watch continues where the last one ended: no relist, no gap, no replay.
  EXPECT_EQ(api.watch_rvs(), (std::vector<std::string>{"10", "15", "16"}));
  EXPECT_EQ(reflector.stats().lists, 1);
  EXPECT_EQ(reflector.stats().bookmarks, 1);
  EXPECT_EQ(reflector.stats().watches, 3);
  EXPECT_EQ(reflector.LastResourceVersion(), "16");
  // Every watch asks for bookmarks and a server-side end in [300, 600] s.
  for (const std::string& q : api.watch_queries()) {
    ASSERT_EQ(q.rfind("bookmarks=true timeout=", 0), 0u) << q;
    const int timeout = std::stoi(q.substr(q.find("timeout=") + 8));
    EXPECT_GE(timeout, 300);
    EXPECT_LE(timeout, 600);
  }
}

TEST(Reflector, ErrorsBackOffAndResumeFromTheSameVersion) {
  ScriptedCollection api;
  api.AddList(HttpError(500));
  api.AddList(List("10", {"a"}));
  api.AddWatch(HttpError(500));
  api.AddWatch(HttpError(503));
  api.AddWatch(api.Stream({Event("DELETED", "a", "12")}, /*end=*/false));
  std::unique_ptr<Client> client = Client::New(api.ClientConfig()).value();
  Recorder recorder;
  Reflector reflector(*client, ConfigMapsPath("ns"), recorder, FastOptions());
  RunUntil(reflector, [&] { return recorder.size() >= 2; });
  EXPECT_EQ(recorder.log(), (std::vector<std::string>{"SYNC 10 [a ]", "DELETED a"}));
  EXPECT_EQ(api.watch_rvs(), (std::vector<std::string>{"10", "10", "10"}));
  EXPECT_EQ(reflector.stats().lists, 1);
  EXPECT_EQ(reflector.stats().errors, 3);  // one list, two watches
  EXPECT_EQ(reflector.stats().gone, 0);
}

TEST(Reflector, StopsPromptlyWhileTheWatchIsIdle) {
  ScriptedCollection api;
  api.AddList(List("10", {}));
  std::unique_ptr<Client> client = Client::New(api.ClientConfig()).value();
  Recorder recorder;
  Reflector reflector(*client, ConfigMapsPath("ns"), recorder, FastOptions());
  RunUntil(reflector, [&] { return api.IdleWatchServed(); });
  EXPECT_EQ(recorder.log(), std::vector<std::string>{"SYNC 10 []"});
  EXPECT_EQ(reflector.stats().watches, 1);
}

}  // namespace
}  // namespace tessera::k8s
