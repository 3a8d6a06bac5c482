// Unit tests of kx::StopStringMatcher: matches split across pieces, held-back
// prefixes released at the end, the earliest of several stop strings, UTF-8
// output in whole characters, and a randomized check against a plain find.
#include "engine/stop_strings.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "test_util.h"

namespace kx {
namespace {

struct Fed {
  std::vector<std::string> outputs;  // one per Push
  std::string all;                   // everything released, Flush included
  bool stopped = false;
};

// Feeds `pieces` in order, stopping like a generation loop does.
Fed Feed(const std::vector<std::string>& stops, const std::vector<std::string>& pieces) {
  StopStringMatcher m(stops);
  Fed f;
  for (const std::string& p : pieces) {
    f.outputs.push_back(m.Push(p));
    f.all += f.outputs.back();
    if (m.stopped()) break;
  }
  f.all += m.Flush();
  f.stopped = m.stopped();
  return f;
}

// True when `s` is a sequence of whole, well-formed UTF-8 characters.
bool WholeUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t len = c < 0x80           ? 1
                       : (c >> 5) == 0x6  ? 2
                       : (c >> 4) == 0xE  ? 3
                       : (c >> 3) == 0x1E ? 4
                                          : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += len;
  }
  return true;
}

}  // namespace

TEST_CASE("stop strings: a match split across pieces", "[stop]") {
  const Fed f = Feed({"</answer>"}, {"The answer is 4", "2.</an", "sw", "er> and more", "never"});
  CHECK(f.stopped);
  CHECK(f.all == "The answer is 42.");
  REQUIRE(f.outputs.size() == 4);
  CHECK(f.outputs[0] == "The answer is 4");
  CHECK(f.outputs[1] == "2.");  // "</an" held back
  CHECK(f.outputs[2].empty());  // "</answ" still a prefix
  CHECK(f.outputs[3].empty());  // the match: nothing after "2." is shown
}

TEST_CASE("stop strings: a held-back prefix that does not complete is released", "[stop]") {
  StopStringMatcher m({"STOP"});
  CHECK(m.Push("abc ST") == "abc ");
  CHECK(m.held() == 2);
  CHECK(m.Push("O") == "");
  CHECK(m.Push("P!") == "");
  CHECK(m.stopped());
  CHECK(m.Push("more") == "");  // after a stop nothing comes out
  CHECK(m.Flush() == "");

  StopStringMatcher n({"STOP"});
  CHECK(n.Push("abc ST") == "abc ");
  CHECK(n.Push("OMP") == "STOMP");  // diverged: released at once
  CHECK(n.Push("STO") == "");
  CHECK(!n.stopped());
  CHECK(n.Flush() == "STO");  // end of generation: the partial prefix is text
  CHECK(n.held() == 0);
}

TEST_CASE("stop strings: overlapping prefixes and the earliest match", "[stop]") {
  // "aab": after "aa" a failed "aaa" must keep the last two a's.
  StopStringMatcher m({"aab"});
  CHECK(m.Push("xaa") == "x");
  CHECK(m.Push("a") == "a");
  CHECK(m.Push("b") == "");
  CHECK(m.stopped());
  // Two stop strings: the one that starts first in the text wins.
  const Fed f = Feed({"world", "lo w"}, {"hel", "lo wor", "ld"});
  CHECK(f.stopped);
  CHECK(f.all == "hel");
  // The longest possible prefix among several is held.
  StopStringMatcher k({"xyz", "yzzz"});
  CHECK(k.Push("ayz") == "a");
  CHECK(k.held() == 2);
}

TEST_CASE("stop strings: none, or empty ones, pass text through", "[stop]") {
  StopStringMatcher none({});
  CHECK(none.Push("anything at all") == "anything at all");
  StopStringMatcher empty({"", ""});
  CHECK(empty.Push("text") == "text");
  CHECK(!empty.stopped());
  CHECK(empty.Flush().empty());
}

TEST_CASE("stop strings: UTF-8 output comes in whole characters", "[stop]") {
  // "→ Ende" and "日本": multi-byte stop strings, pieces split at character
  // boundaries (as kx::Utf8Stream delivers them).
  const std::vector<std::string> stops = {"\xE2\x86\x92 Ende", "\xE6\x97\xA5\xE6\x9C\xAC"};
  const std::vector<std::string> pieces = {
      "Gr\xC3\xBC\xC3\x9F", "e \xE2\x86\x92", " En", "\xF0\x9F\x98\x80",
      "\xE6\x97\xA5",       "\xE6\x9C\xAC!",  "tail"};
  StopStringMatcher m(stops);
  std::string all;
  for (const std::string& p : pieces) {
    const std::string out = m.Push(p);
    INFO(out);
    CHECK(WholeUtf8(out));
    all += out;
    if (m.stopped()) break;
  }
  CHECK(m.stopped());
  // "→ En" was held, then released when the emoji broke the match.
  CHECK(all ==
        "Gr\xC3\xBC\xC3\x9F"
        "e \xE2\x86\x92 En\xF0\x9F\x98\x80");
}

TEST_CASE("stop strings: random texts and splits agree with a plain find", "[stop]") {
  auto rng = test::SeededRng(2024);
  // A small alphabet so stop strings occur, partially occur and overlap often.
  const std::string alphabet = "ab\xC3\xA9 ";  // a, b, é, space
  auto random_text = [&](size_t chars) {
    std::string s;
    for (size_t i = 0; i < chars; ++i) {
      const size_t pick = rng() % 4;
      s += pick == 2 ? std::string("\xC3\xA9") : std::string(1, alphabet[pick == 3 ? 4 : pick]);
    }
    return s;
  };
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<std::string> stops;
    const size_t n_stops = 1 + rng() % 3;
    size_t longest = 0;
    for (size_t i = 0; i < n_stops; ++i) {
      stops.push_back(random_text(1 + rng() % 4));
      longest = std::max(longest, stops.back().size());
    }
    const std::string text = random_text(rng() % 40);
    // Split at character boundaries into pieces of 0-3 characters.
    std::vector<std::string> pieces;
    for (size_t i = 0; i < text.size();) {
      size_t end = i;
      for (size_t k = rng() % 4; k > 0 && end < text.size(); --k) {
        end += (static_cast<unsigned char>(text[end]) >= 0xC0) ? 2 : 1;
      }
      pieces.push_back(text.substr(i, end - i));
      i = end;
    }
    // Reference: the generation stops after the first piece that completes a
    // stop string; the text ends before the earliest occurrence in all that
    // was pushed so far (with overlapping stop strings, a later piece could
    // complete one that starts earlier, but generation has stopped by then).
    size_t first = std::string::npos;
    std::string so_far;
    for (const std::string& p : pieces) {
      so_far += p;
      for (const std::string& s : stops) first = std::min(first, so_far.find(s));
      if (first != std::string::npos) break;
    }
    StopStringMatcher m(stops);
    std::string all;
    for (const std::string& p : pieces) {
      const std::string out = m.Push(p);
      REQUIRE(WholeUtf8(out));
      REQUIRE(m.held() < longest);
      all += out;
      if (m.stopped()) break;
    }
    const bool stopped = m.stopped();
    all += m.Flush();
    INFO("trial " << trial << " text '" << text << "'");
    REQUIRE(stopped == (first != std::string::npos));
    REQUIRE(all == text.substr(0, first));
  }
}

}  // namespace kx
