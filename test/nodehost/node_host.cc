#include "nodehost/node_host.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <netinet/in.h>
#include <random>
#include <set>
#include <sstream>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include <httplib.h>

#include "tessera/exec_args.h"
#include "tessera/file.h"
#include "tessera/names.h"
#include "tessera/quantity.h"
#include "tessera/subprocess.h"

#include "contract/decision.h"
#include "k8s/k8s_testing.h"
#include "nodehost/container_standin.h"
#include "nodehost/kubelet_standin.h"

namespace tessera::nodehost {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr char kKeyId[] = "nodehost";

// ---- scenario parsing ----

Status RefuseUnknown(const json& object, const std::string& where,
                     std::initializer_list<std::string_view> known) {
  for (const auto& [key, value] : object.items()) {
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      std::string accepted;
      for (std::string_view k : known) accepted += (accepted.empty() ? "" : ", ") + std::string(k);
      return InvalidArgumentError(where + "." + key + ": unknown field (accepted: " + accepted +
                                  ")");
    }
  }
  return Status::Ok();
}

StatusOr<std::string> String(const json& object, const std::string& where, const char* key,
                             std::string fallback) {
  if (!object.contains(key)) return fallback;
  if (!object[key].is_string() || object[key].get<std::string>().empty()) {
    return InvalidArgumentError(where + "." + key + ": expected a non-empty string");
  }
  return object[key].get<std::string>();
}

// A DNS-1123 label (a container's name, a namespace): lower-case letters, digits and '-', at most
// 63, starting and ending alphanumeric; a subdomain (a pod's or node's name) also takes '.'
// between labels, at most 253. These become paths (cgroups, logs) and must never escape them.
Status CheckName(const std::string& name, const std::string& field, bool subdomain) {
  const std::size_t max = subdomain ? 253 : 63;
  bool ok = !name.empty() && name.size() <= max;
  for (std::size_t i = 0; ok && i < name.size(); ++i) {
    const char c = name[i];
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    const bool inner = c == '-' || (subdomain && c == '.');
    ok = alnum || (inner && i > 0 && i + 1 < name.size() && !(c == '.' && name[i - 1] == '.'));
  }
  if (ok) return Status::Ok();
  return InvalidArgumentError(field + ": \"" + name + "\" is not a DNS-1123 " +
                              (subdomain ? "subdomain (lower-case letters, digits, '-' and '.', "
                                           "at most 253)"
                                         : "label (lower-case letters, digits and '-', at most "
                                           "63)"));
}

StatusOr<double> Number(const json& object, const std::string& where, const char* key,
                        double fallback, double max) {
  if (!object.contains(key)) return fallback;
  if (!object[key].is_number() || object[key].get<double>() < 0 ||
      object[key].get<double>() > max) {
    return InvalidArgumentError(where + "." + key + ": expected a number from 0 to " +
                                std::to_string(static_cast<long long>(max)));
  }
  return object[key].get<double>();
}

StatusOr<bool> Bool(const json& object, const std::string& where, const char* key) {
  if (!object.contains(key)) return false;
  if (!object[key].is_boolean())
    return InvalidArgumentError(where + "." + key + ": expected true or false");
  return object[key].get<bool>();
}

template <typename T>
StatusOr<T> Enum(const json& object, const std::string& where, const char* key, T fallback,
                 StatusOr<T> (*parse)(std::string_view)) {
  TESSERA_ASSIGN_OR_RETURN(const std::string text, String(object, where, key, ""));
  if (text.empty()) return fallback;
  auto parsed = parse(text);
  if (!parsed.ok()) return parsed.status().WithContext(where + "." + key);
  return *parsed;
}

StatusOr<ScenarioContainer> ParseContainer(const json& c, const std::string& where) {
  if (!c.is_object()) return InvalidArgumentError(where + ": expected an object");
  TESSERA_RETURN_IF_ERROR(RefuseUnknown(c, where,
                                        {"name", "mode", "gpu", "memory", "cores", "compute",
                                         "computeWindowMs", "command", "env", "outsideLibrary"}));
  ScenarioContainer out;
  TESSERA_ASSIGN_OR_RETURN(out.name, String(c, where, "name", "main"));
  TESSERA_RETURN_IF_ERROR(CheckName(out.name, where + ".name", false));
  TESSERA_ASSIGN_OR_RETURN(out.mode,
                           Enum(c, where, "mode", SharingMode::kShared, &ParseSharingMode));
  TESSERA_ASSIGN_OR_RETURN(out.compute,
                           Enum(c, where, "compute", ComputeMode::kHard, &ParseComputeMode));
  TESSERA_ASSIGN_OR_RETURN(const double gpu, Number(c, where, "gpu", 0, 63));
  out.gpu = static_cast<int>(gpu);
  TESSERA_ASSIGN_OR_RETURN(const double cores, Number(c, where, "cores", 0, 100));
  out.cores_percent = static_cast<std::uint32_t>(cores);
  TESSERA_ASSIGN_OR_RETURN(const double window, Number(c, where, "computeWindowMs", 0, 60000));
  out.compute_window_ms = static_cast<std::uint32_t>(window);
  TESSERA_ASSIGN_OR_RETURN(const std::string memory, String(c, where, "memory", "0"));
  auto bytes = ParseQuantity(memory);
  if (!bytes.ok()) return bytes.status().WithContext(where + ".memory");
  out.memory_bytes = *bytes;
  TESSERA_ASSIGN_OR_RETURN(out.outside_library, Bool(c, where, "outsideLibrary"));
  if (!c.contains("command") || !c["command"].is_array() || c["command"].empty()) {
    return InvalidArgumentError(where + ".command: expected a non-empty list of strings");
  }
  for (const json& a : c["command"]) {
    if (!a.is_string()) return InvalidArgumentError(where + ".command: expected strings only");
    out.command.push_back(a.get<std::string>());
  }
  if (c.contains("env")) {
    if (!c["env"].is_object())
      return InvalidArgumentError(where + ".env: expected an object of strings");
    for (const auto& [key, value] : c["env"].items()) {
      if (!value.is_string())
        return InvalidArgumentError(where + ".env." + key + ": expected a string");
      out.env[key] = value.get<std::string>();
    }
  }
  if (!out.outside_library && out.memory_bytes == 0) {
    return InvalidArgumentError(where + ".memory: required (a quantity such as 4Gi)");
  }
  return out;
}

StatusOr<ScenarioPod> ParsePod(const json& p, const std::string& where) {
  if (!p.is_object()) return InvalidArgumentError(where + ": expected an object");
  TESSERA_RETURN_IF_ERROR(
      RefuseUnknown(p, where,
                    {"name", "namespace", "tier", "priority", "startAfterSeconds", "mpsUser",
                     "forgeSignature", "containers"}));
  ScenarioPod out;
  if (!p.contains("name")) return InvalidArgumentError(where + ".name: required");
  TESSERA_ASSIGN_OR_RETURN(out.name, String(p, where, "name", ""));
  TESSERA_RETURN_IF_ERROR(CheckName(out.name, where + ".name", true));
  TESSERA_ASSIGN_OR_RETURN(out.pod_namespace, String(p, where, "namespace", "default"));
  TESSERA_RETURN_IF_ERROR(CheckName(out.pod_namespace, where + ".namespace", false));
  TESSERA_ASSIGN_OR_RETURN(out.tier,
                           Enum(p, where, "tier", TrustTier::kDepartment, &ParseTrustTier));
  TESSERA_ASSIGN_OR_RETURN(out.priority,
                           Enum(p, where, "priority", PriorityClass::kNormal, &ParsePriorityClass));
  TESSERA_ASSIGN_OR_RETURN(out.start_after_s, Number(p, where, "startAfterSeconds", 0, 3600));
  TESSERA_ASSIGN_OR_RETURN(out.mps_user, String(p, where, "mpsUser", ""));
  TESSERA_ASSIGN_OR_RETURN(out.forge_signature, Bool(p, where, "forgeSignature"));
  if (!p.contains("containers") || !p["containers"].is_array() || p["containers"].empty()) {
    return InvalidArgumentError(where + ".containers: expected a non-empty list");
  }
  std::set<std::string> names;
  for (std::size_t i = 0; i < p["containers"].size(); ++i) {
    const std::string at = where + ".containers[" + std::to_string(i) + "]";
    TESSERA_ASSIGN_OR_RETURN(ScenarioContainer c, ParseContainer(p["containers"][i], at));
    if (!names.insert(c.name).second)
      return InvalidArgumentError(at + ".name: \"" + c.name + "\" repeats");
    out.containers.push_back(std::move(c));
  }
  return out;
}

// ---- the fake API server's objects ----

struct ApiState {
  std::mutex mu;
  json node;
  std::map<std::string, json> pods;  // namespace/name
  json events = json::array();
  json evictions = json::array();
  json unhandled = json::array();
};

json StatusObject(int code, const std::string& message) {
  return {{"kind", "Status"},
          {"apiVersion", "v1"},
          {"status", "Failure"},
          {"message", message},
          {"code", code}};
}

// A request's body as JSON, or as the string it was when it does not parse (kept for the report).
json AsJson(const std::string& body) {
  json parsed = json::parse(body, nullptr, false);
  return parsed.is_discarded() ? json(body) : parsed;
}

void Reply(httplib::Response& res, int code, const json& body) {
  res.status = code;
  res.set_content(body.dump(), "application/json");
}

void ServeApi(httplib::Server& http, ApiState& state, const std::string& node_name) {
  const std::string node_path = "/api/v1/nodes/" + node_name;
  http.Get(node_path, [&state](const httplib::Request&, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(state.mu);
    Reply(res, 200, state.node);
  });
  const auto patch_node = [&state](const httplib::Request& req, httplib::Response& res) {
    // tessera-node sends JSON merge patches; anything else would be applied wrongly.
    if (req.get_header_value("Content-Type").find("application/merge-patch+json") != 0) {
      return Reply(res, 415, StatusObject(415, "only application/merge-patch+json is served"));
    }
    const json patch = json::parse(req.body, nullptr, false);
    if (patch.is_discarded()) return Reply(res, 400, StatusObject(400, "patch is not JSON"));
    std::lock_guard<std::mutex> lock(state.mu);
    state.node.merge_patch(patch);
    Reply(res, 200, state.node);
  };
  http.Patch(node_path, patch_node);
  http.Patch(node_path + "/status", patch_node);
  http.Get(R"(/api/v1/namespaces/([^/]+)/pods/([^/]+))",
           [&state](const httplib::Request& req, httplib::Response& res) {
             std::lock_guard<std::mutex> lock(state.mu);
             auto it = state.pods.find(req.matches[1].str() + "/" + req.matches[2].str());
             if (it == state.pods.end()) return Reply(res, 404, StatusObject(404, "pod not found"));
             Reply(res, 200, it->second);
           });
  http.Post(R"(/api/v1/namespaces/([^/]+)/pods/([^/]+)/eviction)",
            [&state](const httplib::Request& req, httplib::Response& res) {
              std::lock_guard<std::mutex> lock(state.mu);
              state.evictions.push_back({{"pod", req.matches[1].str() + "/" + req.matches[2].str()},
                                         {"body", json::parse(req.body, nullptr, false)}});
              Reply(res, 201, json::object());
            });
  const auto event = [&state](const httplib::Request& req, httplib::Response& res) {
    const json body = AsJson(req.body);
    std::lock_guard<std::mutex> lock(state.mu);
    state.events.push_back(body);
    Reply(res, 201, body);
  };
  http.Post(R"(/api/v1/namespaces/([^/]+)/events)", event);
  http.Post(R"(/apis/events.k8s.io/v1/namespaces/([^/]+)/events)", event);
  http.set_error_handler([&state](const httplib::Request& req, httplib::Response& res) {
    if (res.status != 404 || !res.body.empty()) return;
    std::lock_guard<std::mutex> lock(state.mu);
    state.unhandled.push_back(req.method + " " + req.path);
    Reply(res, 404, StatusObject(404, "not served by tessera-node-host"));
  });
}

// ---- helpers ----

std::string RandomUid() {
  std::random_device rd;
  std::mt19937_64 rng((static_cast<std::uint64_t>(rd()) << 32) ^ rd());
  char out[40];
  const std::uint64_t a = rng(), b = rng();
  std::snprintf(out, sizeof out, "%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(a >> 32),
                static_cast<unsigned>((a >> 16) & 0xffff), static_cast<unsigned>(a & 0xffff),
                static_cast<unsigned>(b >> 48),
                static_cast<unsigned long long>(b & 0xffffffffffffULL));
  return out;
}

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 0;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  if (fd >= 0) close(fd);
  return port;
}

// One container of the run as it goes.
struct Running {
  std::string pod;        // namespace/name
  std::string container;  // name
  std::string device;     // its slot ("" outside the library)
  std::vector<std::string> cgroups;
  pid_t pid = -1;  // leads its own process group
  Clock::time_point started;
  json report;
};

constexpr char kLockFile[] = "/tmp/tessera-node-host.lock";
// The binds' targets a run created on the host, one per line, until it removed them: a run that
// was killed leaves the list, and the next run removes what it names.
constexpr char kCreatedFile[] = "/tmp/tessera-node-host.created";

std::atomic<bool> g_stop{false};  // SIGTERM or SIGINT: end the run (and clean up)

// One run of a scenario. Whatever it started or created is undone by the destructor, on every
// path out (an error, a signal, the end).
class Run {
 public:
  Run(const Scenario& scenario, const RunOptions& options) : scenario_(scenario), o_(options) {}
  ~Run() { CleanUp(); }
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  StatusOr<json> Play();

 private:
  std::string Dir(const std::string& rel) const { return o_.dir + "/" + rel; }
  Status Lock();
  Status StartNode();
  Status WaitForGpus();
  void StartPod(const ScenarioPod& p, const contract::Signer& signer,
                const contract::Signer& forger, json& pod_report);
  void StartContainer(const ScenarioPod& p, const ScenarioContainer& c, const std::string& uid,
                      json& pod_report);
  // Reaps the containers that have exited; stops the rest when `stop_all`. Whether any runs.
  bool Reap(bool stop_all);
  void Finish(Running& r, int status);
  void Remember(const std::vector<std::string>& created);
  void CleanUp();

  const Scenario& scenario_;
  const RunOptions& o_;
  int lock_fd_ = -1;
  ApiState state_;
  std::unique_ptr<k8s::testing::FakeApiServer> api_;
  std::unique_ptr<KubeletStandin> kubelet_;
  pid_t node_pid_ = -1;
  std::string node_exit_ = "not started";
  int metrics_port_ = 0;
  std::vector<std::string> gpus_;
  std::vector<Running> running_;
  std::vector<std::string> created_targets_;
  Clock::time_point t0_;
};

Status Run::Lock() {
  lock_fd_ = open(kLockFile, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd_ < 0) return UnavailableError(std::string("cannot open ") + kLockFile);
  // One run at a time on a host: the binds' targets a run creates on the host are removed when it
  // ends, which would detach another run's binds.
  for (int waited = 0; flock(lock_fd_, LOCK_EX | LOCK_NB) != 0; ++waited) {
    if (waited == 600 || g_stop) {
      return UnavailableError(std::string("another tessera-node-host run holds ") + kLockFile +
                              " (waited 60 s)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // What a killed run left on the host.
  std::vector<std::string> left;
  std::istringstream stale(ReadFile(kCreatedFile).value_or(""));
  for (std::string line; std::getline(stale, line);) {
    if (!line.empty()) left.push_back(line);
  }
  RemoveCreated(left);
  std::remove(kCreatedFile);
  return Status::Ok();
}

void Run::Remember(const std::vector<std::string>& created) {
  created_targets_.insert(created_targets_.end(), created.begin(), created.end());
  std::ofstream list(kCreatedFile, std::ios::app);
  for (const std::string& path : created) list << path << '\n';
}

Status Run::StartNode() {
  metrics_port_ = FreePort();
  SpawnOptions node;
  node.argv = {o_.node_binary,
               "--node-name",
               scenario_.node,
               "--kubeconfig",
               Dir("kubeconfig"),
               "--device-plugin-dir",
               Dir("plugins"),
               "--pod-resources-socket",
               Dir("pod-resources.sock"),
               "--state-dir",
               Dir("state"),
               "--cdi-dir",
               Dir("cdi"),
               "--decision-keys",
               Dir("keys"),
               "--hook-library",
               o_.hook_library,
               "--metrics-listen",
               "127.0.0.1:" + std::to_string(metrics_port_)};
  node.argv.insert(node.argv.end(), o_.node_args.begin(), o_.node_args.end());
  node.stdin_to = Redirect::Null();
  node.stdout_to = node.stderr_to = Redirect::AppendTo(Dir("logs/tessera-node.log"));
  node.parent_death_signal = SIGTERM;
  TESSERA_ASSIGN_OR_RETURN(node_pid_, Spawn(node));
  node_exit_ = "running";
  return Status::Ok();
}

Status Run::WaitForGpus() {
  const auto failed = [&](const std::string& what) {
    const Termination t = Terminate(node_pid_, std::chrono::seconds(5));
    node_pid_ = -1;
    node_exit_ = DescribeWaitStatus(t.status);
    return UnavailableError(what + " (tessera-node: " + node_exit_ + "; log " +
                            Dir("logs/tessera-node.log") + "):\n" +
                            TailOfFile(Dir("logs/tessera-node.log"), 20));
  };
  if (Status s = kubelet_->WaitForDevices(std::chrono::seconds(60)); !s.ok()) {
    return failed(s.message());
  }
  // The GPUs tessera-node found, from its inventory on the Node.
  for (const auto until = Clock::now() + std::chrono::seconds(60);
       gpus_.empty() && Clock::now() < until && !g_stop;) {
    {
      std::lock_guard<std::mutex> lock(state_.mu);
      const json& a = state_.node["metadata"]["annotations"];
      const std::string key(names::kAnnotationInventory);
      if (a.contains(key) && a[key].is_string()) {
        const json inventory = json::parse(a[key].get<std::string>(), nullptr, false);
        const json none = json::array();
        const json& gpus =
            inventory.is_object() && inventory.contains("gpus") ? inventory["gpus"] : none;
        for (const json& g : gpus.is_array() ? gpus : none) {
          if (g.is_object() && g.contains("uuid") && g["uuid"].is_string()) {
            gpus_.push_back(g["uuid"].get<std::string>());
          }
        }
      }
    }
    if (gpus_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (gpus_.empty()) return failed("tessera-node published no GPU inventory within 60 s");
  return Status::Ok();
}

void Run::StartPod(const ScenarioPod& p, const contract::Signer& signer,
                   const contract::Signer& forger, json& pod_report) {
  const std::string uid = pod_report["uid"];
  const std::string key = p.pod_namespace + "/" + p.name;
  contract::Decision decision;
  decision.pod_uid = uid;
  decision.pod_namespace = p.pod_namespace;
  decision.pod_name = p.name;
  decision.node = scenario_.node;
  decision.tier = p.tier;
  decision.priority = p.priority;
  decision.issued_at = contract::Rfc3339(std::time(nullptr));
  decision.key_id = kKeyId;
  for (const ScenarioContainer& c : p.containers) {
    if (c.outside_library) continue;
    if (c.gpu >= static_cast<int>(gpus_.size())) {
      pod_report["error"] = "container " + c.name + ": gpu " + std::to_string(c.gpu) +
                            ", but the node has " + std::to_string(gpus_.size()) + " GPU(s)";
      return;
    }
    decision.containers.push_back(
        {c.name,
         c.mode,
         {{gpus_[static_cast<std::size_t>(c.gpu)], c.memory_bytes, c.cores_percent}},
         c.compute,
         c.compute_window_ms});
  }
  const std::string text = contract::EncodeDecision(decision);
  auto signature = (p.forge_signature ? forger : signer).Sign(text);
  if (!signature.ok()) {
    pod_report["error"] = "signing the decision: " + signature.status().message();
    return;
  }
  json annotations = {{std::string(names::kAnnotationDecision), text},
                      {std::string(names::kAnnotationDecisionSignature), *signature}};
  if (!p.mps_user.empty()) annotations[std::string(names::kAnnotationMpsUser)] = p.mps_user;
  json containers = json::array();
  for (const ScenarioContainer& c : p.containers) containers.push_back({{"name", c.name}});
  {
    std::lock_guard<std::mutex> lock(state_.mu);
    state_.pods[key] = {{"apiVersion", "v1"},
                        {"kind", "Pod"},
                        {"metadata",
                         {{"name", p.name},
                          {"namespace", p.pod_namespace},
                          {"uid", uid},
                          {"annotations", annotations}}},
                        {"spec", {{"nodeName", scenario_.node}, {"containers", containers}}},
                        {"status", {{"phase", "Running"}}}};
  }
  for (const ScenarioContainer& c : p.containers) StartContainer(p, c, uid, pod_report);
}

void Run::StartContainer(const ScenarioPod& p, const ScenarioContainer& c, const std::string& uid,
                         json& pod_report) {
  Running r;
  r.pod = p.pod_namespace + "/" + p.name;
  r.container = c.name;
  const std::string log = Dir("logs/" + p.pod_namespace + "." + p.name + "." + c.name + ".log");
  r.cgroups = CgroupFolders("tessera-nodehost/pod" + uid + "/" + c.name);
  r.report = {{"name", c.name}, {"log", log}, {"outsideLibrary", c.outside_library}};
  const auto refuse = [&](const std::string& why) {
    r.report["error"] = why;
    if (!r.device.empty()) kubelet_->Release(r.device);
    pod_report["containers"].push_back(r.report);
  };
  ContainerSpec spec;
  spec.argv = c.command;
  spec.cgroups = r.cgroups;
  SpawnOptions run;
  run.stdin_to = Redirect::Null();  // kubelet's default: no stdin
  run.stdout_to = run.stderr_to = Redirect::AppendTo(log);
  run.parent_death_signal = SIGKILL;
  run.new_process_group = true;
  if (!c.outside_library) {
    auto allocation = kubelet_->Admit({p.pod_namespace, p.name, c.name});
    if (!allocation.ok()) return refuse(allocation.status().message());
    r.device = allocation->device;
    r.report["slot"] = r.device;
    spec.mounts = allocation->mounts;
    for (const auto& [k, v] : allocation->envs) run.env.push_back(k + "=" + v);
    for (const std::string& name : allocation->cdi_devices) {
      auto edits = ReadCdiEdits(Dir("cdi"), name);
      if (!edits.ok()) return refuse(edits.status().message());
      run.env.insert(run.env.end(), edits->env.begin(), edits->env.end());
      for (const agent::Mount& m : edits->mounts) {
        if (m.host_path != m.container_path) spec.mounts.push_back(m);
      }
    }
    Remember(CreateMountTargets(spec.mounts));
  }
  for (const auto& [k, v] : c.env) run.env.push_back(k + "=" + v);
  run.argv = {o_.self, "exec-container"};
  const auto args = ExecContainerArgs(spec);
  run.argv.insert(run.argv.end(), args.begin(), args.end());
  auto pid = Spawn(run);
  if (!pid.ok()) return refuse(pid.status().message());
  r.pid = *pid;
  r.started = Clock::now();
  r.report["startedAtSeconds"] = std::chrono::duration<double>(r.started - t0_).count();
  r.report["startedAtUnix"] = static_cast<std::int64_t>(std::time(nullptr));
  running_.push_back(std::move(r));
}

void Run::Finish(Running& r, int status) {
  r.report["exit"] = DescribeWaitStatus(status);
  r.report["exitCode"] = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.report["seconds"] = std::chrono::duration<double>(Clock::now() - r.started).count();
  r.pid = -1;
  // As a runtime: the container is gone when its first process is, leftovers included; then
  // kubelet frees its device.
  for (const std::string& cg : r.cgroups) KillAndRemoveCgroup(cg);
  if (!r.device.empty()) kubelet_->Release(r.device);
}

bool Run::Reap(bool stop_all) {
  bool any = false;
  for (Running& r : running_) {
    if (r.pid < 0) continue;
    std::optional<int> status = TryWait(r.pid);
    if (!status && stop_all) {
      status = Terminate(r.pid, std::chrono::seconds(5), /*group=*/true).status;
      r.report["stoppedAtTimeout"] = true;
    }
    if (status) {
      Finish(r, *status);
    } else {
      any = true;
    }
  }
  return any;
}

StatusOr<json> Run::Play() {
  TESSERA_RETURN_IF_ERROR(Lock());
  for (const char* sub : {"plugins", "state", "cdi", "keys", "logs"}) {
    std::error_code ec;
    fs::create_directories(Dir(sub), ec);
    if (ec) return UnavailableError("cannot create " + Dir(sub) + ": " + ec.message());
  }
  if (CgroupFolders("probe").empty()) {
    return FailedPreconditionError(
        "no cgroup to put containers in: neither cgroup v2 at /sys/fs/cgroup nor the v1 pids or "
        "memory hierarchy holds this process (/proc/self/cgroup)");
  }
  // The decisions' key (tessera-node gets its public half) and another one to forge with.
  TESSERA_ASSIGN_OR_RETURN(const std::string pem, contract::GenerateSigningKeyPem());
  TESSERA_ASSIGN_OR_RETURN(const contract::Signer signer, contract::Signer::FromPem(pem));
  TESSERA_ASSIGN_OR_RETURN(const std::string forged_pem, contract::GenerateSigningKeyPem());
  TESSERA_ASSIGN_OR_RETURN(const contract::Signer forger, contract::Signer::FromPem(forged_pem));
  TESSERA_RETURN_IF_ERROR(
      agent::WriteFileAtomically(Dir("keys/") + kKeyId + ".pem", signer.PublicKeyPem(), 0644));

  state_.node = {
      {"apiVersion", "v1"},
      {"kind", "Node"},
      {"metadata",
       {{"name", scenario_.node}, {"labels", json::object()}, {"annotations", json::object()}}},
      {"status", json::object()}};
  api_ = std::make_unique<k8s::testing::FakeApiServer>();
  ServeApi(api_->http(), state_, scenario_.node);
  TESSERA_RETURN_IF_ERROR(api_->Start());
  TESSERA_RETURN_IF_ERROR(agent::WriteFileAtomically(
      Dir("kubeconfig"),
      "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
      "clusters: [{name: c, cluster: {server: '" +
          api_->url() +
          "'}}]\n"
          "users: [{name: u, user: {}}]\ncontexts: [{name: c, context: {cluster: c, user: "
          "u}}]\n",
      0600));
  TESSERA_ASSIGN_OR_RETURN(kubelet_,
                           KubeletStandin::Start({Dir("plugins"), Dir("pod-resources.sock"),
                                                  std::string(names::kResourceGpuSlot)}));
  TESSERA_RETURN_IF_ERROR(StartNode());
  TESSERA_RETURN_IF_ERROR(WaitForGpus());

  std::vector<const ScenarioPod*> order;
  for (const ScenarioPod& p : scenario_.pods) order.push_back(&p);
  std::stable_sort(order.begin(), order.end(), [](const ScenarioPod* a, const ScenarioPod* b) {
    return a->start_after_s < b->start_after_s;
  });
  json pods_report = json::array();
  t0_ = Clock::now();
  const auto at = [this](double seconds) {
    return t0_ +
           std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  };
  const auto deadline = at(scenario_.timeout_s);
  for (const ScenarioPod* p : order) {
    while (Clock::now() < at(p->start_after_s) && !g_stop) {  // reaping while it waits
      Reap(false);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (g_stop) break;
    json pod_report = {{"pod", p->pod_namespace + "/" + p->name},
                       {"uid", RandomUid()},
                       {"containers", json::array()}};
    StartPod(*p, signer, forger, pod_report);
    pods_report.push_back(std::move(pod_report));
  }
  // Until every container has exited, the scenario's time is up, or a signal ends the run.
  while (Reap(Clock::now() >= deadline || g_stop)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (Running& r : running_) {
    for (json& pod : pods_report) {
      if (pod["pod"] == r.pod) pod["containers"].push_back(r.report);
    }
  }
  // What tessera-node exported, then stop it.
  httplib::Client metrics("127.0.0.1", metrics_port_);
  if (auto res = metrics.Get("/metrics"); res && res->status == 200) {
    (void)agent::WriteFileAtomically(Dir("logs/metrics.txt"), res->body, 0644);
  }
  CleanUp();
  std::lock_guard<std::mutex> lock(state_.mu);
  return json{{"node", scenario_.node},
              {"gpus", gpus_},
              {"pods", pods_report},
              {"events", state_.events},
              {"evictions", state_.evictions},
              {"unhandledRequests", state_.unhandled},
              {"interrupted", g_stop.load()},
              {"nodeExit", node_exit_},
              {"nodeLog", Dir("logs/tessera-node.log")},
              {"metrics", Dir("logs/metrics.txt")}};
}

void Run::CleanUp() {
  for (Running& r : running_) {
    if (r.pid >= 0) Finish(r, Terminate(r.pid, std::chrono::seconds(5), /*group=*/true).status);
  }
  if (node_pid_ >= 0) {
    node_exit_ = DescribeWaitStatus(Terminate(node_pid_, std::chrono::seconds(10)).status);
    node_pid_ = -1;
  }
  for (const Running& r : running_) {
    for (const std::string& cg : r.cgroups) {
      std::error_code ec;
      fs::remove(fs::path(cg).parent_path(), ec);  // the pod's, once empty
      fs::remove(fs::path(cg).parent_path().parent_path(), ec);
    }
  }
  if (!created_targets_.empty()) {
    RemoveCreated(created_targets_);
    created_targets_.clear();
    std::remove(kCreatedFile);
  }
  kubelet_.reset();
  if (api_) api_->Stop();
  if (lock_fd_ >= 0) {
    close(lock_fd_);
    lock_fd_ = -1;
  }
}

}  // namespace

StatusOr<Scenario> ParseScenario(const json& doc) {
  if (!doc.is_object()) return InvalidArgumentError("scenario: expected a JSON object");
  TESSERA_RETURN_IF_ERROR(RefuseUnknown(doc, "scenario", {"node", "timeoutSeconds", "pods"}));
  Scenario out;
  TESSERA_ASSIGN_OR_RETURN(out.node, String(doc, "scenario", "node", "nodehost"));
  TESSERA_RETURN_IF_ERROR(CheckName(out.node, "scenario.node", true));
  TESSERA_ASSIGN_OR_RETURN(out.timeout_s, Number(doc, "scenario", "timeoutSeconds", 600, 86400));
  if (!doc.contains("pods") || !doc["pods"].is_array() || doc["pods"].empty()) {
    return InvalidArgumentError("scenario.pods: expected a non-empty list");
  }
  std::set<std::string> names;
  for (std::size_t i = 0; i < doc["pods"].size(); ++i) {
    const std::string at = "scenario.pods[" + std::to_string(i) + "]";
    TESSERA_ASSIGN_OR_RETURN(ScenarioPod p, ParsePod(doc["pods"][i], at));
    if (!names.insert(p.pod_namespace + "/" + p.name).second) {
      return InvalidArgumentError(at + ".name: \"" + p.name + "\" repeats in its namespace");
    }
    out.pods.push_back(std::move(p));
  }
  return out;
}

StatusOr<json> RunScenario(const Scenario& scenario, const RunOptions& options) {
  Run run(scenario, options);
  return run.Play();
}

int NodeHostMain(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  constexpr char kUsage[] =
      "usage: tessera-node-host run --scenario FILE --node-binary PATH --dir DIR --hook-library "
      "PATH [--self PATH] [-- TESSERA-NODE FLAGS...]\n"
      "       tessera-node-host exec-container [--cgroup DIR] [--bind[-ro] HOST CONTAINER]... -- "
      "PROGRAM ARGS...\n";
  if (!args.empty() && args[0] == "exec-container") {
    return ExecContainer(std::vector<std::string>(args.begin() + 1, args.end()));
  }
  if (args.empty() || args[0] != "run") {
    std::fputs(kUsage, stderr);
    return 2;
  }
  RunOptions o;
  std::string scenario_path;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& flag = args[i];
    if (flag == "--") {
      o.node_args.assign(args.begin() + static_cast<std::ptrdiff_t>(i + 1), args.end());
      break;
    }
    std::string* target = flag == "--scenario"       ? &scenario_path
                          : flag == "--node-binary"  ? &o.node_binary
                          : flag == "--dir"          ? &o.dir
                          : flag == "--hook-library" ? &o.hook_library
                          : flag == "--self"         ? &o.self
                                                     : nullptr;
    if (target == nullptr || i + 1 >= args.size()) {
      std::fprintf(stderr, "tessera-node-host: %s: unknown flag or missing value\n%s", flag.c_str(),
                   kUsage);
      return 2;
    }
    *target = args[++i];
  }
  for (const auto& [name, value] :
       {std::pair<const char*, const std::string*>{"--scenario", &scenario_path},
        {"--node-binary", &o.node_binary},
        {"--dir", &o.dir},
        {"--hook-library", &o.hook_library}}) {
    if (value->empty()) {
      std::fprintf(stderr, "tessera-node-host: %s is required\n%s", name, kUsage);
      return 2;
    }
  }
  std::error_code ec;
  if (o.self.empty()) o.self = fs::read_symlink("/proc/self/exe", ec).string();
  o.dir = fs::absolute(o.dir, ec).string();
  const StatusOr<std::string> text = ReadFile(scenario_path);
  if (!text.ok()) {
    std::fprintf(stderr, "tessera-node-host: --scenario: %s\n", text.status().message().c_str());
    return 2;
  }
  const json doc = json::parse(*text, nullptr, false);
  if (doc.is_discarded()) {
    std::fprintf(stderr, "tessera-node-host: --scenario %s: not JSON\n", scenario_path.c_str());
    return 2;
  }
  auto scenario = ParseScenario(doc);
  if (!scenario.ok()) {
    std::fprintf(stderr, "tessera-node-host: %s: %s\n", scenario_path.c_str(),
                 scenario.status().message().c_str());
    return 2;
  }
  // SIGTERM or SIGINT end the run the way its timeout does: containers and tessera-node stopped,
  // the host's cgroups and bind targets removed.
  struct sigaction stop {};
  stop.sa_handler = [](int) { g_stop = true; };
  sigaction(SIGTERM, &stop, nullptr);
  sigaction(SIGINT, &stop, nullptr);
  auto report = RunScenario(*scenario, o);
  if (!report.ok()) {
    std::fprintf(stderr, "tessera-node-host: %s\n", report.status().message().c_str());
    return 1;
  }
  std::printf("%s\n", report->dump(1).c_str());
  return 0;
}

}  // namespace tessera::nodehost
