// kairox-cli as a user runs it: flags, errors, --info, and generation with
// only the generated text on stdout.
#include <fstream>
#include <string>

#include "catch2/catch.hpp"
#include "run_program.h"
#include "test_util.h"

using kx::test::RunProgram;
using kx::test::ShellQuote;

namespace {
constexpr const char* kCli = "kairox-cli";

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}
}  // namespace

TEST_CASE("cli: --help and --version exit 0", "[cli]") {
  auto help = RunProgram(kCli, "--help", false);
  CHECK(help.exit_code == 0);
  CHECK(Contains(help.out, "--temp"));
  auto version = RunProgram(kCli, "--version", false);
  CHECK(version.exit_code == 0);
  CHECK(Contains(version.out, "kairox-cli "));
}

TEST_CASE("cli: argument errors exit 1 with a message on stderr", "[cli]") {
  auto missing = RunProgram(kCli, "-m /nonexistent/x.gguf -p hi", true);
  CHECK(missing.exit_code == 1);
  CHECK(Contains(missing.out, "/nonexistent/x.gguf"));
  auto unknown = RunProgram(kCli, "--frobnicate", true);
  CHECK(unknown.exit_code == 1);
  CHECK(Contains(unknown.out, "unknown argument"));
  auto no_value = RunProgram(kCli, "-n", true);
  CHECK(no_value.exit_code == 1);
  CHECK(Contains(no_value.out, "needs a value"));
  auto bad_int = RunProgram(kCli, "-n abc -p hi", true);
  CHECK(bad_int.exit_code == 1);
  CHECK(Contains(bad_int.out, "expects an integer"));
  // Nothing on stdout for errors.
  auto quiet = RunProgram(kCli, "-m /nonexistent/x.gguf -p hi", false);
  CHECK(quiet.out.empty());
}

TEST_CASE("cli: --info describes the default model", "[cli][model]") {
  const std::string model = kx::test::DefaultModelOrSkip();
  auto r = RunProgram(kCli, "--info -m " + ShellQuote(model), false);
  CHECK(r.exit_code == 0);
  CHECK(Contains(r.out, "llama.block_count"));
  CHECK(Contains(r.out, "token_embd.weight"));
  CHECK(Contains(r.out, "Q4_1"));
}

TEST_CASE("cli: greedy generation answers, with only the text on stdout", "[cli][model]") {
  const std::string model = kx::test::DefaultModelOrSkip();
  auto r = RunProgram(kCli,
                      "-m " + ShellQuote(model) +
                          " --chat --temp 0 -n 24 -t 2 -p 'What is the capital of France?'",
                      false);
  CHECK(r.exit_code == 0);
  CHECK(Contains(r.out, "Paris"));
  CHECK(!Contains(r.out, "t/s"));       // statistics go to stderr
  CHECK(!Contains(r.out, "<|im_end|>"));  // control tokens are not printed
  // Greedy decoding is reproducible run to run.
  auto again = RunProgram(kCli,
                          "-m " + ShellQuote(model) +
                              " --chat --temp 0 -n 24 -t 1 -p 'What is the capital of France?'",
                          false);
  CHECK(again.out == r.out);
}

TEST_CASE("cli: a prompt longer than the context is refused", "[cli][model]") {
  const std::string model = kx::test::DefaultModelOrSkip();
  std::string prompt;
  for (int i = 0; i < 40; ++i) prompt += "word ";
  auto r = RunProgram(kCli, "-m " + ShellQuote(model) + " -c 16 -p " + ShellQuote(prompt), true);
  CHECK(r.exit_code == 1);
  CHECK(Contains(r.out, "does not fit the context"));
}
