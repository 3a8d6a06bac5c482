// Runs one of kairox's programs from build/bin and captures its output.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "test_util.h"

namespace kx::test {

struct ProgramResult {
  int exit_code = -1;  // -1: did not exit normally
  std::string out;     // stdout (and stderr when merged)
};

// Quotes `s` for /bin/sh.
inline std::string ShellQuote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q += c;
    }
  }
  return q + "'";
}

// Runs KAIROX_BIN_DIR/<program> <args> (args already quoted). With
// merge_stderr, stderr is captured too; otherwise it is discarded.
inline ProgramResult RunProgram(const std::string& program, const std::string& args,
                                bool merge_stderr) {
  const std::string bin = EnvOr("KAIROX_BIN_DIR", ".") + "/" + program;
  const std::string cmd = ShellQuote(bin) + " " + args + (merge_stderr ? " 2>&1" : " 2>/dev/null");
  ProgramResult r;
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  if (status != -1 && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  return r;
}

}  // namespace kx::test
