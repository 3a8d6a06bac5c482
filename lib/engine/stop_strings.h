// Stop strings for streamed generation: text goes in piece by piece (as the
// tokens decode), and comes out as soon as it cannot be the start of a stop
// string. Text that could still grow into one is held back until the next
// piece settles it; once a stop string completes, the text before it is
// released and everything from the stop string on is dropped.
//
//   kx::StopStringMatcher stops({"\nUser:", "</s>"});
//   for (...) {
//     std::string out = stops.Push(utf8.Push(tok.TokenToPiece(id, false)));
//     Print(out);
//     if (stops.stopped()) break;
//   }
//   Print(stops.Push(utf8.Flush()));
//   if (!stops.stopped()) Print(stops.Flush());   // end of generation: release what was held
//
// Matching is on bytes. Fed whole UTF-8 characters (kx::Utf8Stream), the
// output is whole characters too: a held-back suffix matches the start of a
// stop string, which begins at a character boundary when it is valid UTF-8.
// Matching stops at the first Push after which the text so far contains a
// stop string; the output ends before the earliest occurrence in that text,
// whichever stop string it is. (With overlapping stop strings such as "b b b"
// and " b", a later piece could have completed one starting earlier: that
// piece is never seen, as generation ends at the first match.)
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kx {

class StopStringMatcher {
 public:
  // Empty strings are ignored (they would match everywhere). With no stop
  // strings Push returns its input unchanged.
  explicit StopStringMatcher(std::vector<std::string> stops);

  // Appends `text`; returns what can be shown now. After a stop string has
  // completed, stopped() is true and later calls return "".
  std::string Push(std::string_view text);
  // Releases the held-back text (an unfinished prefix of a stop string) at
  // the end of generation; "" once stopped.
  std::string Flush();

  bool stopped() const { return stopped_; }
  // Bytes held back right now (less than the longest stop string).
  size_t held() const { return pending_.size(); }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace kx
