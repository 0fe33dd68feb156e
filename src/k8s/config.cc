#include "k8s/config.h"

#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>

#include <yaml-cpp/yaml.h>

#include "tessera/file.h"

namespace tessera::k8s {
namespace {

namespace fs = std::filesystem;

// A kubeconfig (certificates inline included), a CA bundle, a token: well under this.
constexpr std::size_t kMaxConfigFileBytes = std::size_t{16} << 20;

std::string Trim(std::string text) {
  const char* space = " \t\r\n";
  const size_t begin = text.find_first_not_of(space);
  if (begin == std::string::npos) return {};
  const size_t end = text.find_last_not_of(space);
  return text.substr(begin, end - begin + 1);
}

// The reader of one kubeconfig file: every error carries "kubeconfig <path>: <field>: ...".
class Kubeconfig {
 public:
  Kubeconfig(std::string path, YAML::Node root) : path_(std::move(path)), root_(std::move(root)) {
    folder_ = fs::path(path_).parent_path();
  }

  Status Error(std::string_view field, std::string_view what) const {
    std::string message = "kubeconfig " + path_ + ": ";
    message += field;
    message += ": ";
    message += what;
    return InvalidArgumentError(std::move(message));
  }

  // The `section` (e.g. "cluster") of the entry called `name` in the list `list` ("clusters").
  StatusOr<YAML::Node> Named(const char* list, const std::string& name, const char* section,
                             std::string_view referenced_by) const {
    const YAML::Node entries = root_[list];
    if (entries && !entries.IsSequence()) return Error(list, "must be a list");
    if (entries) {
      for (const YAML::Node& entry : entries) {
        const YAML::Node entry_name = entry["name"];
        if (!entry_name || !entry_name.IsScalar() || entry_name.Scalar() != name) continue;
        const YAML::Node body = entry[section];
        if (!body || body.IsNull()) return YAML::Node(YAML::NodeType::Map);
        if (!body.IsMap()) {
          return Error(std::string(list) + "[" + name + "]." + section, "must be a map");
        }
        return body;
      }
    }
    return Error(referenced_by, "no entry named \"" + name + "\" in " + list);
  }

  // A string field; nullopt when absent or empty.
  StatusOr<std::optional<std::string>> String(const YAML::Node& node, const std::string& field_path,
                                              const char* key) const {
    const YAML::Node value = node[key];
    if (!value || value.IsNull()) return std::optional<std::string>();
    if (!value.IsScalar()) return Error(field_path + "." + key, "must be a string");
    if (value.Scalar().empty()) return std::optional<std::string>();
    return std::optional<std::string>(value.Scalar());
  }

  StatusOr<bool> Bool(const YAML::Node& node, const std::string& field_path,
                      const char* key) const {
    const YAML::Node value = node[key];
    if (!value || value.IsNull()) return false;
    bool result = false;
    if (!value.IsScalar() || !YAML::convert<bool>::decode(value, result)) {
      return Error(field_path + "." + key, "must be true or false");
    }
    return result;
  }

  std::string Resolve(const std::string& file) const {
    fs::path p(file);
    if (p.is_relative()) p = folder_ / p;
    return p.lexically_normal().string();
  }

  // PEM from `<key>-data` (base64) or from the file named by `<key>`; "" when neither is set.
  StatusOr<std::string> Pem(const YAML::Node& node, const std::string& field_path,
                            const std::string& key) const {
    const std::string data_key = key + "-data";
    TESSERA_ASSIGN_OR_RETURN(std::optional<std::string> data,
                             String(node, field_path, data_key.c_str()));
    if (data) {
      StatusOr<std::string> decoded = Base64Decode(*data);
      if (!decoded.ok()) return Error(field_path + "." + data_key, "not valid base64");
      return std::move(decoded).value();
    }
    TESSERA_ASSIGN_OR_RETURN(std::optional<std::string> file,
                             String(node, field_path, key.c_str()));
    if (!file) return std::string();
    StatusOr<std::string> contents = ReadFile(Resolve(*file), kMaxConfigFileBytes);
    if (!contents.ok()) {
      return Error(field_path + "." + key, contents.status().message());
    }
    return std::move(contents).value();
  }

  StatusOr<Config> Load(std::string_view wanted_context) const {
    if (!root_.IsMap()) return Error("(top level)", "not a kubeconfig (expected a map)");
    std::string context_name(wanted_context);
    if (context_name.empty()) {
      TESSERA_ASSIGN_OR_RETURN(std::optional<std::string> current,
                               String(root_, "(top level)", "current-context"));
      if (!current) {
        return Error("current-context", "not set and no context was given");
      }
      context_name = *current;
    }
    const std::string context_field = "contexts[" + context_name + "].context";
    TESSERA_ASSIGN_OR_RETURN(YAML::Node context,
                             Named("contexts", context_name, "context",
                                   wanted_context.empty() ? "current-context" : "context"));
    TESSERA_ASSIGN_OR_RETURN(std::optional<std::string> cluster_name,
                             String(context, context_field, "cluster"));
    if (!cluster_name) return Error(context_field + ".cluster", "missing");
    TESSERA_ASSIGN_OR_RETURN(std::optional<std::string> user_name,
                             String(context, context_field, "user"));
    TESSERA_ASSIGN_OR_RETURN(std::optional<std::string> ns,
                             String(context, context_field, "namespace"));

    Config config;
    if (ns) config.ns = *ns;

    const std::string cluster_field = "clusters[" + *cluster_name + "].cluster";
    TESSERA_ASSIGN_OR_RETURN(YAML::Node cluster, Named("clusters", *cluster_name, "cluster",
                                                       context_field + ".cluster"));
    TESSERA_ASSIGN_OR_RETURN(std::optional<std::string> server,
                             String(cluster, cluster_field, "server"));
    if (!server) return Error(cluster_field + ".server", "missing");
    if (server->rfind("https://", 0) != 0 && server->rfind("http://", 0) != 0) {
      return Error(cluster_field + ".server",
                   "\"" + *server + "\" is not an http:// or https:// URL");
    }
    config.server = *server;
    TESSERA_ASSIGN_OR_RETURN(config.ca_pem, Pem(cluster, cluster_field, "certificate-authority"));
    TESSERA_ASSIGN_OR_RETURN(config.insecure_skip_tls_verify,
                             Bool(cluster, cluster_field, "insecure-skip-tls-verify"));
    for (const char* unsupported : {"proxy-url", "tls-server-name"}) {
      if (cluster[unsupported]) {
        return Error(cluster_field + "." + unsupported, "not supported by tessera");
      }
    }

    if (!user_name) return config;  // anonymous
    const std::string user_field = "users[" + *user_name + "].user";
    TESSERA_ASSIGN_OR_RETURN(YAML::Node user,
                             Named("users", *user_name, "user", context_field + ".user"));
    for (const char* unsupported : {"exec", "auth-provider", "username", "password", "as"}) {
      if (user[unsupported]) {
        return Error(user_field + "." + unsupported,
                     "not supported by tessera (use client certificates or a token)");
      }
    }
    TESSERA_ASSIGN_OR_RETURN(config.client_cert_pem, Pem(user, user_field, "client-certificate"));
    TESSERA_ASSIGN_OR_RETURN(config.client_key_pem, Pem(user, user_field, "client-key"));
    if (config.client_cert_pem.empty() != config.client_key_pem.empty()) {
      return Error(user_field, config.client_cert_pem.empty()
                                   ? "client-key without client-certificate"
                                   : "client-certificate without client-key");
    }
    TESSERA_ASSIGN_OR_RETURN(std::optional<std::string> token, String(user, user_field, "token"));
    TESSERA_ASSIGN_OR_RETURN(std::optional<std::string> token_file,
                             String(user, user_field, "tokenFile"));
    if (token) {
      config.bearer_token = *token;
    } else if (token_file) {
      config.token_file = Resolve(*token_file);
      StatusOr<std::string> contents = ReadTokenFile(config.token_file);
      if (!contents.ok()) return Error(user_field + ".tokenFile", contents.status().message());
      config.bearer_token = std::move(contents).value();
    }
    return config;
  }

 private:
  std::string path_;
  fs::path folder_;
  YAML::Node root_;
};

std::string Getenv(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

}  // namespace

StatusOr<std::string> ReadTokenFile(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(std::string contents, ReadFile(path, kMaxConfigFileBytes));
  std::string token = Trim(std::move(contents));
  if (token.empty()) return InvalidInputError(path + " is empty");
  return token;
}

StatusOr<std::string> Base64Decode(std::string_view text) {
  static constexpr std::array<int8_t, 256> kValues = [] {
    std::array<int8_t, 256> values{};
    values.fill(-1);
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i)
      values[static_cast<unsigned char>(alphabet[i])] = static_cast<int8_t>(i);
    return values;
  }();
  std::string out;
  out.reserve(text.size() / 4 * 3);
  uint32_t accumulator = 0;
  int bits = 0;
  size_t digits = 0;
  size_t padding = 0;
  for (char c : text) {
    if (c == '\r' || c == '\n') continue;
    if (c == '=') {
      ++padding;
      continue;
    }
    const int8_t value = kValues[static_cast<unsigned char>(c)];
    if (value < 0 || padding > 0) return InvalidArgumentError("not valid base64");
    ++digits;
    accumulator = (accumulator << 6) | static_cast<uint32_t>(value);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((accumulator >> bits) & 0xff));
    }
  }
  // Groups of 4 characters: 2 or 3 digits end a short group, with matching or no padding.
  const size_t tail = digits % 4;
  if (tail == 1 || padding > 2 || (padding > 0 && (digits + padding) % 4 != 0) ||
      (accumulator & ((1u << bits) - 1)) != 0) {
    return InvalidArgumentError("not valid base64");
  }
  return out;
}

StatusOr<Config> LoadKubeconfig(const std::string& path, std::string_view context) {
  StatusOr<std::string> text = ReadFile(path, kMaxConfigFileBytes);
  if (!text.ok()) return text.status().WithContext("kubeconfig");
  YAML::Node root;
  try {
    root = YAML::Load(*text);
    StatusOr<Config> config = Kubeconfig(path, root).Load(context);
    if (!config.ok()) return AsInputError(config.status());
    return config;
  } catch (const YAML::Exception& e) {
    return InvalidInputError("kubeconfig " + path + ": not valid YAML (line " +
                             std::to_string(e.mark.line + 1) + ", column " +
                             std::to_string(e.mark.column + 1) + "): " + e.msg);
  }
}

StatusOr<Config> InClusterConfig(const std::string& service_account_dir) {
  const std::string host = Getenv("KUBERNETES_SERVICE_HOST");
  const std::string port = Getenv("KUBERNETES_SERVICE_PORT");
  if (host.empty() || port.empty()) {
    return NotFoundError(
        "in-cluster config: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set");
  }
  Config config;
  const bool ipv6 = host.find(':') != std::string::npos && host.front() != '[';
  config.server = "https://" + (ipv6 ? "[" + host + "]" : host) + ":" + port;
  const fs::path dir(service_account_dir);
  config.token_file = (dir / "token").string();
  StatusOr<std::string> token = ReadTokenFile(config.token_file);
  if (!token.ok()) return token.status().WithContext("in-cluster config");
  config.bearer_token = std::move(token).value();
  StatusOr<std::string> ca = ReadFile((dir / "ca.crt").string(), kMaxConfigFileBytes);
  if (!ca.ok()) return ca.status().WithContext("in-cluster config");
  config.ca_pem = std::move(ca).value();
  StatusOr<std::string> ns = ReadFile((dir / "namespace").string(), kMaxConfigFileBytes);
  if (ns.ok() && !Trim(*ns).empty()) config.ns = Trim(*ns);
  return config;
}

StatusOr<Config> ResolveConfig(std::string_view kubeconfig_flag) {
  if (!kubeconfig_flag.empty()) return LoadKubeconfig(std::string(kubeconfig_flag));
  const std::string env = Getenv("KUBECONFIG");
  if (!env.empty()) {
    // Only the first file is used: tessera does not merge kubeconfig files.
    const std::string first = env.substr(0, env.find(':'));
    if (!first.empty()) return LoadKubeconfig(first);
  }
  if (!Getenv("KUBERNETES_SERVICE_HOST").empty()) return InClusterConfig();
  const std::string home = Getenv("HOME");
  if (!home.empty()) {
    const std::string path = (fs::path(home) / ".kube" / "config").string();
    std::error_code ignored;
    if (fs::exists(path, ignored)) return LoadKubeconfig(path);
  }
  return NotFoundError(
      "no Kubernetes configuration: no --kubeconfig, no $KUBECONFIG, not in a cluster "
      "(KUBERNETES_SERVICE_HOST unset) and no $HOME/.kube/config");
}

}  // namespace tessera::k8s
