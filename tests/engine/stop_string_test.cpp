#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "engine/sampler.h"

namespace specstack {
namespace {

// Pushes each chunk, returns everything emitted (push outputs, then flush).
std::string run(StopStringMatcher& matcher, const std::vector<std::string>& chunks) {
  std::string out;
  for (const std::string& chunk : chunks) out += matcher.push(chunk);
  return out + matcher.flush();
}

TEST(StopStringMatcher, NoStopsPassesEverythingThrough) {
  StopStringMatcher matcher({});
  EXPECT_EQ(matcher.push("hello "), "hello ");
  EXPECT_EQ(matcher.push("world"), "world");
  EXPECT_EQ(matcher.flush(), "");
  EXPECT_FALSE(matcher.stopped());
}

TEST(StopStringMatcher, EmptyStopStringIsIgnored) {
  StopStringMatcher matcher({""});
  EXPECT_EQ(matcher.push("abc"), "abc");
  EXPECT_FALSE(matcher.stopped());
}

TEST(StopStringMatcher, StopInsideOnePush) {
  StopStringMatcher matcher({"END"});
  EXPECT_EQ(matcher.push("abc END def"), "abc ");
  EXPECT_TRUE(matcher.stopped());
  EXPECT_EQ(matcher.push("more"), "");
  EXPECT_EQ(matcher.flush(), "");
}

TEST(StopStringMatcher, StopAtTheVeryStart) {
  StopStringMatcher matcher({"\n\n"});
  EXPECT_EQ(matcher.push("\n\nrest"), "");
  EXPECT_TRUE(matcher.stopped());
}

TEST(StopStringMatcher, StopSpanningPushesHoldsBackPrefix) {
  StopStringMatcher matcher({"</answer>"});
  EXPECT_EQ(matcher.push("42 </"), "42 ");  // "</" could start the stop
  EXPECT_FALSE(matcher.stopped());
  EXPECT_EQ(matcher.push("ans"), "");
  EXPECT_EQ(matcher.push("wer> trailing"), "");
  EXPECT_TRUE(matcher.stopped());
}

TEST(StopStringMatcher, HeldTextReleasedWhenItDoesNotMatch) {
  StopStringMatcher matcher({"</answer>"});
  EXPECT_EQ(matcher.push("a </an"), "a ");
  EXPECT_EQ(matcher.push("d b"), "</and b");
  EXPECT_FALSE(matcher.stopped());
  EXPECT_EQ(matcher.push("<"), "");
  EXPECT_EQ(matcher.flush(), "<");  // end of generation: nothing is held
}

TEST(StopStringMatcher, StopSplitOneCharacterPerPush) {
  StopStringMatcher matcher({"STOP"});
  const std::string text = "xxSTOPyy";
  std::string out;
  for (char c : text) out += matcher.push(std::string(1, c));
  EXPECT_EQ(out, "xx");
  EXPECT_TRUE(matcher.stopped());
}

TEST(StopStringMatcher, OverlappingCandidatePrefixes) {
  // "aab" after "aa": the held "aa" must not be dropped when the next "a"
  // shifts the candidate start by one.
  StopStringMatcher matcher({"aab"});
  EXPECT_EQ(matcher.push("xaa"), "x");
  EXPECT_EQ(matcher.push("a"), "a");  // "aaa": only the last "aa" can still match
  EXPECT_EQ(matcher.push("b!"), "");
  EXPECT_TRUE(matcher.stopped());

  StopStringMatcher abab({"abac"});
  EXPECT_EQ(run(abab, {"ab", "ab", "ac", "zz"}), "ab");
  EXPECT_TRUE(abab.stopped());
}

TEST(StopStringMatcher, MultipleStopsEarliestWins) {
  StopStringMatcher matcher({"world", "lo"});
  EXPECT_EQ(matcher.push("hello world"), "hel");
  EXPECT_TRUE(matcher.stopped());

  // The longest held prefix across stops: "Obs" is a prefix of the 2nd only.
  StopStringMatcher two({"User:", "Observation:"});
  EXPECT_EQ(two.push("answer. Obs"), "answer. ");
  EXPECT_EQ(two.push("ervation: x"), "");
  EXPECT_TRUE(two.stopped());
}

TEST(StopStringMatcher, MatchesStopWithMultibyteText) {
  StopStringMatcher matcher({"\xE3\x80\x82"});  // U+3002 ideographic full stop
  EXPECT_EQ(matcher.push("\xE4\xBD\xA0\xE5\xA5\xBD\xE3\x80"), "\xE4\xBD\xA0\xE5\xA5\xBD");
  EXPECT_EQ(matcher.push("\x82 more"), "");
  EXPECT_TRUE(matcher.stopped());
}

// Property check against a direct search: for random texts over a small
// alphabet, split at random points, the emitted text equals the text cut at
// the first stop occurrence, and nothing past a stop is ever emitted early.
TEST(StopStringMatcher, RandomSplitsMatchDirectSearch) {
  std::mt19937_64 rng(1234);
  const std::vector<std::string> stops = {"abca", "bb", "cab"};
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    const int length = static_cast<int>(rng() % 30);
    for (int i = 0; i < length; ++i) text += static_cast<char>('a' + rng() % 3);

    size_t cut = std::string::npos;
    for (const std::string& stop : stops) cut = std::min(cut, text.find(stop));
    const std::string expected = cut == std::string::npos ? text : text.substr(0, cut);

    StopStringMatcher matcher(stops);
    std::string emitted;
    size_t pos = 0;
    while (pos < text.size()) {
      const size_t n = 1 + rng() % 4;
      emitted += matcher.push(text.substr(pos, n));
      pos += n;
      ASSERT_EQ(expected.compare(0, emitted.size(), emitted), 0)
          << "emitted \"" << emitted << "\" is not a prefix of \"" << expected << "\"";
    }
    emitted += matcher.flush();
    ASSERT_EQ(emitted, expected) << "text \"" << text << "\"";
    ASSERT_EQ(matcher.stopped(), cut != std::string::npos) << "text \"" << text << "\"";
  }
}

}  // namespace
}  // namespace specstack
