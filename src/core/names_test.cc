#include "tessera/names.h"

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace tessera::names {
namespace {

TEST(Names, AreUniqueAndInTheDomain) {
  std::set<std::string_view> seen;
  for (const NameInfo& n : kAllNames) {
    EXPECT_TRUE(seen.insert(n.value).second) << "duplicate name " << n.value;
    EXPECT_FALSE(n.description.empty()) << n.value;
    if (n.kind == "resource" || n.kind == "label") {
      EXPECT_EQ(n.value.rfind("tessera.dev/", 0), 0u) << n.value;
    }
    if (n.kind == "path") {
      EXPECT_EQ(n.value.front(), '/') << n.value;
    }
  }
}

// docs/protocol.md must list every name, in backticks, so the document cannot drift.
TEST(Names, EveryNameIsDocumentedInProtocolMd) {
  std::ifstream in(TESSERA_PROTOCOL_MD);
  ASSERT_TRUE(in.good()) << "cannot read " << TESSERA_PROTOCOL_MD;
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string doc = buffer.str();
  for (const NameInfo& n : kAllNames) {
    const std::string quoted = "`" + std::string(n.value) + "`";
    EXPECT_NE(doc.find(quoted), std::string::npos)
        << n.kind << " " << n.value << " is missing from docs/protocol.md";
  }
}

}  // namespace
}  // namespace tessera::names
