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

TEST(Diagnostics, ErrorsSinceCountOnlyThoseAddedAfterTheMark) {
  // Expectation: a reader that appends to a list already holding an error sees only its own: an
  // error before the mark is not one since it, a warning after it is not an error, an error after
  // it is; a mark at or past the end finds nothing.
  Diagnostics d;
  d.error("a.yaml", 1, 1, "x", "bad");
  const size_t mark = d.items().size();
  EXPECT_TRUE(d.has_errors());
  EXPECT_FALSE(d.has_errors_since(mark));
  d.warning("b.yaml", 2, 1, "y", "odd");
  EXPECT_FALSE(d.has_errors_since(mark));
  d.error("b.yaml", 3, 1, "z", "bad too");
  EXPECT_TRUE(d.has_errors_since(mark));
  EXPECT_FALSE(d.has_errors_since(d.items().size()));
  EXPECT_FALSE(d.has_errors_since(100));
}

TEST(ClosestMatch, FindsNearKeysOnly) {
  const std::vector<std::string> keys = {"layers", "hidden", "heads", "vocab", "seq_len"};
  EXPECT_EQ(closest_match("hiden", keys), "hidden");
  EXPECT_EQ(closest_match("layer", keys), "layers");
  EXPECT_EQ(closest_match("completely_else", keys), "");
}
