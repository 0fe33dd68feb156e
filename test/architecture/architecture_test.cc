// The tree's structure, checked (docs/architecture.md):
//   - each part's sources include only the parts its row in docs/architecture.md says it may
//     use, and no product source includes test code (headers or include paths);
//   - each shared helper (reading a file, reading fields of an API object, OpenSSL deleters,
//     spawning a child) has one definition: a second one fails here, naming the file and line;
//   - every repository path that the docs name exists.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tessera {
namespace {

namespace fs = std::filesystem;

const fs::path kRoot = TESSERA_SOURCE_DIR;

std::string Slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string Relative(const fs::path& path) { return fs::relative(path, kRoot).generic_string(); }

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Test code: a test, a fuzz target, a *_testing helper, or anything under test/ and bench/.
bool IsTestCode(const std::string& rel) {
  const std::string name = fs::path(rel).filename().string();
  return rel.rfind("test/", 0) == 0 || rel.rfind("bench/", 0) == 0 || EndsWith(name, "_test.cc") ||
         name.find("_testing.") != std::string::npos;
}

std::vector<std::string> SourcesUnder(const std::vector<std::string>& tops) {
  std::vector<std::string> out;
  for (const std::string& top : tops) {
    if (!fs::exists(kRoot / top)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(kRoot / top)) {
      if (!entry.is_regular_file()) continue;
      const std::string ext = entry.path().extension().string();
      if (ext == ".h" || ext == ".cc" || ext == ".c" || ext == ".cu" || ext == ".def") {
        out.push_back(Relative(entry.path()));
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// ---------------------------------------------------------------------------------------------
// The parts table of docs/architecture.md: | part | folders | library | may use | ... |

struct Part {
  std::string name;
  std::vector<std::string> folders;  // "src/core/", "include/tessera/"
  std::set<std::string> may_use;
};

std::vector<std::string> Cells(const std::string& row) {
  std::vector<std::string> cells;
  std::stringstream in(row);
  std::string cell;
  std::getline(in, cell, '|');  // before the first bar
  while (std::getline(in, cell, '|')) {
    const auto b = cell.find_first_not_of(' ');
    const auto e = cell.find_last_not_of(' ');
    cells.push_back(b == std::string::npos ? "" : cell.substr(b, e - b + 1));
  }
  return cells;
}

std::map<std::string, Part> LoadParts() {
  std::map<std::string, Part> parts;
  std::stringstream doc(Slurp(kRoot / "docs/architecture.md"));
  std::string line;
  bool in_table = false;
  const std::regex backticked("`([^`]+)`");
  while (std::getline(doc, line)) {
    if (line.rfind("| part | folders | library | may use |", 0) == 0) {
      in_table = true;
      continue;
    }
    if (!in_table) continue;
    if (line.rfind("|", 0) != 0) break;
    if (line.rfind("|---", 0) == 0) continue;
    const std::vector<std::string> cells = Cells(line);
    if (cells.size() < 4) continue;
    Part p;
    p.name = cells[0];
    for (std::sregex_iterator it(cells[1].begin(), cells[1].end(), backticked), end; it != end;
         ++it) {
      p.folders.push_back((*it)[1]);
    }
    std::stringstream uses(cells[3]);
    std::string use;
    while (std::getline(uses, use, ',')) {
      use.erase(0, use.find_first_not_of(' '));
      use.erase(use.find_last_not_of(' ') + 1);
      if (!use.empty() && use != "—" && use != "-") p.may_use.insert(use);
    }
    parts[p.name] = p;
  }
  return parts;
}

// The part that owns a repository path, "" if none.
std::string OwnerOf(const std::map<std::string, Part>& parts, const std::string& rel) {
  std::string best;
  std::size_t best_len = 0;
  for (const auto& [name, part] : parts) {
    for (const std::string& folder : part.folders) {
      if (rel.rfind(folder, 0) == 0 && folder.size() > best_len) {
        best = name;
        best_len = folder.size();
      }
    }
  }
  return best;
}

// Folders of test code that product code may never include.
const std::set<std::string> kTestIncludeRoots = {
    "testutil", "e2e", "fakes", "helm", "images", "integration", "fuzz", "architecture"};

TEST(Architecture, ThePartsTableNamesEveryFolderOfSrcAndCmd) {
  const auto parts = LoadParts();
  ASSERT_GE(parts.size(), 10u) << "no parts table found in docs/architecture.md";
  for (const char* top : {"src", "cmd"}) {
    for (const auto& entry : fs::directory_iterator(kRoot / top)) {
      if (!entry.is_directory()) continue;
      const std::string rel = Relative(entry.path()) + "/";
      EXPECT_NE(OwnerOf(parts, rel), "") << rel << " belongs to no part in docs/architecture.md";
    }
  }
  for (const auto& [name, part] : parts) {
    for (const std::string& use : part.may_use) {
      EXPECT_TRUE(parts.count(use)) << name << " may use \"" << use << "\", which is no part";
    }
    for (const std::string& folder : part.folders) {
      EXPECT_TRUE(fs::exists(kRoot / folder)) << name << ": " << folder << " does not exist";
    }
  }
}

TEST(Architecture, EachPartIncludesOnlyThePartsItMayUse) {
  const auto parts = LoadParts();
  ASSERT_FALSE(parts.empty());
  // "tessera/x.h" is core's public header; a first folder that is no part and no test folder is
  // generated code (kubelet's gRPC stubs, the Go RNG table).
  std::map<std::string, std::string> include_root_to_part;
  for (const auto& [name, part] : parts) {
    for (const std::string& folder : part.folders) {
      if (folder.rfind("cmd/", 0) == 0) continue;  // programs: nothing includes them
      const fs::path f(folder);
      auto it = f.begin();
      ++it;  // past "src" or "include"
      if (it != f.end()) include_root_to_part[it->string()] = name;
    }
  }
  const std::regex include_re(R"(^\s*#\s*include\s+"([A-Za-z0-9_]+)/)");
  int checked = 0;
  for (const std::string& rel : SourcesUnder({"src", "cmd", "include"})) {
    const std::string owner = OwnerOf(parts, rel);
    if (owner.empty() || IsTestCode(rel)) continue;
    std::stringstream in(Slurp(kRoot / rel));
    std::string line;
    int line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      std::smatch m;
      if (!std::regex_search(line, m, include_re)) continue;
      const std::string root = m[1];
      ++checked;
      EXPECT_FALSE(kTestIncludeRoots.count(root))
          << rel << ":" << line_no << ": product code includes test code: " << line;
      auto target = include_root_to_part.find(root);
      if (target == include_root_to_part.end() || target->second == owner) continue;
      EXPECT_TRUE(parts.at(owner).may_use.count(target->second))
          << rel << ":" << line_no << ": part " << owner << " includes part " << target->second
          << " (" << line << "), but its row in docs/architecture.md does not list it";
    }
  }
  EXPECT_GT(checked, 100);
}

// Every product source compiled without test/ on its include path (CMake's view, from the build's
// compile_commands.json): a product target that links test code shows up here.
TEST(Architecture, ProductTargetsHaveNoTestIncludePath) {
  const fs::path db = fs::path(TESSERA_BINARY_DIR) / "compile_commands.json";
  ASSERT_TRUE(fs::exists(db)) << db;
  const std::string text = Slurp(db);
  const std::string test_dir = (kRoot / "test").generic_string();
  const std::regex entry_re(R"re("command":\s*"([^"]*)",\s*"file":\s*"([^"]*)")re");
  int product = 0;
  for (std::sregex_iterator it(text.begin(), text.end(), entry_re), end; it != end; ++it) {
    const std::string command = (*it)[1];
    const std::string file = (*it)[2];
    if (file.rfind(kRoot.generic_string() + "/", 0) != 0) continue;  // generated
    const std::string rel = Relative(file);
    if (IsTestCode(rel) || rel.rfind("src/", 0) != 0) continue;
    ++product;
    std::stringstream words(command);
    std::string word;
    std::string previous;
    while (words >> word) {
      const bool flag_and_path = word == "-I" + test_dir || word == "-isystem" + test_dir;
      const bool path_after_flag = (previous == "-I" || previous == "-isystem") && word == test_dir;
      EXPECT_FALSE(flag_and_path || path_after_flag)
          << rel << " is compiled with test/ on its include path";
      previous = word;
    }
  }
  EXPECT_GT(product, 50);
}

// ---------------------------------------------------------------------------------------------
// One definition of each shared helper.

struct Helper {
  const char* name;
  const char* the_one;            // where it lives
  const char* pattern;            // what a second definition looks like
  std::set<std::string> allowed;  // the one definition (and documented exceptions)
  bool product_only;              // tests may do it (e.g. a test forking to exercise fork handling)
};

std::vector<Helper> Helpers() {
  return {
      {"reading a file",
       "tessera::ReadFile (include/tessera/file.h)",
       R"((std::ifstream|\bifstream\b|istreambuf_iterator|\b(?!cin\.)\w+\.rdbuf\(\)|fopen\([^)]*"r"|\b(StatusOr<std::string>|std::string)\s+(ReadFile|ReadSmallFile|Slurp|ReadAll|ReadWhole\w*)\s*\())",
       // the one reader, and the preload library's allocation-free reader (src/hook/ may not
       // allocate while it reads inside a tenant's process)
       {"src/core/file.cc", "include/tessera/file.h", "src/hook/config.cc"},
       true},
      {"reading fields of an API object",
       "k8s::Find / StringAt / AnnotationOf (src/k8s/object.h)",
       R"(^\s*(inline\s+)?(static\s+)?[\w:<>\*\s]+[\s\*](\w+)\(const\s+(nlohmann::)?(json|Json)&\s*\w+,\s*(std::string_view|const char\*|const std::string&)\s*(key|field)\)\s*(const\s*)?\{)",
       {"src/k8s/object.h"},
       false},
      {"OpenSSL deleters",
       "src/k8s/openssl.h",
       R"(\b(EVP_PKEY|X509|BIO|EVP_MD_CTX|X509_STORE|X509_STORE_CTX|BN|EVP_PKEY_CTX|X509_EXTENSION|SSL_CTX|X509_NAME|X509_REQ|sk_X509_pop)_free\b)",
       {"src/k8s/openssl.h"},
       false},
      {"spawning a child",
       "tessera::Spawn (include/tessera/subprocess.h)",
       R"(\b(fork|vfork|posix_spawnp?|execve|execvp|execvpe|execv|execl|execlp)\s*\()",
       // the one spawner; the agent's GPU probe forks without exec (CUDA is initialised in a
       // child of the same binary, so a crash or hang of the driver cannot take the agent down)
       {"src/core/subprocess.cc", "src/agent/local_gpu.cc"},
       true},
  };
}

TEST(Architecture, EachSharedHelperHasOneDefinition) {
  std::vector<std::string> files = SourcesUnder({"src", "cmd", "include", "test", "bench"});
  ASSERT_GT(files.size(), 100u);
  std::erase(files, "test/architecture/architecture_test.cc");  // its own examples, below
  for (const Helper& h : Helpers()) {
    const std::regex re(h.pattern);
    for (const std::string& rel : files) {
      if (h.allowed.count(rel) || (h.product_only && IsTestCode(rel))) continue;
      std::stringstream in(Slurp(kRoot / rel));
      std::string line;
      int line_no = 0;
      while (std::getline(in, line)) {
        ++line_no;
        const auto comment = line.find("//");
        const std::string code = comment == std::string::npos ? line : line.substr(0, comment);
        EXPECT_FALSE(std::regex_search(code, re))
            << rel << ":" << line_no << ": a second copy of " << h.name << " (use " << h.the_one
            << "): " << line;
      }
    }
  }
}

// The checks above must be able to fail: each pattern matches a typical second copy.
TEST(Architecture, HelperPatternsMatchTypicalCopies) {
  const std::map<std::string, std::vector<std::string>> copies = {
      {"reading a file",
       {"  std::ifstream in(path);", "  text << in.rdbuf();",
        "StatusOr<std::string> ReadFile(const std::string& path) {",
        "std::string Slurp(const std::string& path) {", "  FILE* f = std::fopen(p, \"r\");"}},
      {"reading fields of an API object",
       {"std::string StringField(const Json& object, const char* key) {",
        "const Json* Child(const Json& object, std::string_view key) {",
        "inline const nlohmann::json* Find(const nlohmann::json& object, std::string_view key) {"}},
      {"OpenSSL deleters",
       {"  void operator()(X509* x) const { X509_free(x); }", "EVP_PKEY_free(key);"}},
      {"spawning a child",
       {"  const pid_t pid = fork();", "    execvp(argv[0], argv);",
        "  posix_spawnp(&pid, file, nullptr, nullptr, argv, envp);"}},
  };
  for (const Helper& h : Helpers()) {
    const std::regex re(h.pattern);
    for (const std::string& copy : copies.at(h.name)) {
      EXPECT_TRUE(std::regex_search(copy, re)) << h.name << " does not catch: " << copy;
    }
  }
  const std::regex reader(Helpers()[0].pattern);
  EXPECT_FALSE(std::regex_search(std::string("  std::ofstream(path) << text;"), reader));
  EXPECT_FALSE(std::regex_search(std::string("  in << std::cin.rdbuf();"), reader));
}

// ---------------------------------------------------------------------------------------------
// Paths named in the docs exist.

// "docs/design/0012" names ADR 0012 (docs/design/0012-scheduler-extender.md); "src/agent/nvml"
// (in "src/agent/nvml.{h,cc}") names a unit, bench/sim_bench a program built from sim_bench.cc.
bool NamesAFileByItsStem(const fs::path& path) {
  const std::string stem = path.filename().string();
  if (stem.empty() || !fs::is_directory(path.parent_path())) return false;
  const bool adr = stem.size() == 4 && std::all_of(stem.begin(), stem.end(), ::isdigit);
  for (const auto& entry : fs::directory_iterator(path.parent_path())) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(stem + (adr ? "-" : "."), 0) == 0) return true;
  }
  return false;
}

TEST(Architecture, EveryPathTheDocsNameExists) {
  std::vector<fs::path> docs = {kRoot / "README.md", kRoot / "CONTRIBUTING.md"};
  for (const auto& entry : fs::recursive_directory_iterator(kRoot / "docs")) {
    if (entry.path().extension() == ".md") docs.push_back(entry.path());
  }
  // A repository path: one of the top folders, then path characters. Placeholders (<name>, *,
  // {a,b}, NNNN, ...) are skipped; ":123" line suffixes and trailing punctuation are dropped.
  const std::regex path_re(
      R"((?:^|[\s`(\[])((?:src|include|cmd|test|hack|deployments|api|bench|cmake|docs)/[A-Za-z0-9_./\-]*[A-Za-z0-9_/]))");
  int checked = 0;
  for (const fs::path& doc : docs) {
    std::stringstream in(Slurp(doc));
    std::string line;
    int line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      for (std::sregex_iterator it(line.begin(), line.end(), path_re), end; it != end; ++it) {
        std::string path = (*it)[1];
        const std::size_t after = static_cast<std::size_t>(it->position(1) + it->length(1));
        if (after < line.size() &&
            (line[after] == '<' || line[after] == '*' || line[after] == '{' || line[after] == '$' ||
             line[after] == '[')) {
          continue;  // a pattern, not a path
        }
        if (path.find("NNNN") != std::string::npos || path.find("...") != std::string::npos) {
          continue;
        }
        ++checked;
        // Links inside docs/ are relative to the doc; everything else to the repository root.
        const bool exists = fs::exists(kRoot / path) || fs::exists(doc.parent_path() / path) ||
                            NamesAFileByItsStem(kRoot / path);
        EXPECT_TRUE(exists) << Relative(doc) << ":" << line_no << ": names " << path
                            << ", which does not exist";
      }
    }
  }
  EXPECT_GT(checked, 50);
}

}  // namespace
}  // namespace tessera
