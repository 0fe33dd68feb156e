#include "images/oci_inspect.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include <openssl/evp.h>
#include <zlib.h>

namespace tessera::images {
namespace {

using nlohmann::json;

constexpr std::size_t kBlock = 512;

std::string HexOf(const unsigned char* bytes, std::size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(kDigits[bytes[i] >> 4]);
    out.push_back(kDigits[bytes[i] & 0xf]);
  }
  return out;
}

// A NUL-terminated (or full-width) header field.
std::string Field(std::string_view block, std::size_t offset, std::size_t width) {
  std::string_view f = block.substr(offset, width);
  const std::size_t nul = f.find('\0');
  return std::string(nul == std::string_view::npos ? f : f.substr(0, nul));
}

// An octal header field (GNU tar's base-256 form for large values included).
StatusOr<std::uint64_t> Octal(std::string_view block, std::size_t offset, std::size_t width) {
  std::string_view f = block.substr(offset, width);
  if (!f.empty() && (static_cast<unsigned char>(f[0]) & 0x80) != 0) {
    std::uint64_t v = static_cast<unsigned char>(f[0]) & 0x7f;
    for (std::size_t i = 1; i < f.size(); ++i) v = (v << 8) | static_cast<unsigned char>(f[i]);
    return v;
  }
  std::uint64_t v = 0;
  bool digits = false;
  for (char c : f) {
    if (c == '\0' || c == ' ') {
      if (digits) break;
      continue;
    }
    if (c < '0' || c > '7') return DataLossError("tar: bad octal field '" + std::string(f) + "'");
    v = v * 8 + static_cast<std::uint64_t>(c - '0');
    digits = true;
  }
  return v;
}

bool AllZero(std::string_view block) {
  return std::all_of(block.begin(), block.end(), [](char c) { return c == '\0'; });
}

// pax records: "<len> <key>=<value>\n"...
StatusOr<std::map<std::string, std::string>> PaxRecords(std::string_view data) {
  std::map<std::string, std::string> out;
  while (!data.empty()) {
    const std::size_t space = data.find(' ');
    if (space == std::string_view::npos) return DataLossError("tar: bad pax record");
    std::size_t len = 0;
    for (char c : data.substr(0, space)) {
      if (c < '0' || c > '9') return DataLossError("tar: bad pax record length");
      len = len * 10 + static_cast<std::size_t>(c - '0');
    }
    if (len <= space + 1 || len > data.size() || data[len - 1] != '\n') {
      return DataLossError("tar: bad pax record");
    }
    std::string_view record = data.substr(space + 1, len - space - 2);
    const std::size_t eq = record.find('=');
    if (eq == std::string_view::npos) return DataLossError("tar: pax record without '='");
    out[std::string(record.substr(0, eq))] = std::string(record.substr(eq + 1));
    data.remove_prefix(len);
  }
  return out;
}

std::string NormalizeName(std::string name) {
  while (name.starts_with("./")) name.erase(0, 2);
  while (name.size() > 1 && name.back() == '/') name.pop_back();
  return name;
}

std::vector<std::string> Split(std::string_view s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    const std::size_t end = s.find(sep, start);
    const std::size_t stop = end == std::string_view::npos ? s.size() : end;
    out.emplace_back(s.substr(start, stop - start));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return out;
}

std::string DirName(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  if (slash == std::string::npos || slash == 0) return "/";
  return path.substr(0, slash);
}

StatusOr<Descriptor> ParseDescriptor(const json& j, std::string_view what) {
  if (!j.is_object() || !j.contains("mediaType") || !j.contains("digest") || !j.contains("size") ||
      !j["mediaType"].is_string() || !j["digest"].is_string() || !j["size"].is_number_integer()) {
    return InvalidArgumentError(std::string(what) + ": not a descriptor: " + j.dump());
  }
  Descriptor d{j["mediaType"].get<std::string>(), j["digest"].get<std::string>(),
               j["size"].get<std::int64_t>()};
  if (!d.digest.starts_with("sha256:") || d.digest.size() != 7 + 64) {
    return InvalidArgumentError(std::string(what) + ": digest '" + d.digest + "' is not sha256");
  }
  return d;
}

// The blob a descriptor names, checked against its digest and size.
StatusOr<const std::string*> Blob(const ArchiveFiles& files, const Descriptor& d,
                                  std::set<std::string>* used) {
  const std::string path = "blobs/sha256/" + d.digest.substr(7);
  auto it = files.find(path);
  if (it == files.end()) return NotFoundError(path + " is missing");
  if (static_cast<std::int64_t>(it->second.size()) != d.size) {
    return DataLossError(path + ": " + std::to_string(it->second.size()) +
                         " bytes, descriptor says " + std::to_string(d.size));
  }
  used->insert(path);
  return &it->second;
}

StatusOr<json> ParseJson(const std::string& text, std::string_view what) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgumentError(std::string(what) + ": not JSON");
  return j;
}

// --- ELF ---------------------------------------------------------------------------------------

template <typename T>
StatusOr<T> Read(std::string_view bytes, std::uint64_t offset) {
  if (offset > bytes.size() || bytes.size() - offset < sizeof(T)) {
    return DataLossError("ELF: read past the end at offset " + std::to_string(offset));
  }
  T v;
  std::memcpy(&v, bytes.data() + offset, sizeof(T));
  return v;
}

struct Section {
  std::uint32_t type = 0;
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  std::uint32_t link = 0;
  std::uint32_t info = 0;
  std::uint64_t entsize = 0;
};

StatusOr<std::string> CString(std::string_view bytes, const Section& strtab, std::uint64_t index) {
  if (index >= strtab.size) return DataLossError("ELF: string index out of its table");
  const std::uint64_t start = strtab.offset + index;
  if (start >= bytes.size()) return DataLossError("ELF: string table out of the file");
  const std::size_t end = bytes.find('\0', static_cast<std::size_t>(start));
  if (end == std::string_view::npos) return DataLossError("ELF: unterminated string");
  return std::string(
      bytes.substr(static_cast<std::size_t>(start), end - static_cast<std::size_t>(start)));
}

constexpr std::uint32_t kPtInterp = 3;
constexpr std::uint32_t kShtStrtab = 3;
constexpr std::uint32_t kShtDynamic = 6;
constexpr std::uint32_t kShtDynsym = 11;
constexpr std::uint32_t kShtGnuVerneed = 0x6ffffffe;
constexpr std::uint32_t kShtGnuVersym = 0x6fffffff;
constexpr std::int64_t kDtNull = 0;
constexpr std::int64_t kDtNeeded = 1;
constexpr std::int64_t kDtSoname = 14;
constexpr std::int64_t kDtRpath = 15;
constexpr std::int64_t kDtRunpath = 29;
constexpr std::uint16_t kEmX8664 = 62;
constexpr std::uint16_t kEmAarch64 = 183;

}  // namespace

std::string Sha256Hex(std::string_view data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), md.data(), &n, EVP_sha256(), nullptr);
  return HexOf(md.data(), n);
}

StatusOr<std::string> Gunzip(std::string_view gz) {
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return InternalError("inflateInit2 failed");
  std::string out;
  std::array<char, 1 << 16> buf{};
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  z.avail_in = static_cast<uInt>(gz.size());
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    z.next_out = reinterpret_cast<Bytef*>(buf.data());
    z.avail_out = static_cast<uInt>(buf.size());
    rc = inflate(&z, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      inflateEnd(&z);
      return DataLossError("gzip: " + std::string(z.msg != nullptr ? z.msg : "corrupt stream"));
    }
    out.append(buf.data(), buf.size() - z.avail_out);
    if (rc == Z_OK && z.avail_in == 0 && z.avail_out != 0) {
      inflateEnd(&z);
      return DataLossError("gzip: truncated stream");
    }
  }
  const bool trailing = z.avail_in != 0;
  inflateEnd(&z);
  if (trailing) return DataLossError("gzip: bytes after the stream");
  return out;
}

StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot open " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

StatusOr<std::vector<TarEntry>> ParseTar(std::string_view tar) {
  std::vector<TarEntry> out;
  std::map<std::string, std::string> pax;
  std::string long_name, long_link;
  std::size_t pos = 0;
  bool ended = false;
  while (pos + kBlock <= tar.size()) {
    std::string_view h = tar.substr(pos, kBlock);
    if (AllZero(h)) {
      ended = true;
      break;
    }
    // Checksum: the header's bytes with the checksum field read as spaces.
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < kBlock; ++i) {
      sum += (i >= 148 && i < 156) ? 0x20u : static_cast<unsigned char>(h[i]);
    }
    TESSERA_ASSIGN_OR_RETURN(std::uint64_t stored, Octal(h, 148, 8));
    if (stored != sum)
      return DataLossError("tar: bad header checksum at offset " + std::to_string(pos));
    TESSERA_ASSIGN_OR_RETURN(std::uint64_t size, Octal(h, 124, 12));
    const char type = h[156] == '\0' ? '0' : h[156];
    const std::size_t data_at = pos + kBlock;
    if (size > tar.size() - data_at)
      return DataLossError("tar: truncated entry at offset " + std::to_string(pos));
    std::string_view data = tar.substr(data_at, static_cast<std::size_t>(size));
    pos = data_at + (static_cast<std::size_t>(size) + kBlock - 1) / kBlock * kBlock;

    if (type == 'x') {
      TESSERA_ASSIGN_OR_RETURN(pax, PaxRecords(data));
      continue;
    }
    if (type == 'g') return InvalidArgumentError("tar: global pax header (not reproducible)");
    if (type == 'L') {
      long_name = Field(data, 0, data.size());
      continue;
    }
    if (type == 'K') {
      long_link = Field(data, 0, data.size());
      continue;
    }
    TarEntry e;
    e.type = type == '7' ? '0' : type;  // contiguous file: a regular file
    const std::string magic = Field(h, 257, 6);
    std::string name = Field(h, 0, 100);
    if (magic == "ustar") {
      const std::string prefix = Field(h, 345, 155);
      if (!prefix.empty()) name = prefix + "/" + name;
    }
    if (!long_name.empty()) name = long_name;
    e.link = Field(h, 157, 100);
    if (!long_link.empty()) e.link = long_link;
    TESSERA_ASSIGN_OR_RETURN(std::uint64_t mode, Octal(h, 100, 8));
    e.mode = static_cast<std::uint32_t>(mode & 07777);
    TESSERA_ASSIGN_OR_RETURN(e.uid, Octal(h, 108, 8));
    TESSERA_ASSIGN_OR_RETURN(e.gid, Octal(h, 116, 8));
    TESSERA_ASSIGN_OR_RETURN(std::uint64_t mtime, Octal(h, 136, 12));
    e.mtime = static_cast<std::int64_t>(mtime);
    for (const auto& [key, value] : pax) {
      if (key == "path")
        name = value;
      else if (key == "linkpath")
        e.link = value;
      else if (key == "uid")
        e.uid = std::stoull(value);
      else if (key == "gid")
        e.gid = std::stoull(value);
      else if (key == "mtime")
        e.mtime = std::stoll(value);  // fractional seconds dropped
      else if (key == "size")
        return InvalidArgumentError("tar: pax size records are not supported");
    }
    e.path = NormalizeName(name);
    if (e.type == '0') e.data = std::string(data);
    out.push_back(std::move(e));
    pax.clear();
    long_name.clear();
    long_link.clear();
  }
  if (!ended) return DataLossError("tar: no end-of-archive marker");
  return out;
}

StatusOr<ArchiveFiles> ReadArchive(std::string_view archive) {
  TESSERA_ASSIGN_OR_RETURN(std::vector<TarEntry> entries, ParseTar(archive));
  ArchiveFiles files;
  for (TarEntry& e : entries) {
    if (e.type == '5') continue;
    if (e.type != '0') return InvalidArgumentError("archive: " + e.path + " is not a plain file");
    if (!files.emplace(e.path, std::move(e.data)).second) {
      return InvalidArgumentError("archive: " + e.path + " twice");
    }
  }
  return files;
}

StatusOr<Image> LoadLayout(const ArchiveFiles& files) {
  Image image;
  std::set<std::string> used;
  auto layout = files.find("oci-layout");
  if (layout == files.end()) return NotFoundError("oci-layout is missing");
  TESSERA_ASSIGN_OR_RETURN(json layout_json, ParseJson(layout->second, "oci-layout"));
  if (layout_json.value("imageLayoutVersion", "") != "1.0.0") {
    return InvalidArgumentError("oci-layout: imageLayoutVersion is not 1.0.0: " + layout->second);
  }
  auto index = files.find("index.json");
  if (index == files.end()) return NotFoundError("index.json is missing");
  TESSERA_ASSIGN_OR_RETURN(image.index, ParseJson(index->second, "index.json"));
  if (image.index.value("schemaVersion", 0) != 2 || !image.index.contains("manifests") ||
      !image.index["manifests"].is_array() || image.index["manifests"].size() != 1) {
    return InvalidArgumentError("index.json: schemaVersion 2 with one manifest expected");
  }
  const json& entry = image.index["manifests"][0];
  TESSERA_ASSIGN_OR_RETURN(image.manifest_descriptor, ParseDescriptor(entry, "index.json"));
  if (image.manifest_descriptor.media_type != "application/vnd.oci.image.manifest.v1+json") {
    return InvalidArgumentError("index.json: manifest media type " +
                                image.manifest_descriptor.media_type);
  }
  if (entry.contains("annotations") &&
      entry["annotations"].contains("org.opencontainers.image.ref.name")) {
    image.ref_name = entry["annotations"]["org.opencontainers.image.ref.name"].get<std::string>();
  }

  TESSERA_ASSIGN_OR_RETURN(const std::string* manifest_blob,
                           Blob(files, image.manifest_descriptor, &used));
  TESSERA_ASSIGN_OR_RETURN(image.manifest, ParseJson(*manifest_blob, "manifest"));
  if (image.manifest.value("schemaVersion", 0) != 2 ||
      image.manifest.value("mediaType", "") != "application/vnd.oci.image.manifest.v1+json") {
    return InvalidArgumentError(
        "manifest: schemaVersion 2 and the OCI manifest media type expected");
  }
  TESSERA_ASSIGN_OR_RETURN(Descriptor config_d,
                           ParseDescriptor(image.manifest["config"], "manifest config"));
  if (config_d.media_type != "application/vnd.oci.image.config.v1+json") {
    return InvalidArgumentError("manifest: config media type " + config_d.media_type);
  }
  TESSERA_ASSIGN_OR_RETURN(const std::string* config_blob, Blob(files, config_d, &used));
  TESSERA_ASSIGN_OR_RETURN(image.config, ParseJson(*config_blob, "config"));

  if (!image.manifest.contains("layers") || !image.manifest["layers"].is_array()) {
    return InvalidArgumentError("manifest: no layers");
  }
  const json& diff_ids = image.config["rootfs"]["diff_ids"];
  if (!diff_ids.is_array() || diff_ids.size() != image.manifest["layers"].size()) {
    return InvalidArgumentError("config: diff_ids do not match the manifest's layers");
  }
  std::vector<const std::string*> layer_blobs;
  for (std::size_t i = 0; i < image.manifest["layers"].size(); ++i) {
    TESSERA_ASSIGN_OR_RETURN(Descriptor d,
                             ParseDescriptor(image.manifest["layers"][i], "manifest layer"));
    if (d.media_type != "application/vnd.oci.image.layer.v1.tar+gzip") {
      return InvalidArgumentError("manifest: layer media type " + d.media_type);
    }
    TESSERA_ASSIGN_OR_RETURN(const std::string* blob, Blob(files, d, &used));
    layer_blobs.push_back(blob);
    image.layer_descriptors.push_back(std::move(d));
  }

  // Every blob is named by its digest, and every blob is referenced (before the slow part).
  for (const auto& [path, content] : files) {
    if (!path.starts_with("blobs/")) continue;
    if (!path.starts_with("blobs/sha256/")) {
      return InvalidArgumentError(path + ": not a sha256 blob");
    }
    if (!used.contains(path)) return InvalidArgumentError(path + ": not referenced");
    if (Sha256Hex(content) != path.substr(13)) {
      return DataLossError(path + ": content does not match its name");
    }
  }

  for (std::size_t i = 0; i < layer_blobs.size(); ++i) {
    TESSERA_ASSIGN_OR_RETURN(std::string tar, Gunzip(*layer_blobs[i]));
    if ("sha256:" + Sha256Hex(tar) != diff_ids[i].get<std::string>()) {
      return DataLossError("layer " + std::to_string(i) + ": diff_id does not match its content");
    }
    TESSERA_ASSIGN_OR_RETURN(std::vector<TarEntry> entries, ParseTar(tar));
    image.layers.push_back(std::move(entries));
  }
  return image;
}

StatusOr<Rootfs> Rootfs::FromLayers(const std::vector<std::vector<TarEntry>>& layers) {
  Rootfs fs;
  for (const std::vector<TarEntry>& layer : layers) {
    for (const TarEntry& e : layer) {
      if (e.path.empty() || e.path.starts_with("/")) {
        return InvalidArgumentError("layer: absolute or empty name '" + e.path + "'");
      }
      for (const std::string& c : Split(e.path, '/')) {
        if (c == "..") return InvalidArgumentError("layer: '..' in " + e.path);
        if (c.starts_with(".wh.")) return InvalidArgumentError("layer: whiteout " + e.path);
      }
      if (e.type != '0' && e.type != '2' && e.type != '5') {
        return InvalidArgumentError("layer: " + e.path + " has type '" + std::string(1, e.type) +
                                    "'");
      }
      const std::string path = "/" + e.path;
      auto existing = fs.nodes_.find(path);
      // A directory entry over an existing directory keeps what is inside (overlay semantics).
      if (existing != fs.nodes_.end() && existing->second.type != e.type &&
          (existing->second.type == '5' || e.type == '5')) {
        return InvalidArgumentError("layer: " + path +
                                    " changes between a directory and a non-directory");
      }
      fs.nodes_[path] = Node{e.type, e.mode, e.uid, e.gid, e.link, e.data};
    }
  }
  return fs;
}

const Node* Rootfs::Find(const std::string& path) const {
  auto it = nodes_.find(path);
  return it == nodes_.end() ? nullptr : &it->second;
}

StatusOr<std::string> Rootfs::Resolve(const std::string& path) const {
  std::deque<std::string> pending;
  for (std::string& c : Split(path, '/')) pending.push_back(std::move(c));
  std::vector<std::string> done;
  int links = 0;
  const auto joined = [&done] {
    std::string p;
    for (const std::string& c : done) p += "/" + c;
    return p.empty() ? std::string("/") : p;
  };
  while (!pending.empty()) {
    std::string c = std::move(pending.front());
    pending.pop_front();
    if (c.empty() || c == ".") continue;
    if (c == "..") {
      if (!done.empty()) done.pop_back();
      continue;
    }
    const std::string candidate = joined() == "/" ? "/" + c : joined() + "/" + c;
    const Node* node = Find(candidate);
    if (node == nullptr) return NotFoundError(path + ": " + candidate + " does not exist");
    if (node->type == '2') {
      if (++links > 40) return InvalidArgumentError(path + ": too many symbolic links");
      std::vector<std::string> target = Split(node->link, '/');
      if (node->link.starts_with("/")) done.clear();
      pending.insert(pending.begin(), target.begin(), target.end());
      continue;
    }
    if (!pending.empty() && node->type != '5') {
      bool more = std::any_of(pending.begin(), pending.end(),
                              [](const std::string& p) { return !p.empty() && p != "."; });
      if (more) return NotFoundError(path + ": " + candidate + " is not a directory");
    }
    done.push_back(std::move(c));
  }
  return joined();
}

bool IsElf(std::string_view bytes) {
  return bytes.size() >= 4 && bytes.substr(0, 4) ==
                                  "\x7f"
                                  "ELF";
}

StatusOr<ElfInfo> ParseElf(std::string_view bytes) {
  if (!IsElf(bytes)) return InvalidArgumentError("not an ELF file");
  if (bytes.size() < 64 || bytes[4] != 2 || bytes[5] != 1) {
    return InvalidArgumentError("ELF: only 64-bit little-endian objects are read");
  }
  ElfInfo info;
  TESSERA_ASSIGN_OR_RETURN(info.type, Read<std::uint16_t>(bytes, 16));
  TESSERA_ASSIGN_OR_RETURN(info.machine, Read<std::uint16_t>(bytes, 18));
  TESSERA_ASSIGN_OR_RETURN(std::uint64_t phoff, Read<std::uint64_t>(bytes, 32));
  TESSERA_ASSIGN_OR_RETURN(std::uint64_t shoff, Read<std::uint64_t>(bytes, 40));
  TESSERA_ASSIGN_OR_RETURN(std::uint16_t phentsize, Read<std::uint16_t>(bytes, 54));
  TESSERA_ASSIGN_OR_RETURN(std::uint16_t phnum, Read<std::uint16_t>(bytes, 56));
  TESSERA_ASSIGN_OR_RETURN(std::uint16_t shentsize, Read<std::uint16_t>(bytes, 58));
  TESSERA_ASSIGN_OR_RETURN(std::uint16_t shnum, Read<std::uint16_t>(bytes, 60));

  for (std::uint16_t i = 0; i < phnum; ++i) {
    const std::uint64_t ph = phoff + std::uint64_t{i} * phentsize;
    TESSERA_ASSIGN_OR_RETURN(std::uint32_t p_type, Read<std::uint32_t>(bytes, ph));
    if (p_type != kPtInterp) continue;
    TESSERA_ASSIGN_OR_RETURN(std::uint64_t off, Read<std::uint64_t>(bytes, ph + 8));
    TESSERA_ASSIGN_OR_RETURN(std::uint64_t filesz, Read<std::uint64_t>(bytes, ph + 32));
    if (off > bytes.size() || filesz > bytes.size() - off)
      return DataLossError("ELF: PT_INTERP out of the file");
    info.interpreter =
        Field(bytes, static_cast<std::size_t>(off), static_cast<std::size_t>(filesz));
  }

  if (shoff == 0 || shnum == 0) return InvalidArgumentError("ELF: no section headers");
  std::vector<Section> sections(shnum);
  for (std::uint16_t i = 0; i < shnum; ++i) {
    const std::uint64_t sh = shoff + std::uint64_t{i} * shentsize;
    Section& s = sections[i];
    TESSERA_ASSIGN_OR_RETURN(s.type, Read<std::uint32_t>(bytes, sh + 4));
    TESSERA_ASSIGN_OR_RETURN(s.offset, Read<std::uint64_t>(bytes, sh + 24));
    TESSERA_ASSIGN_OR_RETURN(s.size, Read<std::uint64_t>(bytes, sh + 32));
    TESSERA_ASSIGN_OR_RETURN(s.link, Read<std::uint32_t>(bytes, sh + 40));
    TESSERA_ASSIGN_OR_RETURN(s.info, Read<std::uint32_t>(bytes, sh + 44));
    TESSERA_ASSIGN_OR_RETURN(s.entsize, Read<std::uint64_t>(bytes, sh + 56));
  }
  const auto strtab_of = [&](const Section& s) -> StatusOr<Section> {
    if (s.link >= sections.size() || sections[s.link].type != kShtStrtab) {
      return DataLossError("ELF: section links to no string table");
    }
    return sections[s.link];
  };

  const Section* dynsym = nullptr;
  const Section* versym = nullptr;
  const Section* verneed = nullptr;
  for (const Section& s : sections) {
    if (s.type == kShtDynamic) {
      TESSERA_ASSIGN_OR_RETURN(Section strtab, strtab_of(s));
      for (std::uint64_t off = 0; off + 16 <= s.size; off += 16) {
        TESSERA_ASSIGN_OR_RETURN(std::int64_t tag, Read<std::int64_t>(bytes, s.offset + off));
        TESSERA_ASSIGN_OR_RETURN(std::uint64_t val, Read<std::uint64_t>(bytes, s.offset + off + 8));
        if (tag == kDtNull) break;
        if (tag != kDtNeeded && tag != kDtSoname && tag != kDtRpath && tag != kDtRunpath) continue;
        TESSERA_ASSIGN_OR_RETURN(std::string str, CString(bytes, strtab, val));
        if (tag == kDtNeeded) info.needed.push_back(str);
        if (tag == kDtSoname) info.soname = str;
        if (tag == kDtRpath) info.rpath = Split(str, ':');
        if (tag == kDtRunpath) info.runpath = Split(str, ':');
      }
    }
    if (s.type == kShtDynsym) dynsym = &s;
    if (s.type == kShtGnuVersym) versym = &s;
    if (s.type == kShtGnuVerneed) verneed = &s;
  }

  // Version indexes -> (file, version) from .gnu.version_r.
  std::map<std::uint16_t, std::pair<std::string, std::string>> needs;
  if (verneed != nullptr) {
    TESSERA_ASSIGN_OR_RETURN(Section strtab, strtab_of(*verneed));
    std::uint64_t vn = verneed->offset;
    for (std::uint32_t i = 0; i < verneed->info; ++i) {
      TESSERA_ASSIGN_OR_RETURN(std::uint16_t cnt, Read<std::uint16_t>(bytes, vn + 2));
      TESSERA_ASSIGN_OR_RETURN(std::uint32_t file, Read<std::uint32_t>(bytes, vn + 4));
      TESSERA_ASSIGN_OR_RETURN(std::uint32_t aux, Read<std::uint32_t>(bytes, vn + 8));
      TESSERA_ASSIGN_OR_RETURN(std::uint32_t next, Read<std::uint32_t>(bytes, vn + 12));
      TESSERA_ASSIGN_OR_RETURN(std::string file_name, CString(bytes, strtab, file));
      std::uint64_t va = vn + aux;
      for (std::uint16_t j = 0; j < cnt; ++j) {
        TESSERA_ASSIGN_OR_RETURN(std::uint16_t other, Read<std::uint16_t>(bytes, va + 6));
        TESSERA_ASSIGN_OR_RETURN(std::uint32_t name, Read<std::uint32_t>(bytes, va + 8));
        TESSERA_ASSIGN_OR_RETURN(std::uint32_t anext, Read<std::uint32_t>(bytes, va + 12));
        TESSERA_ASSIGN_OR_RETURN(std::string version, CString(bytes, strtab, name));
        needs[other] = {file_name, version};
        if (anext == 0) break;
        va += anext;
      }
      if (next == 0) break;
      vn += next;
    }
  }
  std::set<std::uint16_t> used_versions;
  if (dynsym != nullptr && versym != nullptr && dynsym->entsize == 24) {
    TESSERA_ASSIGN_OR_RETURN(Section strtab, strtab_of(*dynsym));
    const std::uint64_t count = dynsym->size / 24;
    for (std::uint64_t i = 1; i < count; ++i) {
      const std::uint64_t sym = dynsym->offset + i * 24;
      TESSERA_ASSIGN_OR_RETURN(std::uint32_t name, Read<std::uint32_t>(bytes, sym));
      TESSERA_ASSIGN_OR_RETURN(std::uint16_t shndx, Read<std::uint16_t>(bytes, sym + 6));
      if (shndx != 0) continue;  // defined here: not a need
      TESSERA_ASSIGN_OR_RETURN(std::uint16_t ver,
                               Read<std::uint16_t>(bytes, versym->offset + i * 2));
      ver &= 0x7fff;
      auto need = needs.find(ver);
      if (need == needs.end()) continue;  // unversioned (0/1)
      TESSERA_ASSIGN_OR_RETURN(std::string symbol, CString(bytes, strtab, name));
      info.undefined_versions.push_back({symbol, need->second.first, need->second.second});
      used_versions.insert(ver);
    }
  }
  // Versions needed without a symbol of their own (a library's base version): listed too.
  for (const auto& [index, need] : needs) {
    if (!used_versions.contains(index))
      info.undefined_versions.push_back({"", need.first, need.second});
  }
  return info;
}

int CompareVersions(std::string_view a, std::string_view b) {
  const std::vector<std::string> pa = Split(a, '.'), pb = Split(b, '.');
  for (std::size_t i = 0; i < std::max(pa.size(), pb.size()); ++i) {
    const unsigned long va = i < pa.size() && !pa[i].empty() ? std::stoul(pa[i]) : 0;
    const unsigned long vb = i < pb.size() && !pb[i].empty() ? std::stoul(pb[i]) : 0;
    if (va != vb) return va < vb ? -1 : 1;
  }
  return 0;
}

Floor HighestVersion(const std::vector<VersionNeed>& needs, std::string_view family) {
  Floor floor;
  const std::string prefix = std::string(family) + "_";
  for (const VersionNeed& n : needs) {
    if (!n.version.starts_with(prefix)) continue;
    const std::string v = n.version.substr(prefix.size());
    if (v.empty() || !std::isdigit(static_cast<unsigned char>(v[0]))) continue;  // GLIBC_PRIVATE
    const int cmp = floor.version.empty() ? 1 : CompareVersions(v, floor.version);
    if (cmp > 0) {
      floor.version = v;
      floor.symbols.clear();
    }
    if (cmp >= 0 && !n.symbol.empty()) floor.symbols.push_back(n.symbol);
  }
  return floor;
}

Closure WalkClosure(const Rootfs& fs, const std::string& path) {
  Closure closure;
  std::set<std::string> seen;
  std::deque<std::string> queue;
  std::map<std::string, std::string> by_soname;  // a name the loader already mapped
  const auto problem = [&closure](std::string p) { closure.problems.push_back(std::move(p)); };

  StatusOr<std::string> start = fs.Resolve(path);
  if (!start.ok()) {
    problem(start.status().message());
    return closure;
  }
  queue.push_back(*start);
  std::uint16_t machine = 0;
  std::vector<std::string> exe_rpath;
  bool first = true;
  while (!queue.empty()) {
    const std::string object = queue.front();
    queue.pop_front();
    if (!seen.insert(object).second) continue;
    closure.objects.push_back(object);
    const Node* node = fs.Find(object);
    if (node == nullptr || node->type != '0') {
      problem(object + ": not a regular file");
      continue;
    }
    StatusOr<ElfInfo> elf = ParseElf(node->data);
    if (!elf.ok()) {
      problem(object + ": " + elf.status().message());
      continue;
    }
    if (first) {
      machine = elf->machine;
      if (elf->runpath.empty()) exe_rpath = elf->rpath;
      first = false;
    } else if (elf->machine != machine) {
      problem(object + ": another machine type");
    }
    if (!elf->interpreter.empty()) {
      StatusOr<std::string> interp = fs.Resolve(elf->interpreter);
      if (!interp.ok()) {
        problem(object + ": interpreter " + elf->interpreter + ": " + interp.status().message());
      } else {
        queue.push_back(*interp);
        by_soname[elf->interpreter.substr(elf->interpreter.rfind('/') + 1)] = *interp;
      }
    }
    const std::string origin = DirName(object);
    const auto expand = [&origin](std::string dir) {
      for (const std::string_view token :
           {std::string_view("${ORIGIN}"), std::string_view("$ORIGIN")}) {
        for (std::size_t at = dir.find(token); at != std::string::npos; at = dir.find(token)) {
          dir.replace(at, token.size(), origin);
        }
      }
      return dir;
    };
    std::vector<std::string> dirs;
    if (elf->runpath.empty()) {
      for (const std::string& d : elf->rpath) dirs.push_back(expand(d));
      for (const std::string& d : exe_rpath) dirs.push_back(d);
    }
    for (const std::string& d : elf->runpath) dirs.push_back(expand(d));
    const std::string triplet = machine == kEmAarch64 ? "aarch64-linux-gnu"
                                : machine == kEmX8664 ? "x86_64-linux-gnu"
                                                      : "";
    for (const std::string& d :
         {"/lib/" + triplet, "/usr/lib/" + triplet, std::string("/lib"), std::string("/usr/lib")}) {
      dirs.push_back(d);
    }
    for (const std::string& name : elf->needed) {
      if (name.find('/') != std::string::npos) {
        StatusOr<std::string> p = fs.Resolve(name);
        if (p.ok())
          queue.push_back(*p);
        else
          problem(object + ": " + name + ": " + p.status().message());
        continue;
      }
      std::string found;
      for (const std::string& dir : dirs) {
        StatusOr<std::string> p = fs.Resolve(dir + "/" + name);
        if (!p.ok()) continue;
        const Node* lib = fs.Find(*p);
        if (lib == nullptr || lib->type != '0') continue;
        StatusOr<ElfInfo> lib_elf = ParseElf(lib->data);
        if (!lib_elf.ok() || lib_elf->machine != machine) continue;  // ld.so skips those too
        found = *p;
        break;
      }
      if (found.empty() && by_soname.contains(name)) found = by_soname[name];
      if (found.empty()) {
        problem(object + ": " + name + " not found in the image");
        continue;
      }
      by_soname.emplace(name, found);
      queue.push_back(found);
    }
  }
  return closure;
}

}  // namespace tessera::images
