// Reading OCI image archives without a container engine, for test/images: the archive's tar,
// the layout (index -> manifest -> config and layers, every blob checked against its digest),
// the layers merged into one root filesystem, and the ELF facts the loader acts on (interpreter,
// DT_NEEDED, run paths, symbol versions). Only what hack/build-images.sh's archives need:
// ustar/pax/GNU tar entries, gzip layers, 64-bit little-endian ELF.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/status.h"

namespace tessera::images {

std::string Sha256Hex(std::string_view data);
StatusOr<std::string> Gunzip(std::string_view gz);
StatusOr<std::string> ReadWholeFile(const std::string& path);

struct TarEntry {
  std::string path;  // as stored, without a leading "./" or a trailing "/"
  char type = '0';   // '0' file, '1' hard link, '2' symlink, '5' directory, ...
  std::uint32_t mode = 0;
  std::uint64_t uid = 0;
  std::uint64_t gid = 0;
  std::int64_t mtime = 0;
  std::string link;  // a link's target
  std::string data;  // a file's bytes
};

// Every entry of a tar archive in order; pax ('x') and GNU long-name records are applied to the
// entry they precede. Fails on a bad header checksum, a truncated entry or a global pax header.
StatusOr<std::vector<TarEntry>> ParseTar(std::string_view tar);

struct Descriptor {
  std::string media_type;
  std::string digest;  // "sha256:<hex>"
  std::int64_t size = 0;
};

struct Image {
  nlohmann::json index;
  nlohmann::json manifest;
  nlohmann::json config;
  std::string ref_name;  // index.json's org.opencontainers.image.ref.name
  Descriptor manifest_descriptor;
  std::vector<Descriptor> layer_descriptors;
  std::vector<std::vector<TarEntry>> layers;  // each layer's entries, decompressed
};

// The archive's files by path ("index.json", "blobs/sha256/<hex>", ...).
using ArchiveFiles = std::map<std::string, std::string>;
StatusOr<ArchiveFiles> ReadArchive(std::string_view archive);

// The image layout in `files`, checked on the way: oci-layout 1.0.0, one manifest in the index,
// every blob named by its sha256 with the size its descriptor states, no blob left unreferenced,
// media types, the config's diff_ids equal to the uncompressed layers' digests.
StatusOr<Image> LoadLayout(const ArchiveFiles& files);

struct Node {
  char type = '0';  // '0' file, '2' symlink, '5' directory
  std::uint32_t mode = 0;
  std::uint64_t uid = 0;
  std::uint64_t gid = 0;
  std::string link;
  std::string data;
};

// The layers applied in order, as a container runtime would: absolute paths ("/usr/bin/cp").
class Rootfs {
 public:
  // Fails on whiteouts (the images never delete), hard links, absolute names or "..".
  static StatusOr<Rootfs> FromLayers(const std::vector<std::vector<TarEntry>>& layers);

  const std::map<std::string, Node>& nodes() const { return nodes_; }
  const Node* Find(const std::string& path) const;  // exactly this path, no symlink followed
  // PATH with every symlink followed, inside this filesystem ("/" is its root, also for ".."
  // and absolute targets); the canonical path of an existing node, or NotFound.
  StatusOr<std::string> Resolve(const std::string& path) const;
  void Remove(const std::string& path) { nodes_.erase(path); }

 private:
  std::map<std::string, Node> nodes_;
};

struct VersionNeed {
  std::string symbol;   // "" for a version the object needs without a symbol of its own
  std::string file;     // the library that must define it: "libc.so.6"
  std::string version;  // "GLIBC_2.34"
};

struct ElfInfo {
  std::uint16_t type = 0;     // ET_EXEC 2, ET_DYN 3
  std::uint16_t machine = 0;  // EM_X86_64 62, EM_AARCH64 183
  std::string interpreter;    // PT_INTERP, "" for a library
  std::string soname;
  std::vector<std::string> needed;
  std::vector<std::string> rpath;
  std::vector<std::string> runpath;
  std::vector<VersionNeed> undefined_versions;  // per undefined versioned dynamic symbol
};

bool IsElf(std::string_view bytes);
StatusOr<ElfInfo> ParseElf(std::string_view bytes);

// "2.34" vs "2.3.2", numerically per dotted component: <0, 0, >0.
int CompareVersions(std::string_view a, std::string_view b);

// The highest version of FAMILY ("GLIBC", "GLIBCXX", "CXXABI", "GCC") among `needs`, with the
// symbols that need it; "" if none.
struct Floor {
  std::string version;
  std::vector<std::string> symbols;
};
Floor HighestVersion(const std::vector<VersionNeed>& needs, std::string_view family);

// What the loader maps for `path` inside `fs`: the interpreter named by PT_INTERP and every
// DT_NEEDED library, transitively, found the way glibc's ld.so finds them without a cache
// (DT_RPATH, DT_RUNPATH with $ORIGIN, then the multiarch system folders).
struct Closure {
  std::vector<std::string> objects;   // canonical paths, `path` first
  std::vector<std::string> problems;  // empty when every name resolved
};
Closure WalkClosure(const Rootfs& fs, const std::string& path);

}  // namespace tessera::images
