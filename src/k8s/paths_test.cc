#include "k8s/paths.h"

#include <gtest/gtest.h>

namespace tessera::k8s {
namespace {

TEST(QueryEscape, EscapesAllButUnreserved) {
  EXPECT_EQ(QueryEscape("abc-XYZ_0.9~"), "abc-XYZ_0.9~");
  EXPECT_EQ(QueryEscape("app in (a,b),tier!=x"), "app%20in%20%28a%2Cb%29%2Ctier%21%3Dx");
  EXPECT_EQ(QueryEscape("a/b?c&d=e#f+g%"), "a%2Fb%3Fc%26d%3De%23f%2Bg%25");
  EXPECT_EQ(QueryEscape("\xc3\xa9"), "%C3%A9");
  EXPECT_EQ(PathEscape("../x"), "..%2Fx");
}

TEST(AppendQuery, AddsEscapedParametersAndSkipsEmptyOnes) {
  std::string path = "/api/v1/pods";
  AppendQuery(path, "labelSelector", "");
  EXPECT_EQ(path, "/api/v1/pods");
  AppendQuery(path, "labelSelector", "a=b");
  AppendQuery(path, "fieldSelector", "spec.nodeName=n1");
  EXPECT_EQ(path, "/api/v1/pods?labelSelector=a%3Db&fieldSelector=spec.nodeName%3Dn1");
}

TEST(Paths, CoreResources) {
  EXPECT_EQ(PodsPath(""), "/api/v1/pods");
  EXPECT_EQ(PodsPath("ns"), "/api/v1/namespaces/ns/pods");
  EXPECT_EQ(PodPath("ns", "p"), "/api/v1/namespaces/ns/pods/p");
  EXPECT_EQ(PodBindingPath("ns", "p"), "/api/v1/namespaces/ns/pods/p/binding");
  EXPECT_EQ(PodStatusPath("ns", "p"), "/api/v1/namespaces/ns/pods/p/status");
  EXPECT_EQ(NodesPath(), "/api/v1/nodes");
  EXPECT_EQ(NodePath("gpu-1"), "/api/v1/nodes/gpu-1");
  EXPECT_EQ(NodeStatusPath("gpu-1"), "/api/v1/nodes/gpu-1/status");
  EXPECT_EQ(ConfigMapsPath("ns"), "/api/v1/namespaces/ns/configmaps");
  EXPECT_EQ(ConfigMapPath("ns", "c"), "/api/v1/namespaces/ns/configmaps/c");
  EXPECT_EQ(EventsPath("ns"), "/api/v1/namespaces/ns/events");
  EXPECT_EQ(NamespacePath("ns"), "/api/v1/namespaces/ns");
  EXPECT_EQ(LeasesPath("kube-system"),
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases");
  EXPECT_EQ(LeasePath("kube-system", "tessera"),
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/tessera");
  // A hostile name stays one segment.
  EXPECT_EQ(PodPath("ns", "a/../../nodes"), "/api/v1/namespaces/ns/pods/a%2F..%2F..%2Fnodes");
}

}  // namespace
}  // namespace tessera::k8s
