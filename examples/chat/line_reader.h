// kairox-chat's input line at a terminal: libedit (Debian's libedit-dev) for line editing
// (arrows, Home/End, Ctrl-A/E/K/W, ~/.editrc) and a history kept across sessions.
//
// History: the last kHistoryLines entered lines, in $KAIROX_CHAT_HISTORY if set (empty or
// "off": no history file, only this session's lines), else $XDG_STATE_HOME/kairox/chat_history,
// else ~/.local/state/kairox/chat_history. The file is created private (0600), rewritten after
// each line; a file that cannot be read or written is ignored (once, with a warning).
//
// Ctrl-C while a line is being edited discards it and Read returns kInterrupted: the terminal's
// signal keys are turned off while libedit edits (it gets ^C as a key), so no SIGINT reaches
// the program then and the handler for a running turn is left alone. Outside Read the
// terminal is as it was (libedit restores it), so Ctrl-C is a SIGINT as before.
// Ctrl-D on an empty line is kEof.
#pragma once

#include <string>

struct editline;
struct history;

namespace kx::chat {

inline constexpr int kHistoryLines = 1000;

// The history file as described above; "" when disabled or no home is known.
std::string HistoryPath();

class LineReader {
 public:
  enum class Result { kLine, kInterrupted, kEof };

  // Edits on stdin/stdout (a terminal); `program` names the editrc section ("kairox-chat").
  explicit LineReader(const char* program);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // Shows `prompt` and reads one line, without its newline.
  Result Read(const char* prompt, std::string* line);
  // Adds `line` to the history (and the history file).
  void Remember(const std::string& line);

 private:
  static unsigned char OnCtrlC(editline* el, int ch);
  static const char* Prompt(editline* el);

  editline* el_ = nullptr;
  history* hist_ = nullptr;
  std::string path_;
  std::string prompt_;
  bool interrupted_ = false;
  bool warned_ = false;
};

}  // namespace kx::chat
