#include <gtest/gtest.h>

#include "planner/diagnostics.h"

using namespace capplan;

TEST(Diagnostics, FormatsFileLineColumnPathAndHint) {
  Diagnostics d;
  d.error("m.yaml", 3, 5, "model.hiden", "unknown key", "did you mean 'hidden'?");
  ASSERT_TRUE(d.has_errors());
  // Expectation: the form compilers use, so editors can jump to the place.
  EXPECT_EQ(d.items()[0].to_string(), "m.yaml:3:5: error: model.hiden: unknown key (did you mean 'hidden'?)");
}

TEST(Diagnostics, WarningsAloneAreNotErrors) {
  Diagnostics d;
  d.warning("c.yaml", 1, 1, "", "price unknown");
  EXPECT_FALSE(d.has_errors());
}

TEST(ClosestMatch, FindsNearKeysOnly) {
  const std::vector<std::string> keys = {"layers", "hidden", "heads", "vocab", "seq_len"};
  EXPECT_EQ(closest_match("hiden", keys), "hidden");
  EXPECT_EQ(closest_match("layer", keys), "layers");
  EXPECT_EQ(closest_match("completely_else", keys), "");
}
