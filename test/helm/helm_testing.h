// Shared by the Helm chart's tests (helm_chart_test.cc, helm_chart_e2e_test.cc): running
// programs, finding Helm (hack/helm.sh), and reading what `helm template` renders.
#pragma once

#include <algorithm>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <openssl/evp.h>
#include <yaml-cpp/yaml.h>

#include "testutil/temp_dir.h"

extern char** environ;

namespace tessera::helmtest {

namespace fs = std::filesystem;
using json = nlohmann::json;

inline const std::string kSource = TESSERA_SOURCE_DIR;
inline const std::string kChart = kSource + "/deployments/helm/tessera";
inline const std::string kNamespace = "tessera-system";
inline const std::string kRelease = "gpu";  // objects are named gpu-tessera-*
inline const std::string kPrefix = "gpu-tessera";
inline const std::string kKubeVersion = "v1.36.3";  // what the e2e harness runs

struct Ran {
  int exit_code = -1;
  std::string out, err;
};

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void WriteFile(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

// Runs argv (no shell) with `env` (NAME=value) replacing or adding to ours; names in `drop` are
// removed. Output goes through files, so a chatty child cannot block on a full pipe.
inline Ran RunProgram(const std::vector<std::string>& argv,
                      const std::vector<std::string>& env = {},
                      const std::vector<std::string>& drop = {}) {
  testutil::TempDir dir;
  const std::string out = dir.path() + "/out", err = dir.path() + "/err";
  std::vector<std::string> environment;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = std::find(drop.begin(), drop.end(), name) != drop.end();
    for (const std::string& add : env) replaced |= add.substr(0, add.find('=')) == name;
    if (!replaced) environment.push_back(entry);
  }
  environment.insert(environment.end(), env.begin(), env.end());
  std::vector<char*> args, envp;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const std::string& e : environment) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0) _exit(126);
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  Ran ran;
  int status = 0;
  if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status))
    ran.exit_code = WEXITSTATUS(status);
  ran.out = ReadFile(out);
  ran.err = ReadFile(err);
  return ran;
}

// The helm binary, built on first use; nullopt (and why) without Go.
struct HelmTool {
  std::optional<std::string> path;
  std::string why;
};
inline const HelmTool& Helm() {
  static const HelmTool tool = [] {
    HelmTool t;
    const Ran r = RunProgram({kSource + "/hack/helm.sh"});
    std::string p = r.out;
    while (!p.empty() && (p.back() == '\n' || p.back() == ' ')) p.pop_back();
    if (r.exit_code == 0 && !p.empty()) {
      t.path = p;
    } else {
      t.why = "hack/helm.sh exited " + std::to_string(r.exit_code) + ": " + r.err;
    }
    return t;
  }();
  return tool;
}

// YAML to JSON, every scalar a string (for comparing structures whatever their style).
inline json ToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      json j = json::object();
      for (const auto& kv : node) j[kv.first.as<std::string>()] = ToJson(kv.second);
      return j;
    }
    case YAML::NodeType::Sequence: {
      json j = json::array();
      for (const auto& item : node) j.push_back(ToJson(item));
      return j;
    }
    case YAML::NodeType::Scalar:
      return node.as<std::string>();
    default:
      return nullptr;
  }
}
// The same for JSON built in C++ (numbers and booleans become their text).
inline json Stringly(const json& j) {
  if (j.is_object()) {
    json o = json::object();
    for (const auto& [k, v] : j.items()) o[k] = Stringly(v);
    return o;
  }
  if (j.is_array()) {
    json a = json::array();
    for (const auto& v : j) a.push_back(Stringly(v));
    return a;
  }
  if (j.is_string()) return j;
  if (j.is_null()) return nullptr;
  return j.dump();
}

inline std::string Base64Decode(const std::string& in) {
  std::string out(in.size(), '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()),
                                static_cast<int>(in.size()));
  if (n < 0) return "";
  out.resize(static_cast<std::size_t>(n));
  std::size_t pad = 0;
  for (auto it = in.rbegin(); it != in.rend() && *it == '='; ++it) ++pad;
  out.resize(out.size() - pad);
  return out;
}

// A rendered release: every object, by kind and name.
struct Manifests {
  std::vector<YAML::Node> objects;

  std::vector<YAML::Node> OfKind(const std::string& kind) const {
    std::vector<YAML::Node> out;
    for (const auto& o : objects) {
      if (o["kind"].as<std::string>() == kind) out.push_back(o);
    }
    return out;
  }
  std::optional<YAML::Node> Find(const std::string& kind, const std::string& name) const {
    for (const auto& o : objects) {
      if (o["kind"].as<std::string>() == kind && o["metadata"]["name"].as<std::string>() == name)
        return o;
    }
    return std::nullopt;
  }
  YAML::Node Get(const std::string& kind, const std::string& name) const {
    auto o = Find(kind, name);
    if (!o) ADD_FAILURE() << "no " << kind << " " << name << " rendered";
    return o ? *o : YAML::Node();
  }
  std::map<std::string, int> KindCounts() const {
    std::map<std::string, int> counts;
    for (const auto& o : objects) ++counts[o["kind"].as<std::string>()];
    return counts;
  }
};

inline YAML::Node Container(const YAML::Node& workload, const std::string& name,
                            const char* list = "containers") {
  for (const auto& c : workload["spec"]["template"]["spec"][list]) {
    if (c["name"].as<std::string>() == name) return c;
  }
  ADD_FAILURE() << "no container " << name;
  return YAML::Node();
}

inline std::vector<std::string> Args(const YAML::Node& container) {
  std::vector<std::string> args;
  for (const auto& a : container["args"]) args.push_back(a.as<std::string>());
  return args;
}

// The value of --name=value in args (nullopt when absent); every value for repeated flags.
inline std::vector<std::string> Flags(const std::vector<std::string>& args,
                                      const std::string& name) {
  std::vector<std::string> values;
  for (const std::string& a : args) {
    if (a.rfind(name + "=", 0) == 0) values.push_back(a.substr(name.size() + 1));
  }
  return values;
}
inline std::optional<std::string> Flag(const std::vector<std::string>& args,
                                       const std::string& name) {
  auto all = Flags(args, name);
  if (all.empty()) return std::nullopt;
  EXPECT_EQ(all.size(), 1u) << name << " given more than once";
  return all.front();
}

// A ClusterRole's or Role's rules as "group/resource[names]: verb,verb" lines, sorted.
inline std::set<std::string> Rules(const YAML::Node& role) {
  std::set<std::string> rules;
  for (const auto& r : role["rules"]) {
    std::vector<std::string> verbs;
    for (const auto& v : r["verbs"]) verbs.push_back(v.as<std::string>());
    std::sort(verbs.begin(), verbs.end());
    std::string names;
    for (const auto& n : r["resourceNames"])
      names += (names.empty() ? "" : ",") + n.as<std::string>();
    for (const auto& g : r["apiGroups"]) {
      for (const auto& res : r["resources"]) {
        std::string line = g.as<std::string>() + "/" + res.as<std::string>();
        if (!names.empty()) line += "[" + names + "]";
        line += ":";
        for (std::size_t i = 0; i < verbs.size(); ++i) line += (i ? "," : " ") + verbs[i];
        rules.insert(line);
      }
    }
  }
  return rules;
}

// Standard base64 with padding.
inline std::string Base64Encode(const std::string& in) {
  std::string out(4 * ((in.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()),
                                static_cast<int>(in.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

// Helm's own folders (cache, configuration, data) under `dir`: nothing of the user's is read
// or written.
inline std::vector<std::string> HelmEnvironment(const std::string& dir) {
  return {"HELM_CACHE_HOME=" + dir + "/cache", "HELM_CONFIG_HOME=" + dir + "/config",
          "HELM_DATA_HOME=" + dir + "/data"};
}

// The objects of `helm template` output (empty documents dropped); a failure if it is not YAML.
inline Manifests ParseManifests(const std::string& yaml) {
  Manifests m;
  try {
    for (const YAML::Node& doc : YAML::LoadAll(yaml)) {
      if (doc.IsMap()) m.objects.push_back(doc);
    }
  } catch (const YAML::Exception& e) {
    ADD_FAILURE() << "helm printed invalid YAML: " << e.what();
  }
  return m;
}

}  // namespace tessera::helmtest
