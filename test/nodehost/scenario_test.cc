// tessera-node-host's parsing: scenarios (every bad field named with its accepted form) and CDI
// specs. No root, no processes.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "nodehost/container_standin.h"
#include "nodehost/node_host.h"
#include "testutil/status_matchers.h"
#include "testutil/temp_dir.h"

namespace tessera::nodehost {
namespace {

using nlohmann::json;

TEST(NodeHostScenario, RefusesBadInputNamingTheFieldAndTheAcceptedForm) {
  const auto refused = [](const json& doc, const std::string& why) {
    auto s = ParseScenario(doc);
    ASSERT_FALSE(s.ok()) << doc.dump();
    EXPECT_NE(s.status().message().find(why), std::string::npos) << s.status().message();
  };
  const json ok_container = {{"name", "main"}, {"memory", "1Gi"}, {"command", {"true"}}};
  ASSERT_OK(ParseScenario({{"pods", {{{"name", "a"}, {"containers", {ok_container}}}}}}));
  refused(json::array(), "scenario: expected a JSON object");
  refused({{"pods", json::array()}}, "scenario.pods: expected a non-empty list");
  refused({{"pods", {{{"name", "a"}, {"containers", {ok_container}}}}}, {"extra", 1}},
          "scenario.extra: unknown field (accepted: node, timeoutSeconds, pods)");
  json c = ok_container;
  c["memory"] = "lots";
  refused({{"pods", {{{"name", "a"}, {"containers", {c}}}}}},
          "scenario.pods[0].containers[0].memory");
  c = ok_container;
  c["cores"] = 101;
  refused({{"pods", {{{"name", "a"}, {"containers", {c}}}}}},
          "scenario.pods[0].containers[0].cores: expected a number from 0 to 100");
  c = ok_container;
  c["mode"] = "sliced";
  refused({{"pods", {{{"name", "a"}, {"containers", {c}}}}}},
          "scenario.pods[0].containers[0].mode");
  c = ok_container;
  c.erase("memory");
  refused({{"pods", {{{"name", "a"}, {"containers", {c}}}}}},
          "scenario.pods[0].containers[0].memory: required");
  c = ok_container;
  c["command"] = json::array();
  refused({{"pods", {{{"name", "a"}, {"containers", {c}}}}}},
          "scenario.pods[0].containers[0].command: expected a non-empty list of strings");
  refused({{"pods", {{{"name", "a"}, {"containers", {ok_container, ok_container}}}}}},
          "scenario.pods[0].containers[1].name: \"main\" repeats");
  refused({{"pods",
            {{{"name", "a"}, {"containers", {ok_container}}},
             {{"name", "a"}, {"containers", {ok_container}}}}}},
          "scenario.pods[1].name: \"a\" repeats in its namespace");
  refused({{"pods", {{{"name", "a"}, {"priority", "urgent"}, {"containers", {ok_container}}}}}},
          "scenario.pods[0].priority");
  // Names become cgroup and log paths: never one that leaves them.
  c = ok_container;
  c["name"] = "../..";
  refused({{"pods", {{{"name", "a"}, {"containers", {c}}}}}},
          "scenario.pods[0].containers[0].name: \"../..\" is not a DNS-1123 label");
  refused({{"pods", {{{"name", "A/b"}, {"containers", {ok_container}}}}}},
          "scenario.pods[0].name: \"A/b\" is not a DNS-1123 subdomain");
  refused({{"pods", {{{"name", "a"}, {"namespace", "x.y"}, {"containers", {ok_container}}}}}},
          "scenario.pods[0].namespace: \"x.y\" is not a DNS-1123 label");
  refused({{"node", "-n"}, {"pods", {{{"name", "a"}, {"containers", {ok_container}}}}}},
          "scenario.node");
}

TEST(NodeHostCdi, ReadsTheSpecsAndTheDevicesEditsAndRefusesWhatDoesNotParse) {
  testutil::TempDir dir;
  std::ofstream(dir.path() + "/tessera.dev-gpu-slot-0001.json")
      << agent::CdiSpec("slot-0001", {3}, {{"/usr/lib/libcuda.so.1"}},
                        {{"/run/mps", "/host/mps", false}}, {"CUDA_MPS_PIPE_DIRECTORY=/run/mps"});
  auto edits = ReadCdiEdits(dir.path(), "tessera.dev/gpu=slot-0001");
  ASSERT_OK(edits);
  EXPECT_EQ(edits->env, std::vector<std::string>{"CUDA_MPS_PIPE_DIRECTORY=/run/mps"});
  ASSERT_EQ(edits->mounts.size(), 2u);  // the driver file (spec-wide) and the device's own
  EXPECT_EQ(edits->mounts[0].host_path, "/usr/lib/libcuda.so.1");
  EXPECT_TRUE(edits->mounts[0].read_only);
  EXPECT_EQ(edits->mounts[1].container_path, "/run/mps");
  EXPECT_FALSE(edits->mounts[1].read_only);
  EXPECT_NE(std::find(edits->device_nodes.begin(), edits->device_nodes.end(), "/dev/nvidia3"),
            edits->device_nodes.end());
  EXPECT_EQ(ReadCdiEdits(dir.path(), "tessera.dev/gpu=slot-0002").status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(ReadCdiEdits(dir.path(), "slot-0001").status().code(), StatusCode::kInvalidArgument);
  testutil::TempDir other;
  std::ofstream(other.path() + "/broken.json") << "{\"kind\": \"tessera.dev/gpu\", \"devices\": [";
  const Status broken = ReadCdiEdits(other.path(), "tessera.dev/gpu=slot-0001").status();
  EXPECT_EQ(broken.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(broken.message().find("broken.json"), std::string::npos) << broken.message();
  // Fields of the wrong type are named, never thrown.
  for (const auto& [text, field] : std::vector<std::pair<std::string, std::string>>{
           {R"({"kind": 5, "devices": []})", "kind: expected a string"},
           {R"({"kind": "tessera.dev/gpu", "devices": {}})", "devices: expected a list"},
           {R"({"kind": "tessera.dev/gpu", "devices": [{"name": 1}]})", "devices[0].name"},
           {R"({"kind": "tessera.dev/gpu", "devices": [{"name": "slot-0001",
               "containerEdits": {"env": "A=1"}}]})",
            "containerEdits.env: expected a list"}}) {
    testutil::TempDir one;
    std::ofstream(one.path() + "/spec.json") << text;
    const Status s = ReadCdiEdits(one.path(), "tessera.dev/gpu=slot-0001").status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(s.message().find(field), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace tessera::nodehost
