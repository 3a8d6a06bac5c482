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
  // Integers that do not fit where they go are refused, never truncated (-c 4294967552 once
  // ran with n_ctx 256, -t 4294967296 with the default, -n -5 as -1).
  for (const char* bad : {"-c 4294967552", "-t 4294967296", "-n -5", "-t -1",
                          "--top-k 99999999999"}) {
    auto r = RunProgram(kCli, std::string(bad) + " -m /nonexistent/x.gguf -p hi", true);
    INFO(bad << " → " << r.out);
    CHECK(r.exit_code == 1);
    CHECK(Contains(r.out, "expects an integer"));
  }
  // Sampling parameters out of range are refused before the model loads, naming the range.
  for (const char* bad : {"--min-p 2", "--min-p -1", "--top-p 1.5", "--temp nan",
                          "--repeat-penalty 0"}) {
    auto r = RunProgram(kCli, std::string(bad) + " -m /nonexistent/x.gguf -p hi", true);
    INFO(bad << " → " << r.out);
    CHECK(r.exit_code == 1);
    CHECK(Contains(r.out, "out of range"));
  }
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

TEST_CASE("cli: --logit-bias and --stop are checked before loading", "[cli]") {
  auto help = RunProgram(kCli, "--help", false);
  for (const char* flag : {"--logit-bias", "--stop", "--no-mmap", "--mlock"}) {
    CHECK(Contains(help.out, flag));
  }
  auto bad_bias = RunProgram(kCli, "-m /nonexistent/x.gguf -p hi --logit-bias 5+1,7*2", true);
  CHECK(bad_bias.exit_code == 1);
  CHECK(Contains(bad_bias.out, "--logit-bias"));
  CHECK(Contains(bad_bias.out, "'7*2'"));
  auto empty_stop = RunProgram(kCli, "-m /nonexistent/x.gguf -p hi --stop ''", true);
  CHECK(empty_stop.exit_code == 1);
  CHECK(Contains(empty_stop.out, "--stop"));
  auto no_mmap_missing = RunProgram(kCli, "-m /nonexistent/x.gguf -p hi --no-mmap", true);
  CHECK(no_mmap_missing.exit_code == 1);
  CHECK(Contains(no_mmap_missing.out, "/nonexistent/x.gguf"));
}

TEST_CASE("cli: --no-mmap and --mlock generate the same text", "[cli][model]") {
  const std::string model = kx::test::DefaultModelOrSkip();
  const std::string base = "-m " + ShellQuote(model) +
                           " --chat --temp 0 -n 16 -t 2 -p 'What is the capital of France?'";
  auto mapped = RunProgram(kCli, base, false);
  auto read = RunProgram(kCli, base + " --no-mmap --mlock", false);
  CHECK(mapped.exit_code == 0);
  CHECK(read.exit_code == 0);  // mlock failing (RLIMIT_MEMLOCK) is only a warning
  CHECK(!mapped.out.empty());
  CHECK(read.out == mapped.out);
}

TEST_CASE("cli: --stop ends the output before the stop string", "[cli][model]") {
  const std::string model = kx::test::DefaultModelOrSkip();
  const std::string base = "-m " + ShellQuote(model) +
                           " --chat --temp 0 -n 24 -t 2 -p 'What is the capital of France?'";
  auto full = RunProgram(kCli, base, false);
  REQUIRE(full.exit_code == 0);
  const size_t at = full.out.find("Paris");
  REQUIRE(at != std::string::npos);
  auto stopped = RunProgram(kCli, base + " --stop Paris", false);
  CHECK(stopped.exit_code == 0);
  CHECK(stopped.out == full.out.substr(0, at) + "\n");
  // A stop string that never appears changes nothing (the held-back prefix is released).
  auto unmatched = RunProgram(kCli, base + " --stop 'Paris, Texas'", false);
  CHECK(unmatched.out == full.out);
}

TEST_CASE("cli: --logit-bias forces and bans tokens", "[cli][model]") {
  const std::string model = kx::test::DefaultModelOrSkip();
  const std::string base = "-m " + ShellQuote(model) + " --temp 0.8 -s 7 -t 2 -p Hello";
  // +inf on one token makes every step pick it: 8 tokens are 4 tokens twice.
  auto four = RunProgram(kCli, base + " -n 4 --logit-bias 330+inf", false);
  auto eight = RunProgram(kCli, base + " -n 8 --logit-bias 330+inf,2-inf", false);
  REQUIRE(four.exit_code == 0);
  REQUIRE(eight.exit_code == 0);
  REQUIRE(four.out.size() > 1);
  const std::string piece4 = four.out.substr(0, four.out.size() - 1);  // without the newline
  CHECK(eight.out == piece4 + piece4 + "\n");
  // A ban on the forced token lets ordinary sampling through again.
  auto banned = RunProgram(kCli, base + " -n 4 --logit-bias 330+inf,330-inf", false);
  CHECK(banned.exit_code == 0);
  CHECK(banned.out != four.out);
  auto outside = RunProgram(kCli, base + " -n 4 --logit-bias 49152+1", true);
  CHECK(outside.exit_code == 1);
  CHECK(Contains(outside.out, "outside the vocabulary"));
}
