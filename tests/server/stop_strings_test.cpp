#include "server/stop_strings.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace fp4serve::server {
namespace {

// Feeds `pieces` and returns what a client would have received.
std::string run(StopMatcher& m, const std::vector<std::string>& pieces) {
  std::string out;
  for (const std::string& p : pieces) out += m.push(p).text;
  if (!m.stopped()) out += m.flush();
  return out;
}

TEST(StopMatcher, NoStopsPassesEverythingThrough) {
  StopMatcher m({});
  EXPECT_EQ(m.push("abc").text, "abc");
  EXPECT_EQ(m.push("").text, "");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, StopInsideOnePieceCutsBeforeIt) {
  StopMatcher m({"STOP"});
  const auto r = m.push("helloSTOPworld");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "hello");
  EXPECT_EQ(m.matched(), "STOP");
  EXPECT_EQ(m.push("more").text, "");
}

TEST(StopMatcher, StopSplitAcrossPiecesIsNeverLeaked) {
  StopMatcher m({"END!"});
  std::string seen;
  for (const char* p : {"ab", "cE", "N", "D", "!", "tail"}) {
    const auto r = m.push(p);
    seen += r.text;
    EXPECT_EQ(seen.find('E'), std::string::npos) << "leaked part of the stop string: " << seen;
  }
  EXPECT_EQ(seen, "abc");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, FalseStartIsReleasedWhenItCannotMatch) {
  StopMatcher m({"abc"});
  EXPECT_EQ(m.push("xa").text, "x");   // "a" might begin "abc"
  EXPECT_EQ(m.push("b").text, "");     // "ab" too
  EXPECT_EQ(m.push("d").text, "abd");  // not any more
  EXPECT_EQ(m.flush(), "");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, HeldTextIsFlushedAtTheEnd) {
  StopMatcher m({"</end>"});
  EXPECT_EQ(m.push("text</e").text, "text");
  EXPECT_EQ(m.flush(), "</e");
}

TEST(StopMatcher, EarliestOfSeveralStopsWins) {
  StopMatcher m({"world", "lo w"});
  const auto r = m.push("hello world");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "hel");
  EXPECT_EQ(m.matched(), "lo w");
}

TEST(StopMatcher, OverlappingPrefixesAreHeldForTheLongestCandidate) {
  // "aab" starts inside "aaab"; the matcher must not give up on it after the first 'a'.
  StopMatcher m({"aab"});
  EXPECT_EQ(run(m, {"a", "a", "a", "b", "c"}), "a");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, ConcatenationEqualsFullTextCutAtTheStop) {
  // Every way of splitting the text into two pieces yields the same client-visible output.
  const std::string text = "the quick brown fox jumps";
  for (std::size_t cut = 0; cut <= text.size(); ++cut) {
    StopMatcher m({"fox", "zzz"});
    EXPECT_EQ(run(m, {text.substr(0, cut), text.substr(cut)}), "the quick brown ") << cut;
  }
}

TEST(StopMatcher, TheStopThatCompletesFirstWinsHoweverTheTextIsCut) {
  // "abcdef" starts first but "cd" is complete two characters earlier: generation stops there.
  // (Found by fuzz/openai_request_fuzz.cpp: the result used to depend on the cut.)
  const std::string text = "xabcdefy";
  for (std::size_t cut = 0; cut <= text.size(); ++cut) {
    StopMatcher m({"abcdef", "cd"});
    EXPECT_EQ(run(m, {text.substr(0, cut), text.substr(cut)}), "xab") << cut;
    EXPECT_EQ(m.matched(), "cd") << cut;
  }
  StopMatcher same_end({"f", "def"});  // both end at 'f': the longest is cut
  EXPECT_EQ(run(same_end, {text}), "xabc");
}

TEST(StopMatcher, EmptyStopStringsAreIgnored) {
  StopMatcher m({"", "x"});
  EXPECT_EQ(m.push("abc").text, "abc");
}

}  // namespace
}  // namespace fp4serve::server
