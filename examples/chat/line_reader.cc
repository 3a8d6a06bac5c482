#include "chat/line_reader.h"

#include <fcntl.h>
#include <histedit.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <clocale>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace kx::chat {
namespace {

// Creates `dir` and its missing parents, private to the user (mkdir -p, mode 0700).
bool MakeDirs(const std::string& dir) {
  if (dir.empty()) return true;
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) return S_ISDIR(st.st_mode);
  const size_t slash = dir.find_last_of('/');
  if (slash != std::string::npos && slash > 0 && !MakeDirs(dir.substr(0, slash))) return false;
  return ::mkdir(dir.c_str(), 0700) == 0 || errno == EEXIST;
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

}  // namespace

std::string HistoryPath() {
  if (const char* v = std::getenv("KAIROX_CHAT_HISTORY"); v != nullptr) {
    const std::string path = v;
    return path == "off" ? "" : path;
  }
  std::string state = Env("XDG_STATE_HOME");
  if (state.empty() || state[0] != '/') {  // relative: invalid per the XDG spec, ignored
    const std::string home = Env("HOME");
    if (home.empty()) return "";
    state = home + "/.local/state";
  }
  return state + "/kairox/chat_history";
}

LineReader::LineReader(const char* program) : path_(HistoryPath()) {
  // libedit decodes multibyte input by the locale: UTF-8 when the environment names none.
  if (const char* loc = std::setlocale(LC_CTYPE, ""); loc == nullptr ||
      std::strcmp(loc, "C") == 0 || std::strcmp(loc, "POSIX") == 0) {
    std::setlocale(LC_CTYPE, "C.UTF-8");
  }
  hist_ = history_init();
  HistEvent ev;
  history(hist_, &ev, H_SETSIZE, kHistoryLines);
  history(hist_, &ev, H_SETUNIQUE, 1);  // a line repeated at once is kept once
  if (!path_.empty() && ::access(path_.c_str(), F_OK) == 0 &&
      history(hist_, &ev, H_LOAD, path_.c_str()) < 0) {
    std::fprintf(stderr, "kairox-chat: warning: cannot read the history %s\n", path_.c_str());
    warned_ = true;
  }

  el_ = el_init(program, stdin, stdout, stderr);
  el_set(el_, EL_CLIENTDATA, this);
  el_set(el_, EL_EDITOR, "emacs");
  el_set(el_, EL_HIST, history, hist_);
  el_source(el_, nullptr);  // ~/.editrc (or $EDITRC), as other libedit programs read it
  // After the user's editrc, so these hold: the signal keys are keys while editing, and
  // Ctrl-C discards the line.
  el_set(el_, EL_SIGNAL, 0);
  el_set(el_, EL_SETTY, "-d", "-isig", nullptr);
  el_set(el_, EL_ADDFN, "kx-interrupt", "discard the line (Ctrl-C)", &LineReader::OnCtrlC);
  el_set(el_, EL_BIND, "^C", "kx-interrupt", nullptr);
  el_set(el_, EL_PROMPT, &LineReader::Prompt);
}

LineReader::~LineReader() {
  el_end(el_);  // restores the terminal
  history_end(hist_);
}

unsigned char LineReader::OnCtrlC(editline* el, int /*ch*/) {
  void* self = nullptr;
  el_get(el, EL_CLIENTDATA, &self);
  static_cast<LineReader*>(self)->interrupted_ = true;
  // As a shell shows it: "^C" after the whole line, then a newline (a pushed Return, so
  // libedit ends the line itself, however many rows it spans); Read drops the line.
  const LineInfo* li = el_line(el);
  el_cursor(el, static_cast<int>(li->lastchar - li->cursor));
  el_insertstr(el, "^C");
  el_push(el, "\r");
  return CC_REFRESH;
}

const char* LineReader::Prompt(editline* el) {
  void* self = nullptr;
  el_get(el, EL_CLIENTDATA, &self);
  return static_cast<LineReader*>(self)->prompt_.c_str();
}

LineReader::Result LineReader::Read(const char* prompt, std::string* line) {
  prompt_ = prompt;
  interrupted_ = false;
  std::fflush(stdout);
  int count = 0;
  const char* text = el_gets(el_, &count);
  if (interrupted_) return Result::kInterrupted;
  if (text == nullptr || count <= 0) return Result::kEof;
  line->assign(text, static_cast<size_t>(count));
  if (!line->empty() && line->back() == '\n') line->pop_back();
  return Result::kLine;
}

void LineReader::Remember(const std::string& line) {
  HistEvent ev;
  history(hist_, &ev, H_ENTER, line.c_str());
  if (path_.empty()) return;
  const size_t slash = path_.find_last_of('/');
  bool ok = slash == std::string::npos || MakeDirs(path_.substr(0, slash));
  if (ok) {
    // Private from the start: H_SAVE rewrites the file and keeps its mode.
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    ok = fd >= 0;
    if (fd >= 0) ::close(fd);
  }
  ok = ok && history(hist_, &ev, H_SAVE, path_.c_str()) >= 0;
  if (!ok && !warned_) {
    std::fprintf(stderr, "kairox-chat: warning: cannot write the history %s: %s\n",
                 path_.c_str(), std::strerror(errno));
    warned_ = true;
  }
}

}  // namespace kx::chat
