#include "agent/uninstall.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "tessera/region.h"

#include "testutil/temp_dir.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;

// A node folder with one slot whose limits file and region exist.
class Uninstall : public ::testing::Test {
 protected:
  void SetUp() override {
    paths_ = {dir_.path() + "/state", dir_.path() + "/cdi", dir_.path() + "/plugins",
              dir_.path() + "/state/lib/libtessera-cuda.so"};
    for (const char* d : {"state/slots/slot-0001/etc", "state/slots/slot-0001/run", "state/lib",
                          "cdi", "plugins"}) {
      fs::create_directories(dir_.path() + "/" + d);
    }
    std::ofstream(paths_.state_dir + "/slots/slot-0001/etc/limits")
        << "version 1\npod u ml/a main\ndevice GPU-1 memory=1024\n";
    ASSERT_TRUE(
        shm::Mapping::Create(paths_.state_dir + "/slots/slot-0001/run/region", {{"GPU-1", 1024, 0}})
            .ok());
    std::ofstream(paths_.hook_library) << "elf";
    std::ofstream(paths_.cdi_dir + "/tessera.dev-gpu-slot-0001.json") << "{}";
    std::ofstream(paths_.cdi_dir + "/nvidia.json") << "{}";
    std::ofstream(paths_.device_plugin_dir + "/tessera-gpu-slot.sock") << "";
    std::ofstream(paths_.device_plugin_dir + "/kubelet.sock") << "";
  }
  testutil::TempDir dir_;
  UninstallPaths paths_;
};

TEST_F(Uninstall, RemovesOnlyTesserasFiles) {
  auto removed = RemoveNodeFiles(paths_, false, {});
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_FALSE(fs::exists(paths_.state_dir));  // slots, the library and its folder, then the folder
  EXPECT_FALSE(fs::exists(paths_.cdi_dir + "/tessera.dev-gpu-slot-0001.json"));
  EXPECT_TRUE(fs::exists(paths_.cdi_dir + "/nvidia.json"));
  EXPECT_FALSE(fs::exists(paths_.device_plugin_dir + "/tessera-gpu-slot.sock"));
  EXPECT_TRUE(fs::exists(paths_.device_plugin_dir + "/kubelet.sock"));
}

TEST_F(Uninstall, RefusesWhileKubeletHoldsASlotOrARegionCannotBeRead) {
  auto held = RemoveNodeFiles(paths_, false, {"slot-0001"});
  ASSERT_FALSE(held.ok());
  EXPECT_NE(held.status().message().find("slot-0001 (ml/a; kubelet still holds its slot)"),
            std::string::npos);
  // A region the tenant broke is counted as in use (fail closed), never locked or trusted.
  std::ofstream(paths_.state_dir + "/slots/slot-0001/run/region", std::ios::trunc) << "garbage";
  auto broken = RemoveNodeFiles(paths_, false, {});
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("its region cannot be read"), std::string::npos);
  EXPECT_TRUE(fs::exists(paths_.state_dir + "/slots/slot-0001/etc/limits"));  // nothing removed
  EXPECT_TRUE(RemoveNodeFiles(paths_, true, {"slot-0001"}).ok());             // --force
  EXPECT_FALSE(fs::exists(paths_.state_dir));
}

TEST_F(Uninstall, NeverRemovesTheRootOrAFolderNamedAsTheLibrary) {
  UninstallPaths root = paths_;
  root.state_dir = "/";
  auto refused = RemoveNodeFiles(root, true, {});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--state-dir /"), std::string::npos);
  UninstallPaths folder = paths_;
  folder.hook_library = dir_.path() + "/cdi";
  ASSERT_TRUE(RemoveNodeFiles(folder, false, {}).ok());
  EXPECT_TRUE(fs::exists(dir_.path() + "/cdi/nvidia.json"));
}

}  // namespace
}  // namespace tessera::agent
