// hack/build-images.sh, run on this build's binaries, and its archives taken apart: the OCI
// layout and every blob's digest, the layers (sorted, fixed mtime, numeric owners), the binaries
// at the paths the Helm chart uses, every ELF's loader and libraries inside the image, the
// config (entrypoint, user, labels), reproducibility, and the preload library's ABI floor
// (deployments/images/preload-abi-floor). deployments/images/README.md describes the images.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <stdio.h>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "images/oci_inspect.h"
#include "testutil/status_matchers.h"
#include "testutil/temp_dir.h"

namespace tessera::images {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kSourceDir = TESSERA_SOURCE_DIR;
const std::string kBuilder = kSourceDir + "/hack/build-images.sh";
const std::map<std::string, std::string> kInputs = {
    {"/usr/local/bin/tessera", TESSERA_IMAGES_CLI},
    {"/usr/local/bin/tessera-scheduler", TESSERA_IMAGES_SCHEDULER},
    {"/usr/local/bin/tessera-node", TESSERA_IMAGES_NODE},
    {"/usr/local/lib/tessera/libtessera-cuda.so", TESSERA_IMAGES_HOOK},
};
constexpr std::int64_t kEpoch = 1700000000;
constexpr char kCreated[] = "2023-11-14T22:13:20Z";  // kEpoch in RFC 3339
constexpr char kScheduler[] = "tessera-scheduler";
constexpr char kNode[] = "tessera-node";
constexpr std::uint64_t kNonRootUid = 65532;

// The files each image must hold, and its entry point and user.
struct Expected {
  std::vector<std::string> files;
  std::vector<std::string> executables;  // every one is walked for its loader and libraries
  std::string entrypoint;
  std::string user;
};
const std::map<std::string, Expected> kExpected = {
    {kScheduler,
     {{"/usr/local/bin/tessera-scheduler"},
      {"/usr/local/bin/tessera-scheduler"},
      "/usr/local/bin/tessera-scheduler",
      "65532:65532"}},
    {kNode,
     {{"/usr/local/bin/tessera-node", "/usr/local/bin/tessera",
       "/usr/local/lib/tessera/libtessera-cuda.so",
       // the Helm chart's init container: sh -c 'cp; chmod; mv'
       "/bin/sh", "/bin/cp", "/bin/chmod", "/bin/mv"},
      {"/usr/local/bin/tessera-node", "/usr/local/bin/tessera", "/bin/sh", "/usr/bin/cp",
       "/usr/bin/mv", "/usr/bin/chmod", "/usr/local/lib/tessera/libtessera-cuda.so"},
      "/usr/local/bin/tessera-node",
      "0:0"}},
};

std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

// Runs `command` with /bin/sh; its exit status (-1 if it did not exit).
int Shell(const std::string& command) {
  const int rc = std::system(command.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// Runs `command`, returning its exit status and stdout+stderr.
std::pair<int, std::string> Capture(const std::string& command) {
  std::string out;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return {-1, "popen failed"};
  char buf[4096];
  std::size_t n = 0;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int rc = pclose(p);
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, out};
}

std::string BuilderEnv() {
  std::string env = "env SOURCE_DATE_EPOCH=" + std::to_string(kEpoch) +
                    " TESSERA_IMAGE_REVISION=test TESSERA_IMAGE_REGISTRY=" +
                    " TESSERA_IMAGE_TAG= TESSERA_IMAGE_SOURCE= TESSERA_IMAGE_LICENSES=";
  env += " TESSERA_BIN_CLI=" + Quote(kInputs.at("/usr/local/bin/tessera"));
  env += " TESSERA_BIN_SCHEDULER=" + Quote(kInputs.at("/usr/local/bin/tessera-scheduler"));
  env += " TESSERA_BIN_NODE=" + Quote(kInputs.at("/usr/local/bin/tessera-node"));
  env += " TESSERA_LIB_HOOK=" + Quote(kInputs.at("/usr/local/lib/tessera/libtessera-cuda.so"));
  return env;
}

std::string Trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string Version() {
  StatusOr<std::string> v = ReadWholeFile(kSourceDir + "/VERSION");
  return v.ok() ? Trimmed(v->substr(0, v->find('\n'))) : "";
}

// deployments/images/preload-abi-floor: "FAMILY VERSION" lines; VERSION "none": no version of it.
std::map<std::string, std::string> PromisedFloor() {
  std::map<std::string, std::string> floor;
  std::ifstream in(kSourceDir + "/deployments/images/preload-abi-floor");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string family, version;
    if (fields >> family >> version) floor[family] = version;
  }
  return floor;
}

struct Built {
  std::string archive_sha;
  std::string digest_file;  // OUT_DIR/<image>.digest
  ArchiveFiles files;
  Image image;
  Rootfs fs;
};

class ImagesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    temp_ = new testutil::TempDir();
    const std::string t = temp_->path();
    if (t.empty()) {
      *error_ = "no temporary folder";
      return;
    }
    fs::create_directories(t + "/tmp2");
    // Twice, at once: the second from another working folder with another TMPDIR.
    const std::string env = BuilderEnv();
    const std::string command =
        "cd / && " + env + " bash " + Quote(kBuilder) + " " + Quote(t + "/out1") + " >" +
        Quote(t + "/log1") + " 2>&1 & p=$!; cd " + Quote(t) + " && TMPDIR=" + Quote(t + "/tmp2") +
        " " + env + " bash " + Quote(kBuilder) + " out2 >" + Quote(t + "/log2") +
        " 2>&1; r2=$?; wait $p; r1=$?; exit $((r1 | r2))";
    if (Shell(command) != 0) {
      StatusOr<std::string> log1 = ReadWholeFile(t + "/log1");
      StatusOr<std::string> log2 = ReadWholeFile(t + "/log2");
      *error_ = "hack/build-images.sh failed:\n" + (log1.ok() ? *log1 : "") + "\n" +
                (log2.ok() ? *log2 : "");
      return;
    }
    for (const std::string image : {kScheduler, kNode}) {
      for (const std::string run : {"out1", "out2"}) {
        const std::string path = t + "/" + run + "/" + image + ".oci.tar";
        StatusOr<std::string> bytes = ReadWholeFile(path);
        if (!bytes.ok()) {
          *error_ = bytes.status().ToString();
          return;
        }
        Built& b = (*built_)[run][image];
        b.archive_sha = Sha256Hex(*bytes);
        StatusOr<std::string> digest = ReadWholeFile(t + "/" + run + "/" + image + ".digest");
        b.digest_file = digest.ok() ? Trimmed(*digest) : "";
        if (run == "out2") continue;  // compared by its digest only
        StatusOr<ArchiveFiles> files = ReadArchive(*bytes);
        if (!files.ok()) {
          *error_ = path + ": " + files.status().ToString();
          return;
        }
        b.files = std::move(files).value();
        StatusOr<Image> loaded = LoadLayout(b.files);
        if (!loaded.ok()) {
          *error_ = path + ": " + loaded.status().ToString();
          return;
        }
        b.image = std::move(loaded).value();
        StatusOr<Rootfs> rootfs = Rootfs::FromLayers(b.image.layers);
        if (!rootfs.ok()) {
          *error_ = path + ": " + rootfs.status().ToString();
          return;
        }
        b.fs = std::move(rootfs).value();
      }
    }
  }
  static void TearDownTestSuite() {
    delete temp_;
    temp_ = nullptr;
  }
  void SetUp() override { ASSERT_EQ(*error_, ""); }

  static const Built& Get(const std::string& image, const std::string& run = "out1") {
    return (*built_)[run][image];
  }
  static std::string TempPath() { return temp_->path(); }

  // The image's files on disk (once per image), for running them: its root folder.
  static std::string Unpacked(const std::string& image) {
    const std::string root = temp_->path() + "/rootfs-" + image;
    if (fs::exists(root)) return root;
    for (const auto& [path, node] : Get(image).fs.nodes()) {
      const std::string at = root + path;
      if (node.type == '5') {
        fs::create_directories(at);
      } else if (node.type == '2') {
        fs::create_directories(fs::path(at).parent_path());
        fs::create_symlink(node.link, at);
      } else {
        fs::create_directories(fs::path(at).parent_path());
        std::ofstream(at, std::ios::binary) << node.data;
        if (chmod(at.c_str(), node.mode & 0777) != 0) return "";
      }
    }
    for (const auto& [path, node] : Get(image).fs.nodes()) {  // modes of folders last (0700)
      if (node.type == '5' && chmod((root + path).c_str(), node.mode & 07777) != 0) return "";
    }
    return root;
  }

 private:
  static inline testutil::TempDir* temp_ = nullptr;
  static inline std::string* error_ = new std::string();
  static inline std::map<std::string, std::map<std::string, Built>>* built_ =
      new std::map<std::string, std::map<std::string, Built>>();
};

TEST_F(ImagesTest, ArchivesAreOciImageLayouts) {
  for (const std::string image : {kScheduler, kNode}) {
    SCOPED_TRACE(image);
    const Built& b = Get(image);
    const std::string ref = "ghcr.io/tessera-dev/" + image + ":" + Version();
    EXPECT_EQ(b.image.ref_name, ref);
    const json& entry = b.image.index["manifests"][0];
    EXPECT_EQ(entry["annotations"]["io.containerd.image.name"], ref);
    EXPECT_EQ(entry["platform"]["os"], "linux");
    EXPECT_EQ(b.image.layer_descriptors.size(), 3u);  // base, libs, app
    EXPECT_EQ(b.digest_file, b.image.manifest_descriptor.digest);

    // docker load's manifest.json names the same blobs.
    ASSERT_TRUE(b.files.contains("manifest.json"));
    const json docker = json::parse(b.files.at("manifest.json"));
    ASSERT_EQ(docker.size(), 1u);
    EXPECT_EQ(docker[0]["Config"],
              "blobs/sha256/" + b.image.manifest["config"]["digest"].get<std::string>().substr(7));
    EXPECT_EQ(docker[0]["RepoTags"], json::array({ref}));
    ASSERT_EQ(docker[0]["Layers"].size(), b.image.layer_descriptors.size());
    for (std::size_t i = 0; i < b.image.layer_descriptors.size(); ++i) {
      EXPECT_EQ(docker[0]["Layers"][i],
                "blobs/sha256/" + b.image.layer_descriptors[i].digest.substr(7));
    }
    for (const auto& [path, content] : b.files) {
      EXPECT_TRUE(path == "oci-layout" || path == "index.json" || path == "manifest.json" ||
                  path.starts_with("blobs/sha256/"))
          << path;
    }
  }
  // The base layer (C/C++ runtime, /etc) is one blob for both images.
  EXPECT_EQ(Get(kScheduler).image.layer_descriptors[0].digest,
            Get(kNode).image.layer_descriptors[0].digest);
}

TEST_F(ImagesTest, LayersAreSortedWithFixedTimesAndNumericOwners) {
  for (const std::string image : {kScheduler, kNode}) {
    for (std::size_t l = 0; l < Get(image).image.layers.size(); ++l) {
      SCOPED_TRACE(image + " layer " + std::to_string(l));
      const std::vector<TarEntry>& entries = Get(image).image.layers[l];
      ASSERT_FALSE(entries.empty());
      std::set<std::string> seen;
      for (std::size_t i = 0; i < entries.size(); ++i) {
        const TarEntry& e = entries[i];
        if (i > 0) {
          EXPECT_LT(entries[i - 1].path, e.path) << "not sorted";
        }
        EXPECT_EQ(e.mtime, kEpoch) << e.path;
        const std::uint64_t owner = e.path == "home/tessera" ? kNonRootUid : 0;
        EXPECT_EQ(e.uid, owner) << e.path;
        EXPECT_EQ(e.gid, owner) << e.path;
        EXPECT_TRUE(e.type == '0' || e.type == '2' || e.type == '5') << e.path;
        // Every parent folder is an entry of its own, before its children.
        const std::size_t slash = e.path.rfind('/');
        if (slash != std::string::npos) {
          EXPECT_TRUE(seen.contains(e.path.substr(0, slash))) << e.path;
        }
        seen.insert(e.path);
      }
    }
  }
}

TEST_F(ImagesTest, BinariesAreWhereTheChartLooks) {
  for (const auto& [image, expected] : kExpected) {
    SCOPED_TRACE(image);
    const Rootfs& rootfs = Get(image).fs;
    for (const std::string& path : expected.files) {
      StatusOr<std::string> real = rootfs.Resolve(path);
      ASSERT_OK(real) << path;
      const Node* node = rootfs.Find(*real);
      ASSERT_NE(node, nullptr);
      EXPECT_EQ(node->type, '0') << path;
      EXPECT_EQ(node->mode, 0755u) << path;
      EXPECT_EQ(node->uid, 0u) << path;
      if (kInputs.contains(path)) {  // tessera's own: the very bytes that were built
        StatusOr<std::string> input = ReadWholeFile(kInputs.at(path));
        ASSERT_OK(input);
        EXPECT_TRUE(node->data == *input) << path << " differs from " << kInputs.at(path);
      }
    }
  }
  EXPECT_EQ(Get(kScheduler).fs.Find("/usr/local/bin/tessera-node"), nullptr);
  EXPECT_EQ(Get(kScheduler).fs.Find("/usr/local/lib/tessera/libtessera-cuda.so"), nullptr);
  EXPECT_FALSE(Get(kScheduler).fs.Resolve("/bin/sh").ok()) << "the scheduler image has no shell";
}

TEST_F(ImagesTest, EveryElfFindsItsLoaderAndLibrariesInTheImage) {
  for (const auto& [image, expected] : kExpected) {
    SCOPED_TRACE(image);
    const Rootfs& rootfs = Get(image).fs;
    for (const std::string& exe : expected.executables) {
      Closure c = WalkClosure(rootfs, exe);
      EXPECT_TRUE(c.problems.empty()) << exe << ":\n" << ::testing::PrintToString(c.problems);
      EXPECT_GE(c.objects.size(), 2u) << exe;
    }
    // The entry point's closure has the loader and the C library.
    Closure entry = WalkClosure(rootfs, expected.entrypoint);
    StatusOr<std::string> loader = rootfs.Resolve("/lib64/ld-linux-x86-64.so.2");
#if defined(__x86_64__)
    ASSERT_OK(loader);
    EXPECT_NE(std::find(entry.objects.begin(), entry.objects.end(), *loader), entry.objects.end());
#endif
    StatusOr<std::string> libc = rootfs.Resolve("/lib/x86_64-linux-gnu/libc.so.6");
#if defined(__x86_64__)
    ASSERT_OK(libc);
    EXPECT_NE(std::find(entry.objects.begin(), entry.objects.end(), *libc), entry.objects.end());
#endif
    // And every other ELF file in the image (nothing shipped that could not load).
    int elves = 0;
    for (const auto& [path, node] : rootfs.nodes()) {
      if (node.type != '0' || !IsElf(node.data)) continue;
      ++elves;
      Closure c = WalkClosure(rootfs, path);
      EXPECT_TRUE(c.problems.empty()) << path << ":\n" << ::testing::PrintToString(c.problems);
    }
    EXPECT_GE(elves, 5);
  }
}

TEST_F(ImagesTest, ConfigHasEntrypointUserLabels) {
  const std::map<std::string, std::string> floor = PromisedFloor();
  for (const auto& [image, expected] : kExpected) {
    SCOPED_TRACE(image);
    const json& config = Get(image).image.config;
    EXPECT_EQ(config["os"], "linux");
#if defined(__x86_64__)
    EXPECT_EQ(config["architecture"], "amd64");
#endif
    EXPECT_EQ(config["created"], kCreated);
    EXPECT_EQ(config["config"]["Entrypoint"], json::array({expected.entrypoint}));
    EXPECT_FALSE(config["config"].contains("Cmd"));
    EXPECT_EQ(config["config"]["User"], expected.user);
    bool has_path = false;
    for (const json& e : config["config"]["Env"])
      has_path |= e.get<std::string>().starts_with("PATH=/usr/local/bin:");
    EXPECT_TRUE(has_path);
    const json& labels = config["config"]["Labels"];
    EXPECT_EQ(labels["org.opencontainers.image.version"], Version());
    EXPECT_EQ(labels["org.opencontainers.image.title"], image);
    EXPECT_EQ(labels["org.opencontainers.image.created"], kCreated);
    EXPECT_EQ(labels["org.opencontainers.image.revision"], "test");
    EXPECT_FALSE(labels.value("org.opencontainers.image.source", "").empty());
    EXPECT_FALSE(labels.value("org.opencontainers.image.licenses", "").empty());
    EXPECT_EQ(config["history"].size(), 3u);
    EXPECT_EQ(config["rootfs"]["type"], "layers");
  }
  const json& node_labels = Get(kNode).image.config["config"]["Labels"];
  EXPECT_EQ(node_labels["dev.tessera.preload.path"], "/usr/local/lib/tessera/libtessera-cuda.so");
  EXPECT_EQ(node_labels["dev.tessera.preload.glibc-floor"], floor.at("GLIBC"));
  EXPECT_EQ(node_labels["dev.tessera.preload.glibcxx-floor"], floor.at("GLIBCXX"));
  EXPECT_EQ(Get(kScheduler).image.config["config"]["ExposedPorts"],
            json({{"8443/tcp", json::object()}, {"8888/tcp", json::object()}}));
}

TEST_F(ImagesTest, UsersAndEtcFiles) {
  for (const auto& [image, expected] : kExpected) {
    SCOPED_TRACE(image);
    const Rootfs& rootfs = Get(image).fs;
    const Node* passwd = rootfs.Find("/etc/passwd");
    ASSERT_NE(passwd, nullptr);
    // The image's user exists; the scheduler's is not root and has its home.
    const std::string uid = expected.user.substr(0, expected.user.find(':'));
    bool found = false;
    std::istringstream lines(passwd->data);
    for (std::string line; std::getline(lines, line);) {
      std::vector<std::string> f;
      std::istringstream fields(line);
      for (std::string x; std::getline(fields, x, ':');) f.push_back(x);
      ASSERT_EQ(f.size(), 7u) << line;
      if (f[2] != uid) continue;
      found = true;
      if (uid != "0") {
        const Node* home = rootfs.Find(f[5]);
        ASSERT_NE(home, nullptr) << f[5];
        EXPECT_EQ(home->type, '5');
        EXPECT_EQ(home->uid, kNonRootUid);
        EXPECT_EQ(home->mode, 0700u);
      }
    }
    EXPECT_TRUE(found) << "uid " << uid << " not in /etc/passwd";
    ASSERT_NE(rootfs.Find("/etc/group"), nullptr);
    EXPECT_NE(rootfs.Find("/etc/group")->data.find(":65532:"), std::string::npos);
    ASSERT_NE(rootfs.Find("/etc/nsswitch.conf"), nullptr);
    EXPECT_NE(rootfs.Find("/etc/nsswitch.conf")->data.find("hosts: files dns"), std::string::npos);
    ASSERT_NE(rootfs.Find("/tmp"), nullptr);
    EXPECT_EQ(rootfs.Find("/tmp")->mode, 01777u);
    // CA certificates, also where OpenSSL looks by default.
    StatusOr<std::string> ca = rootfs.Resolve("/usr/lib/ssl/cert.pem");
    ASSERT_OK(ca);
    EXPECT_EQ(*ca, "/etc/ssl/certs/ca-certificates.crt");
    EXPECT_NE(rootfs.Find(*ca)->data.find("BEGIN CERTIFICATE"), std::string::npos);
    // Where the C library comes from, for scanners and licenses.
    ASSERT_NE(rootfs.Find("/var/lib/dpkg/status.d/libc6"), nullptr);
    EXPECT_NE(rootfs.Find("/var/lib/dpkg/status.d/libc6")->data.find("Version: "),
              std::string::npos);
    EXPECT_OK(rootfs.Resolve("/usr/share/doc/libc6/copyright"));
  }
}

TEST_F(ImagesTest, SameBitsGiveTheSameDigests) {
  for (const std::string image : {kScheduler, kNode}) {
    SCOPED_TRACE(image);
    EXPECT_EQ(Get(image, "out1").archive_sha, Get(image, "out2").archive_sha);
    EXPECT_EQ(Get(image, "out1").digest_file, Get(image, "out2").digest_file);
    EXPECT_FALSE(Get(image, "out2").digest_file.empty());
  }
}

TEST_F(ImagesTest, PreloadLibraryStaysUnderItsAbiFloor) {
#if defined(TESSERA_IMAGES_PRELOAD_UNPINNED)
  GTEST_SKIP() << "sanitizer build: the preload library keeps the C++ runtime and glibc's newest "
                  "versions (cmake/TesseraPreload.cmake)";
#endif
  const std::map<std::string, std::string> floor = PromisedFloor();
  ASSERT_TRUE(floor.contains("GLIBC")) << "deployments/images/preload-abi-floor";
  const Rootfs& rootfs = Get(kNode).fs;
  const Node* hook = rootfs.Find("/usr/local/lib/tessera/libtessera-cuda.so");
  ASSERT_NE(hook, nullptr);
  StatusOr<ElfInfo> elf = ParseElf(hook->data);
  ASSERT_OK(elf);
  for (const auto& [family, promised] : floor) {
    const Floor measured = HighestVersion(elf->undefined_versions, family);
    std::cout << "libtessera-cuda.so needs " << family << "_"
              << (measured.version.empty() ? "(none)" : measured.version)
              << " (promised <= " << promised << ")";
    if (!measured.symbols.empty()) std::cout << ": " << ::testing::PrintToString(measured.symbols);
    std::cout << "\n";
    if (promised == "none") {
      EXPECT_EQ(measured.version, "")
          << family << "_" << measured.version << " is needed; the floor promises no " << family
          << "; symbols: " << ::testing::PrintToString(measured.symbols);
    } else if (!measured.version.empty()) {
      EXPECT_LE(CompareVersions(measured.version, promised), 0)
          << family << "_" << measured.version << " is above the promised floor " << promised
          << "; symbols: " << ::testing::PrintToString(measured.symbols);
    }
  }
  EXPECT_FALSE(HighestVersion(elf->undefined_versions, "GLIBC").version.empty());
  // It is injected into any container: it may need only the C runtime (no libstdc++.so.6, no
  // libgcc_s.so.1: a container may have older ones, or none).
  const std::set<std::string> allowed = {"libc.so.6",
                                         "libm.so.6",
                                         "libdl.so.2",
                                         "libpthread.so.0",
                                         "librt.so.1",
                                         "ld-linux-x86-64.so.2",
                                         "ld-linux-aarch64.so.1"};
  for (const std::string& needed : elf->needed) EXPECT_TRUE(allowed.contains(needed)) << needed;
  EXPECT_TRUE(elf->interpreter.empty());
  EXPECT_TRUE(elf->runpath.empty() && elf->rpath.empty());
}

// The image's own loader runs the binaries with the image's libraries only.
TEST_F(ImagesTest, BinariesStartOnTheImagesLoader) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "x86-64 paths";
#endif
  for (const auto& [image, expected] : kExpected) {
    SCOPED_TRACE(image);
    const Rootfs& rootfs = Get(image).fs;
    const std::string root = Unpacked(image);
    ASSERT_NE(root, "");
    StatusOr<std::string> loader = rootfs.Resolve("/lib64/ld-linux-x86-64.so.2");
    ASSERT_OK(loader);
    const std::string run =
        Quote(root + *loader) + " --inhibit-cache --library-path " +
        Quote(root + "/lib/x86_64-linux-gnu:" + root + "/usr/lib/x86_64-linux-gnu");
    for (const std::string& exe : expected.executables) {
      if (exe.ends_with(".so")) continue;
      auto [rc, listing] = Capture(run + " --list " + Quote(root + exe));
      EXPECT_EQ(rc, 0) << exe << ": " << listing;
      std::istringstream lines(listing);
      for (std::string line; std::getline(lines, line);) {
        const std::size_t arrow = line.find("=> ");
        if (arrow == std::string::npos) continue;
        EXPECT_TRUE(line.compare(arrow + 3, root.size() + 1, root + "/") == 0)
            << exe << " loads from outside the image: " << line;
      }
    }
    const std::string entry = expected.entrypoint;
    auto [rc, help] = Capture(run + " " + Quote(root + entry) + " --help");
    EXPECT_EQ(rc, 0) << help;
    EXPECT_NE(help.find(image), std::string::npos) << help;
  }
}

// Inside the images as a runtime would run them (chroot, so root only): the scheduler as its
// non-root user, and the Helm chart's init container command (sh -c 'cp; chmod; mv') installing
// the preload library into a host folder.
TEST_F(ImagesTest, ChartCommandsRunInsideTheImages) {
  if (geteuid() != 0) GTEST_SKIP() << "chroot needs root";
  const std::string scheduler = Unpacked(kScheduler);
  const std::string node = Unpacked(kNode);
  ASSERT_NE(scheduler, "");
  ASSERT_NE(node, "");
  auto [probe, probe_out] = Capture("chroot " + Quote(node) + " /bin/sh -c true");
  if (probe != 0) GTEST_SKIP() << "chroot is not permitted here: " << probe_out;

  // The environment a runtime gives: the image's Env only.
  const auto chroot_with_env = [](const std::string& image, const std::string& more = "") {
    std::string command = "env -i " + more;
    for (const json& e : Get(image).image.config["config"]["Env"]) {
      command += " " + Quote(e.get<std::string>());
    }
    return command + " \"$(command -v chroot)\" ";
  };
#if !defined(TESSERA_IMAGES_SANITIZED)  // their runtimes need /proc, which a bare chroot lacks
  auto [rc, help] = Capture(chroot_with_env(kScheduler) + "--userspec=65532:65532 " +
                            Quote(scheduler) + " /usr/local/bin/tessera-scheduler --help");
  EXPECT_EQ(rc, 0) << help;
  EXPECT_NE(help.find("--signing-key"), std::string::npos) << help;
#endif

  // The host folder appears inside the container as the chart's hostPath mount would.
  const std::string host_dir = node + "/host-lib";
  fs::create_directories(host_dir);
  std::ofstream(host_dir + "/libtessera-cuda.so") << "the old library";
  auto [install_rc, install] = Capture(
      chroot_with_env(
          kNode, "FROM=/usr/local/lib/tessera/libtessera-cuda.so TO=/host-lib/libtessera-cuda.so") +
      Quote(node) +
      " /bin/sh -c 'set -e; cp \"$FROM\" \"$TO.new\"; chmod 0755 \"$TO.new\"; "
      "mv -f \"$TO.new\" \"$TO\"'");
  EXPECT_EQ(install_rc, 0) << install;
  StatusOr<std::string> installed = ReadWholeFile(host_dir + "/libtessera-cuda.so");
  ASSERT_OK(installed);
  EXPECT_TRUE(*installed == Get(kNode).fs.Find("/usr/local/lib/tessera/libtessera-cuda.so")->data);
  struct stat st {};
  ASSERT_EQ(stat((host_dir + "/libtessera-cuda.so").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  EXPECT_FALSE(fs::exists(host_dir + "/libtessera-cuda.so.new"));
}

// The Dockerfile's stages agree with the daemonless build's config.
TEST_F(ImagesTest, DockerfileAgrees) {
  StatusOr<std::string> dockerfile = ReadWholeFile(kSourceDir + "/deployments/images/Dockerfile");
  ASSERT_OK(dockerfile);
  std::map<std::string, std::map<std::string, std::string>> stages;  // stage -> instruction -> args
  std::string stage;
  std::istringstream lines(*dockerfile);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string instruction;
    words >> instruction;
    std::string rest;
    std::getline(words, rest);
    rest = rest.empty() ? rest : rest.substr(rest.find_first_not_of(' '));
    if (instruction == "FROM") {
      const std::size_t as = rest.find(" AS ");
      stage = as == std::string::npos ? "" : Trimmed(rest.substr(as + 4));
      stages[stage]["FROM"] = rest.substr(0, rest.find(' '));
    } else if (instruction == "ENTRYPOINT" || instruction == "USER") {
      stages[stage][instruction] = Trimmed(rest);
    }
  }
  for (const auto& [image, expected] : kExpected) {
    SCOPED_TRACE(image);
    ASSERT_TRUE(stages.contains(image)) << "no stage '" << image << "'";
    EXPECT_EQ(stages[image]["FROM"], "scratch");
    EXPECT_EQ(json::parse(stages[image]["ENTRYPOINT"]),
              Get(image).image.config["config"]["Entrypoint"]);
    EXPECT_EQ(stages[image]["USER"], expected.user);
  }
}

// The checks can fail: a corrupt blob, a wrong size, a missing library, a newer symbol.
TEST_F(ImagesTest, ChecksCatchBrokenArchives) {
  const Built& node = Get(kNode);
  const std::string layer = "blobs/sha256/" + node.image.layer_descriptors[1].digest.substr(7);
  {
    ArchiveFiles files = node.files;
    files[layer][files[layer].size() / 2] ^= 0x01;
    StatusOr<Image> loaded = LoadLayout(files);
    ASSERT_FALSE(loaded.ok());
    EXPECT_NE(loaded.status().message().find("content does not match its name"), std::string::npos)
        << loaded.status().ToString();
  }
  {
    ArchiveFiles files = node.files;
    files.erase(layer);
    StatusOr<Image> loaded = LoadLayout(files);
    ASSERT_FALSE(loaded.ok());
    EXPECT_NE(loaded.status().message().find("is missing"), std::string::npos)
        << loaded.status().ToString();
  }
  {
    ArchiveFiles files = node.files;
    files["blobs/sha256/" + std::string(64, '0')] = "stray";
    StatusOr<Image> loaded = LoadLayout(files);
    ASSERT_FALSE(loaded.ok());
    EXPECT_NE(loaded.status().message().find("not referenced"), std::string::npos)
        << loaded.status().ToString();
  }
  {
    ArchiveFiles files = node.files;
    files["blobs/sha256/" + node.image.manifest["config"]["digest"].get<std::string>().substr(7)] +=
        " ";
    StatusOr<Image> loaded = LoadLayout(files);
    ASSERT_FALSE(loaded.ok());
    EXPECT_NE(loaded.status().message().find("descriptor says"), std::string::npos)
        << loaded.status().ToString();
  }
  {
    ArchiveFiles files = node.files;
    files.erase("oci-layout");
    StatusOr<Image> loaded = LoadLayout(files);
    ASSERT_FALSE(loaded.ok());
    EXPECT_NE(loaded.status().message().find("oci-layout is missing"), std::string::npos)
        << loaded.status().ToString();
  }
  {
    Rootfs broken = node.fs;
    StatusOr<std::string> yaml = broken.Resolve("/usr/lib/x86_64-linux-gnu/libyaml-cpp.so.0.7");
    ASSERT_OK(yaml);
    broken.Remove(*yaml);
    Closure c = WalkClosure(broken, "/usr/local/bin/tessera-node");
    ASSERT_FALSE(c.problems.empty());
    EXPECT_NE(c.problems[0].find("libyaml-cpp.so.0.7 not found"), std::string::npos)
        << c.problems[0];
  }
  {
    Rootfs broken = node.fs;
    StatusOr<std::string> loader = broken.Resolve("/lib64/ld-linux-x86-64.so.2");
    ASSERT_OK(loader);
    broken.Remove(*loader);
    Closure c = WalkClosure(broken, "/usr/local/bin/tessera-node");
    ASSERT_FALSE(c.problems.empty());
    EXPECT_NE(c.problems[0].find("interpreter"), std::string::npos) << c.problems[0];
  }
  const std::vector<VersionNeed> newer = {{"memcpy", "libc.so.6", "GLIBC_2.14"},
                                          {"foo", "libc.so.6", "GLIBC_2.38"},
                                          {"bar", "libc.so.6", "GLIBC_2.4"},
                                          {"", "libc.so.6", "GLIBC_PRIVATE"}};
  const Floor f = HighestVersion(newer, "GLIBC");
  EXPECT_EQ(f.version, "2.38");
  EXPECT_EQ(f.symbols, std::vector<std::string>{"foo"});
  EXPECT_GT(CompareVersions(f.version, PromisedFloor().at("GLIBC")), 0);
  EXPECT_LT(CompareVersions("2.3.2", "2.34"), 0);
  EXPECT_GT(CompareVersions("3.4.30", "3.4.29"), 0);
}

TEST(BuildImages, RefusesAMissingBinary) {
  testutil::TempDir temp;
  auto [rc, log] =
      Capture(BuilderEnv() + " TESSERA_LIB_HOOK=" + Quote(temp.path() + "/nothing.so") + " bash " +
              Quote(kBuilder) + " " + Quote(temp.path() + "/out"));
  EXPECT_NE(rc, 0) << log;
  EXPECT_NE(log.find("nothing.so is missing"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(temp.path() + "/out/tessera-node.oci.tar"));
}

}  // namespace
}  // namespace tessera::images
