#include "nodehost/node_host.h"

#include <algorithm>
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
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include <httplib.h>

#include "tessera/exec_args.h"
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
  TESSERA_ASSIGN_OR_RETURN(out.pod_namespace, String(p, where, "namespace", "default"));
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
    const json body = json::parse(req.body, nullptr, false);
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

Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.flush();
  if (!out) return UnavailableError("cannot write " + path);
  return Status::Ok();
}

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
  std::string log;
  pid_t pid = -1;
  Clock::time_point started;
  json report;
};

}  // namespace

StatusOr<Scenario> ParseScenario(const json& doc) {
  if (!doc.is_object()) return InvalidArgumentError("scenario: expected a JSON object");
  TESSERA_RETURN_IF_ERROR(RefuseUnknown(doc, "scenario", {"node", "timeoutSeconds", "pods"}));
  Scenario out;
  TESSERA_ASSIGN_OR_RETURN(out.node, String(doc, "scenario", "node", "nodehost"));
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

StatusOr<json> RunScenario(const Scenario& scenario, const RunOptions& o) {
  // One run at a time on a host: the binds' targets a run creates on the host (CreateMountTargets)
  // are removed when it ends, which would detach another run's binds.
  const int lock_fd = open("/tmp/tessera-node-host.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0 || flock(lock_fd, LOCK_EX) != 0) {
    return UnavailableError("cannot lock /tmp/tessera-node-host.lock");
  }
  struct Unlock {
    int fd;
    ~Unlock() { close(fd); }
  } unlock{lock_fd};
  const auto dir = [&o](const std::string& rel) { return o.dir + "/" + rel; };
  for (const char* sub : {"plugins", "state", "cdi", "keys", "logs"}) {
    std::error_code ec;
    fs::create_directories(dir(sub), ec);
    if (ec) return UnavailableError("cannot create " + dir(sub) + ": " + ec.message());
  }
  // The decisions' key (tessera-node gets its public half) and another one to forge with.
  TESSERA_ASSIGN_OR_RETURN(const std::string pem, contract::GenerateSigningKeyPem());
  TESSERA_ASSIGN_OR_RETURN(const contract::Signer signer, contract::Signer::FromPem(pem));
  TESSERA_ASSIGN_OR_RETURN(const std::string forged_pem, contract::GenerateSigningKeyPem());
  TESSERA_ASSIGN_OR_RETURN(const contract::Signer forger, contract::Signer::FromPem(forged_pem));
  TESSERA_RETURN_IF_ERROR(WriteText(dir("keys/") + kKeyId + ".pem", signer.PublicKeyPem()));

  ApiState state;
  state.node = {
      {"apiVersion", "v1"},
      {"kind", "Node"},
      {"metadata",
       {{"name", scenario.node}, {"labels", json::object()}, {"annotations", json::object()}}},
      {"status", json::object()}};
  k8s::testing::FakeApiServer api;
  ServeApi(api.http(), state, scenario.node);
  TESSERA_RETURN_IF_ERROR(api.Start());
  TESSERA_RETURN_IF_ERROR(WriteText(
      dir("kubeconfig"),
      "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
      "clusters: [{name: c, cluster: {server: '" +
          api.url() +
          "'}}]\n"
          "users: [{name: u, user: {}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"));

  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<KubeletStandin> kubelet,
                           KubeletStandin::Start({dir("plugins"), dir("pod-resources.sock"),
                                                  std::string(names::kResourceGpuSlot)}));

  const int metrics_port = FreePort();
  SpawnOptions node;
  node.argv = {o.node_binary,
               "--node-name",
               scenario.node,
               "--kubeconfig",
               dir("kubeconfig"),
               "--device-plugin-dir",
               dir("plugins"),
               "--pod-resources-socket",
               dir("pod-resources.sock"),
               "--state-dir",
               dir("state"),
               "--cdi-dir",
               dir("cdi"),
               "--decision-keys",
               dir("keys"),
               "--hook-library",
               o.hook_library,
               "--metrics-listen",
               "127.0.0.1:" + std::to_string(metrics_port)};
  node.argv.insert(node.argv.end(), o.node_args.begin(), o.node_args.end());
  node.stdout_to = node.stderr_to = Redirect::AppendTo(dir("logs/tessera-node.log"));
  node.parent_death_signal = SIGTERM;
  TESSERA_ASSIGN_OR_RETURN(const pid_t node_pid, Spawn(node));
  const auto node_failed = [&](const std::string& what) {
    const Termination t = Terminate(node_pid, std::chrono::seconds(5));
    return UnavailableError(what + " (tessera-node: " + DescribeWaitStatus(t.status) + "; log " +
                            dir("logs/tessera-node.log") + "):\n" +
                            TailOfFile(dir("logs/tessera-node.log"), 20));
  };
  if (Status s = kubelet->WaitForDevices(std::chrono::seconds(60)); !s.ok()) {
    return node_failed(s.message());
  }
  // The GPUs tessera-node found, from its inventory on the Node.
  std::vector<std::string> gpus;
  for (const auto until = Clock::now() + std::chrono::seconds(60);
       gpus.empty() && Clock::now() < until;) {
    {
      std::lock_guard<std::mutex> lock(state.mu);
      const json& a = state.node["metadata"]["annotations"];
      const std::string key(names::kAnnotationInventory);
      if (a.contains(key)) {
        const json inventory = json::parse(a[key].get<std::string>(), nullptr, false);
        if (inventory.is_object()) {
          for (const json& g : inventory.value("gpus", json::array()))
            gpus.push_back(g.value("uuid", ""));
        }
      }
    }
    if (gpus.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (gpus.empty()) return node_failed("tessera-node published no GPU inventory within 60 s");

  std::vector<const ScenarioPod*> order;
  for (const ScenarioPod& p : scenario.pods) order.push_back(&p);
  std::stable_sort(order.begin(), order.end(), [](const ScenarioPod* a, const ScenarioPod* b) {
    return a->start_after_s < b->start_after_s;
  });
  std::vector<Running> running;
  std::vector<std::string> created_targets;
  json pods_report = json::array();
  const Clock::time_point t0 = Clock::now();
  for (const ScenarioPod* p : order) {
    std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(p->start_after_s)));
    const std::string uid = RandomUid();
    const std::string key = p->pod_namespace + "/" + p->name;
    json pod_report = {{"pod", key}, {"uid", uid}, {"containers", json::array()}};
    contract::Decision decision;
    decision.pod_uid = uid;
    decision.pod_namespace = p->pod_namespace;
    decision.pod_name = p->name;
    decision.node = scenario.node;
    decision.tier = p->tier;
    decision.priority = p->priority;
    decision.issued_at = contract::Rfc3339(std::time(nullptr));
    decision.key_id = kKeyId;
    std::string bad_gpu;
    for (const ScenarioContainer& c : p->containers) {
      if (c.outside_library) continue;
      if (c.gpu >= static_cast<int>(gpus.size())) bad_gpu = c.name;
      const std::string uuid =
          c.gpu < static_cast<int>(gpus.size()) ? gpus[static_cast<std::size_t>(c.gpu)] : "";
      decision.containers.push_back({c.name,
                                     c.mode,
                                     {{uuid, c.memory_bytes, c.cores_percent}},
                                     c.compute,
                                     c.compute_window_ms});
    }
    if (!bad_gpu.empty()) {
      pod_report["error"] =
          "container " + bad_gpu + ": the node has " + std::to_string(gpus.size()) + " GPU(s)";
      pods_report.push_back(pod_report);
      continue;
    }
    const std::string text = contract::EncodeDecision(decision);
    TESSERA_ASSIGN_OR_RETURN(const std::string signature,
                             (p->forge_signature ? forger : signer).Sign(text));
    json annotations = {{std::string(names::kAnnotationDecision), text},
                        {std::string(names::kAnnotationDecisionSignature), signature}};
    if (!p->mps_user.empty()) annotations[std::string(names::kAnnotationMpsUser)] = p->mps_user;
    json containers = json::array();
    for (const ScenarioContainer& c : p->containers) containers.push_back({{"name", c.name}});
    {
      std::lock_guard<std::mutex> lock(state.mu);
      state.pods[key] = {{"apiVersion", "v1"},
                         {"kind", "Pod"},
                         {"metadata",
                          {{"name", p->name},
                           {"namespace", p->pod_namespace},
                           {"uid", uid},
                           {"annotations", annotations}}},
                         {"spec", {{"nodeName", scenario.node}, {"containers", containers}}},
                         {"status", {{"phase", "Running"}}}};
    }
    for (const ScenarioContainer& c : p->containers) {
      Running r;
      r.pod = key;
      r.container = c.name;
      r.log = dir("logs/" + p->pod_namespace + "." + p->name + "." + c.name + ".log");
      r.cgroups = CgroupFolders("tessera-nodehost/pod" + uid + "/" + c.name);
      r.report = {{"name", c.name}, {"log", r.log}, {"outsideLibrary", c.outside_library}};
      ContainerSpec spec;
      spec.argv = c.command;
      spec.cgroups = r.cgroups;
      SpawnOptions run;
      run.stdout_to = run.stderr_to = Redirect::AppendTo(r.log);
      run.parent_death_signal = SIGKILL;
      if (!c.outside_library) {
        auto allocation = kubelet->Admit({p->pod_namespace, p->name, c.name});
        if (!allocation.ok()) {
          r.report["error"] = allocation.status().message();
          pod_report["containers"].push_back(r.report);
          continue;
        }
        r.device = allocation->device;
        r.report["slot"] = r.device;
        spec.mounts = allocation->mounts;
        for (const auto& [k, v] : allocation->envs) run.env.push_back(k + "=" + v);
        Status cdi_ok = Status::Ok();
        for (const std::string& name : allocation->cdi_devices) {
          auto edits = ReadCdiEdits(dir("cdi"), name);
          if (!edits.ok()) {
            cdi_ok = edits.status();
            break;
          }
          run.env.insert(run.env.end(), edits->env.begin(), edits->env.end());
          for (const agent::Mount& m : edits->mounts) {
            if (m.host_path != m.container_path) spec.mounts.push_back(m);
          }
        }
        if (!cdi_ok.ok()) {
          r.report["error"] = cdi_ok.message();
          kubelet->Release(r.device);
          pod_report["containers"].push_back(r.report);
          continue;
        }
        const auto made = CreateMountTargets(spec.mounts);
        created_targets.insert(created_targets.end(), made.begin(), made.end());
      }
      for (const auto& [k, v] : c.env) run.env.push_back(k + "=" + v);
      run.argv = {o.self, "exec-container"};
      const auto args = ExecContainerArgs(spec);
      run.argv.insert(run.argv.end(), args.begin(), args.end());
      auto pid = Spawn(run);
      if (!pid.ok()) {
        r.report["error"] = pid.status().message();
        if (!r.device.empty()) kubelet->Release(r.device);
        pod_report["containers"].push_back(r.report);
        continue;
      }
      r.pid = *pid;
      r.started = Clock::now();
      r.report["startedAtSeconds"] = std::chrono::duration<double>(r.started - t0).count();
      r.report["startedAtUnix"] = static_cast<std::int64_t>(std::time(nullptr));
      running.push_back(std::move(r));
    }
    pods_report.push_back(std::move(pod_report));
  }
  // Until every container has exited, or the scenario's time is up.
  const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(scenario.timeout_s));
  for (bool any = true; any;) {
    any = false;
    for (Running& r : running) {
      if (r.pid < 0) continue;
      std::optional<int> status = TryWait(r.pid);
      if (!status && Clock::now() >= deadline) {
        status = Terminate(r.pid, std::chrono::seconds(5)).status;
        r.report["stoppedAtTimeout"] = true;
      }
      if (!status) {
        any = true;
        continue;
      }
      r.report["exit"] = DescribeWaitStatus(*status);
      r.report["exitCode"] = WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
      r.report["seconds"] = std::chrono::duration<double>(Clock::now() - r.started).count();
      r.pid = -1;
      if (!r.device.empty()) kubelet->Release(r.device);
    }
    if (any) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // Each container's report into its pod's.
  for (Running& r : running) {
    for (json& pod : pods_report) {
      if (pod["pod"] == r.pod) pod["containers"].push_back(r.report);
    }
  }
  // What tessera-node exported, then stop it.
  httplib::Client metrics("127.0.0.1", metrics_port);
  if (auto res = metrics.Get("/metrics"); res && res->status == 200) {
    (void)WriteText(dir("logs/metrics.txt"), res->body);
  }
  const Termination t = Terminate(node_pid, std::chrono::seconds(10));
  for (const Running& r : running) {
    for (const std::string& cg : r.cgroups) {
      std::error_code ec;
      KillAndRemoveCgroup(cg);                     // the container's
      fs::remove(fs::path(cg).parent_path(), ec);  // the pod's, once empty
      fs::remove(fs::path(cg).parent_path().parent_path(), ec);
    }
  }
  RemoveCreated(created_targets);
  std::lock_guard<std::mutex> lock(state.mu);
  return json{{"node", scenario.node},
              {"gpus", gpus},
              {"pods", pods_report},
              {"events", state.events},
              {"evictions", state.evictions},
              {"unhandledRequests", state.unhandled},
              {"nodeExit", DescribeWaitStatus(t.status)},
              {"nodeLog", dir("logs/tessera-node.log")},
              {"metrics", dir("logs/metrics.txt")}};
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
  std::ifstream in(scenario_path);
  if (!in) {
    std::fprintf(stderr, "tessera-node-host: --scenario %s: cannot be read\n",
                 scenario_path.c_str());
    return 2;
  }
  const json doc = json::parse(in, nullptr, false);
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
  auto report = RunScenario(*scenario, o);
  if (!report.ok()) {
    std::fprintf(stderr, "tessera-node-host: %s\n", report.status().message().c_str());
    return 1;
  }
  std::printf("%s\n", report->dump(1).c_str());
  return 0;
}

}  // namespace tessera::nodehost
