#include "k8s/config.h"

#include <filesystem>
#include <fstream>
#include <stdlib.h>
#include <string>

#include <gtest/gtest.h>

#include "testutil/status_matchers.h"
#include "testutil/temp_dir.h"

namespace tessera::k8s {
namespace {

namespace fs = std::filesystem;

void Write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

// "hello" and "world" in base64.
constexpr const char* kCaData = "aGVsbG8=";
constexpr const char* kCertData = "d29ybGQ=";

std::string Kubeconfig(const std::string& user_body, const std::string& cluster_extra = "",
                       const std::string& current = "dev") {
  return "apiVersion: v1\nkind: Config\ncurrent-context: " + current +
         "\n"
         "clusters:\n"
         "- name: c1\n"
         "  cluster:\n"
         "    server: https://10.0.0.1:6443\n"
         "    certificate-authority-data: " +
         kCaData + "\n" + cluster_extra +
         "- name: c2\n"
         "  cluster:\n"
         "    server: https://[fd00::1]:443\n"
         "    insecure-skip-tls-verify: true\n"
         "users:\n"
         "- name: u1\n"
         "  user:\n" +
         user_body +
         "- name: u2\n"
         "  user:\n"
         "    token: second-token\n"
         "contexts:\n"
         "- name: dev\n"
         "  context: {cluster: c1, user: u1, namespace: team-a}\n"
         "- name: other\n"
         "  context: {cluster: c2, user: u2}\n"
         "- name: anonymous\n"
         "  context: {cluster: c2}\n";
}

TEST(Kubeconfig, EmbeddedDataAndCurrentContext) {
  testutil::TempDir dir;
  const std::string path = dir.path() + "/kc";
  Write(path, Kubeconfig(std::string("    client-certificate-data: ") + kCertData +
                         "\n    client-key-data: " + kCaData + "\n    token: abc\n"));
  StatusOr<Config> config = LoadKubeconfig(path);
  ASSERT_OK(config);
  EXPECT_EQ(config->server, "https://10.0.0.1:6443");
  EXPECT_EQ(config->ca_pem, "hello");
  EXPECT_EQ(config->client_cert_pem, "world");
  EXPECT_EQ(config->client_key_pem, "hello");
  EXPECT_EQ(config->bearer_token, "abc");
  EXPECT_EQ(config->ns, "team-a");
  EXPECT_FALSE(config->insecure_skip_tls_verify);
}

TEST(Kubeconfig, NamedContextTokenAndInsecure) {
  testutil::TempDir dir;
  const std::string path = dir.path() + "/kc";
  Write(path, Kubeconfig("    token: t\n"));
  StatusOr<Config> config = LoadKubeconfig(path, "other");
  ASSERT_OK(config);
  EXPECT_EQ(config->server, "https://[fd00::1]:443");
  EXPECT_TRUE(config->insecure_skip_tls_verify);
  EXPECT_EQ(config->bearer_token, "second-token");
  EXPECT_EQ(config->ns, "default");

  StatusOr<Config> anonymous = LoadKubeconfig(path, "anonymous");
  ASSERT_OK(anonymous);
  EXPECT_TRUE(anonymous->bearer_token.empty());
  EXPECT_TRUE(anonymous->client_cert_pem.empty());
}

TEST(Kubeconfig, RelativeFilesResolveAgainstTheKubeconfigFolder) {
  testutil::TempDir dir;
  Write(dir.path() + "/conf/pki/ca.crt", "CA");
  Write(dir.path() + "/conf/pki/admin.crt", "CERT");
  Write(dir.path() + "/conf/pki/admin.key", "KEY");
  Write(dir.path() + "/conf/token", "  tok\n");
  const std::string path = dir.path() + "/conf/kubeconfig";
  Write(path,
        "current-context: x\n"
        "clusters: [{name: c, cluster: {server: 'https://h', certificate-authority: pki/ca.crt}}]\n"
        "users: [{name: u, user: {client-certificate: pki/admin.crt, client-key: " +
            dir.path() +
            "/conf/pki/admin.key, tokenFile: token}}]\n"
            "contexts: [{name: x, context: {cluster: c, user: u}}]\n");
  StatusOr<Config> config = LoadKubeconfig(path);
  ASSERT_OK(config);
  EXPECT_EQ(config->ca_pem, "CA");
  EXPECT_EQ(config->client_cert_pem, "CERT");
  EXPECT_EQ(config->client_key_pem, "KEY");
  EXPECT_EQ(config->bearer_token, "tok");
  EXPECT_EQ(config->token_file, dir.path() + "/conf/token");
}

struct BadCase {
  const char* name;
  std::string yaml;
  std::string context;
  std::string expected;  // a part of the message
};

TEST(Kubeconfig, ErrorsNameTheField) {
  const std::string head = "current-context: dev\n";
  const std::string cluster =
      "clusters: [{name: c, cluster: {server: 'https://h', certificate-authority-data: aGk=}}]\n";
  const std::string context = "contexts: [{name: dev, context: {cluster: c, user: u}}]\n";
  const std::vector<BadCase> cases = {
      {"bad base64",
       head + cluster + "users: [{name: u, user: {client-key-data: '!!'}}]\n" + context, "",
       "users[u].user.client-key-data: not valid base64"},
      {"bad ca base64",
       head +
           "clusters: [{name: c, cluster: {server: 'https://h', certificate-authority-data: "
           "'a b'}}]\n" +
           "users: [{name: u, user: {}}]\n" + context,
       "", "clusters[c].cluster.certificate-authority-data: not valid base64"},
      {"no current context", cluster + context, "", "current-context: not set"},
      {"unknown context", head + cluster + context, "prod",
       "context: no entry named \"prod\" in contexts"},
      {"missing user", head + cluster + context, "",
       "contexts[dev].context.user: no entry named \"u\" in users"},
      {"missing cluster", head + "users: [{name: u, user: {}}]\n" + context, "",
       "contexts[dev].context.cluster: no entry named \"c\" in clusters"},
      {"no server",
       head + "clusters: [{name: c, cluster: {}}]\nusers: [{name: u, user: {}}]\n" + context, "",
       "clusters[c].cluster.server: missing"},
      {"bad server",
       head + "clusters: [{name: c, cluster: {server: 'h:6443'}}]\nusers: [{name: u}]\n" + context,
       "", "clusters[c].cluster.server: \"h:6443\" is not an http:// or https:// URL"},
      {"missing file",
       head + cluster +
           "users: [{name: u, user: {client-certificate: nope.crt, client-key: k}}]\n" + context,
       "", "users[u].user.client-certificate: cannot read"},
      {"cert without key",
       head + cluster + "users: [{name: u, user: {client-certificate-data: aGk=}}]\n" + context, "",
       "users[u].user: client-certificate without client-key"},
      {"exec plugin",
       head + cluster + "users: [{name: u, user: {exec: {command: aws}}}]\n" + context, "",
       "users[u].user.exec: not supported"},
      {"insecure not a bool",
       head +
           "clusters: [{name: c, cluster: {server: 'https://h', insecure-skip-tls-verify: "
           "maybe}}]\nusers: [{name: u}]\n" +
           context,
       "", "clusters[c].cluster.insecure-skip-tls-verify: must be true or false"},
      {"clusters not a list", head + "clusters: {a: b}\n" + context, "",
       "clusters: must be a list"},
      {"not yaml", "a: [b\n", "", "not valid YAML"},
      {"not a map", "- a\n- b\n", "", "not a kubeconfig"},
  };
  testutil::TempDir dir;
  for (const BadCase& c : cases) {
    const std::string path = dir.path() + "/kc";
    Write(path, c.yaml);
    StatusOr<Config> config = LoadKubeconfig(path, c.context);
    ASSERT_FALSE(config.ok()) << c.name;
    EXPECT_EQ(config.status().code(), StatusCode::kInvalidInput) << c.name;
    EXPECT_NE(config.status().message().find("kubeconfig " + path + ": "), std::string::npos)
        << c.name << ": " << config.status().message();
    EXPECT_NE(config.status().message().find(c.expected), std::string::npos)
        << c.name << ": " << config.status().message();
  }
  StatusOr<Config> missing = LoadKubeconfig(dir.path() + "/nope");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(Base64, DecodesAndRejects) {
  EXPECT_EQ(*Base64Decode(""), "");
  EXPECT_EQ(*Base64Decode("Zg=="), "f");
  EXPECT_EQ(*Base64Decode("Zm8="), "fo");
  EXPECT_EQ(*Base64Decode("Zm9v"), "foo");
  EXPECT_EQ(*Base64Decode("Zm9v\nYmFy\r\n"), "foobar");
  EXPECT_EQ(*Base64Decode("/+8="), "\xff\xef");
  for (const char* bad : {"Zg=", "Z", "Zm9v=", "Zg==Zg==", "Zm 9v", "Zm9v!", "Zh==", "Zm9="}) {
    EXPECT_FALSE(Base64Decode(bad).ok()) << bad;
  }
}

class EnvGuard {
 public:
  EnvGuard(const char* name, const char* value) : name_(name) {
    const char* old = getenv(name);
    if (old != nullptr) old_ = old;
    had_ = old != nullptr;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~EnvGuard() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

TEST(InClusterConfig, ReadsTheServiceAccountFolder) {
  testutil::TempDir dir;
  Write(dir.path() + "/sa/token", "jwt-token\n");
  Write(dir.path() + "/sa/ca.crt", "CA PEM");
  Write(dir.path() + "/sa/namespace", "tessera-system");
  EnvGuard host("KUBERNETES_SERVICE_HOST", "10.96.0.1");
  EnvGuard port("KUBERNETES_SERVICE_PORT", "443");
  StatusOr<Config> config = InClusterConfig(dir.path() + "/sa");
  ASSERT_OK(config);
  EXPECT_EQ(config->server, "https://10.96.0.1:443");
  EXPECT_EQ(config->bearer_token, "jwt-token");
  EXPECT_EQ(config->token_file, dir.path() + "/sa/token");
  EXPECT_EQ(config->ca_pem, "CA PEM");
  EXPECT_EQ(config->ns, "tessera-system");
}

TEST(InClusterConfig, BracketsIpv6AndNeedsTheFiles) {
  testutil::TempDir dir;
  Write(dir.path() + "/sa/token", "t");
  Write(dir.path() + "/sa/ca.crt", "CA");
  {
    EnvGuard host("KUBERNETES_SERVICE_HOST", "fd00::1");
    EnvGuard port("KUBERNETES_SERVICE_PORT", "6443");
    StatusOr<Config> config = InClusterConfig(dir.path() + "/sa");
    ASSERT_OK(config);
    EXPECT_EQ(config->server, "https://[fd00::1]:6443");
    EXPECT_EQ(config->ns, "default");
    EXPECT_FALSE(InClusterConfig(dir.path() + "/missing").ok());
  }
  EnvGuard host("KUBERNETES_SERVICE_HOST", nullptr);
  StatusOr<Config> outside = InClusterConfig(dir.path() + "/sa");
  EXPECT_EQ(outside.status().code(), StatusCode::kNotFound);
  EXPECT_NE(outside.status().message().find("KUBERNETES_SERVICE_HOST"), std::string::npos);
}

TEST(ResolveConfig, FlagThenKubeconfigEnvThenInClusterThenHome) {
  testutil::TempDir dir;
  const std::string kc = Kubeconfig("    token: flag\n");
  Write(dir.path() + "/flag", kc);
  Write(dir.path() + "/env", Kubeconfig("    token: env\n"));
  Write(dir.path() + "/home/.kube/config", Kubeconfig("    token: home\n"));
  EnvGuard home("HOME", (dir.path() + "/home").c_str());
  EnvGuard host("KUBERNETES_SERVICE_HOST", nullptr);
  {
    EnvGuard env("KUBECONFIG", (dir.path() + "/env:" + dir.path() + "/flag").c_str());
    EXPECT_EQ(ResolveConfig(dir.path() + "/flag")->bearer_token, "flag");
    EXPECT_EQ(ResolveConfig("")->bearer_token, "env");
  }
  EnvGuard env("KUBECONFIG", nullptr);
  EXPECT_EQ(ResolveConfig("")->bearer_token, "home");
  {
    // In a pod, the service account wins over $HOME (and fails here: no token file).
    EnvGuard in_host("KUBERNETES_SERVICE_HOST", "10.0.0.1");
    EnvGuard in_port("KUBERNETES_SERVICE_PORT", "443");
    EXPECT_FALSE(ResolveConfig("").ok());
  }
  EnvGuard nowhere("HOME", dir.path().c_str());
  EXPECT_EQ(ResolveConfig("").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace tessera::k8s
