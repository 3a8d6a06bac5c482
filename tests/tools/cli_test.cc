// kairox-cli as a user runs it: flags, errors, --info, and generation with
// only the generated text on stdout.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <utility>
#include <vector>

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

size_t Count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos;
       at = haystack.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

// The seed the statistics line reports ("; seed N;"), or "" when there is none.
std::string ReportedSeed(const std::string& err) {
  std::smatch m;
  if (std::regex_search(err, m, std::regex("; seed ([0-9]+);"))) return m[1];
  return "";
}

// stdout and stderr of one run, apart.
struct Split {
  int exit_code = -1;
  std::string out, err;
};
Split RunSplit(const std::string& args) {
  const std::string err_path =
      (std::filesystem::temp_directory_path() / ("kx_cli_test_err_" + std::to_string(::getpid())))
          .string();
  // RunProgram with merge_stderr=false sends stderr to /dev/null: the shell here redirects it.
  const std::string bin = kx::test::EnvOr("KAIROX_BIN_DIR", ".") + "/" + kCli;
  Split s;
  std::FILE* p =
      ::popen((ShellQuote(bin) + " " + args + " 2>" + ShellQuote(err_path)).c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) s.out.append(buf, n);
  const int status = ::pclose(p);
  if (status != -1 && WIFEXITED(status)) s.exit_code = WEXITSTATUS(status);
  std::ifstream in(err_path);
  s.err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  std::filesystem::remove(err_path);
  return s;
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
  // An empty sidecar path is refused, not taken as "the default" (which may mean dense).
  auto empty_sidecar = RunProgram(kCli, "--sidecar '' -m /nonexistent/x.gguf -p hi", true);
  CHECK(empty_sidecar.exit_code == 1);
  CHECK(Contains(empty_sidecar.out, "expects a sidecar path"));
  // Nothing on stdout for errors.
  auto quiet = RunProgram(kCli, "-m /nonexistent/x.gguf -p hi", false);
  CHECK(quiet.out.empty());
}

TEST_CASE("cli: --help lists every flag with its default", "[cli]") {
  auto help = RunProgram(kCli, "--help", false);
  REQUIRE(help.exit_code == 0);
  for (const char* flag : {"-n,--n-predict", "-t,--threads", "-c,--ctx-size", "-s,--seed",
                           "-e,--escape", "--n-gpu-layers,--gpu-layers", "-ngl", "--ram-budget",
                           "--sidecar", "--tier-miss", "--kv-type"}) {
    INFO(flag);
    CHECK(Contains(help.out, flag));
  }
  // Defaults in brackets: the library's sampler defaults (kx::SamplerParams) among them.
  for (const char* def : {"[128]", "--temp NUM [0.8]", "--top-k INT -1..2147483647 [40]",
                          "--top-p NUM [0.95]", "--min-p NUM [0.05]", "--repeat-penalty NUM [1]",
                          "[f16]", "[tam-adaptive]", "[read]", "-s,--seed INT >=-1 [-1]"}) {
    INFO(def);
    CHECK(Contains(help.out, def));
  }
}

TEST_CASE("cli: llama.cpp's spellings", "[cli]") {
  // Aliases reach the same flag (the error names its long spelling).
  for (const auto& [flag, name] :
       std::vector<std::pair<std::string, std::string>>{{"-ngl x", "--n-gpu-layers"},
                                                        {"--gpu-layers x", "--n-gpu-layers"},
                                                        {"--n-gpu-layers x", "--n-gpu-layers"},
                                                        {"--threads x", "--threads"},
                                                        {"--n-predict x", "--n-predict"}}) {
    auto r = RunProgram(kCli, flag + " -m /nonexistent/x.gguf -p hi", true);
    INFO(flag << " → " << r.out);
    CHECK(r.exit_code == 1);
    CHECK(Contains(r.out, name + ": expects an integer"));
  }
  // Interactive and conversation modes are refused with a pointer to kairox-chat.
  for (const char* flag : {"-i", "--interactive", "-cnv", "--conversation", "-if"}) {
    auto r = RunProgram(kCli, std::string(flag) + " -m /nonexistent/x.gguf -p hi", true);
    INFO(flag << " → " << r.out);
    CHECK(r.exit_code == 1);
    CHECK(Contains(r.out, "use kairox-chat"));
    CHECK(!Contains(r.out, "/nonexistent/x.gguf"));  // refused before the model loads
  }
  // -s -1 asks for a random seed; below -1 is out of range.
  auto below = RunProgram(kCli, "-s -2 -m /nonexistent/x.gguf -p hi", true);
  CHECK(below.exit_code == 1);
  CHECK(Contains(below.out, "--seed: expects an integer >= -1, got '-2'"));
}

TEST_CASE("cli: choices and prompt files are checked with the reason", "[cli]") {
  auto kv = RunProgram(kCli, "--kv-type q4 -m /nonexistent/x.gguf -p hi", true);
  CHECK(kv.exit_code == 1);
  CHECK(Contains(kv.out, "--kv-type: expects f16 or q8_0, got 'q4'"));
  auto miss = RunProgram(kCli, "--tier-miss maybe -m /nonexistent/x.gguf -p hi", true);
  CHECK(miss.exit_code == 1);
  CHECK(Contains(miss.out, "--tier-miss: expects read or skip, got 'maybe'"));
  auto level = RunProgram(kCli, "--sparsity 1 -m /nonexistent/x.gguf -p hi", true);
  CHECK(level.exit_code == 1);
  CHECK(Contains(level.out, "--sparsity: expects a number in [0, 1), got '1'"));
  // -f on a directory says so (it once said "no prompt").
  const std::string dir = std::filesystem::temp_directory_path().string();
  auto on_dir = RunProgram(kCli, "-m /nonexistent/x.gguf -f " + ShellQuote(dir), true);
  CHECK(on_dir.exit_code == 1);
  CHECK(Contains(on_dir.out, "is a directory"));
  CHECK(!Contains(on_dir.out, "no prompt"));
  // A missing file: the reason once.
  auto missing = RunProgram(kCli, "-m /nonexistent/x.gguf -f /nonexistent/prompt.txt", true);
  CHECK(missing.exit_code == 1);
  CHECK(Count(missing.out, "No such file or directory") == 1);
  CHECK(Contains(missing.out, "/nonexistent/prompt.txt"));
  auto model_missing = RunProgram(kCli, "-m /nonexistent/x.gguf -p hi", true);
  CHECK(Count(model_missing.out, "No such file or directory") == 1);
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

TEST_CASE("cli: -e turns escapes into characters", "[cli][model]") {
  const std::string model = kx::test::DefaultModelOrSkip();
  const std::string base = "-m " + ShellQuote(model) + " --temp 0 -n 6 -t 2 ";
  auto real = RunProgram(kCli, base + "-p \"$(printf 'Fruits:\\n- apple\\n- ')\"", false);
  auto escaped = RunProgram(kCli, base + "-e -p 'Fruits:\\n- apple\\n- '", false);
  auto literal = RunProgram(kCli, base + "-p 'Fruits:\\n- apple\\n- '", false);
  REQUIRE(real.exit_code == 0);
  REQUIRE(escaped.exit_code == 0);
  CHECK(escaped.out == real.out);
  CHECK(literal.out != real.out);  // without -e the backslashes stay
}

TEST_CASE("cli: long spellings mean the same as the short ones", "[cli][model]") {
  const std::string model = kx::test::DefaultModelOrSkip();
  const std::string base = "-m " + ShellQuote(model) + " --temp 0 -p 'The sky is' ";
  auto short_flags = RunProgram(kCli, base + "-n 6 -t 2", false);
  auto long_flags = RunProgram(kCli, base + "--n-predict 6 --threads 2", false);
  REQUIRE(short_flags.exit_code == 0);
  CHECK(!short_flags.out.empty());
  CHECK(long_flags.out == short_flags.out);
}

TEST_CASE("cli: -s -1 and the default seed are random and reported; -s N repeats", "[cli][model]") {
  const std::string model = kx::test::DefaultModelOrSkip();
  const std::string base =
      "-m " + ShellQuote(model) + " --temp 1.0 -n 24 -t 2 -p 'Once upon a time'";
  const Split a = RunSplit(base);
  const Split b = RunSplit(base + " -s -1");
  REQUIRE(a.exit_code == 0);
  REQUIRE(b.exit_code == 0);
  const std::string seed_a = ReportedSeed(a.err), seed_b = ReportedSeed(b.err);
  INFO(a.err << b.err);
  REQUIRE(!seed_a.empty());
  REQUIRE(!seed_b.empty());
  CHECK(seed_a != seed_b);
  // The reported seed reproduces the run; a fixed seed gives the same text twice.
  const Split again = RunSplit(base + " -s " + seed_a);
  CHECK(again.out == a.out);
  CHECK(ReportedSeed(again.err) == seed_a);
  const Split fixed1 = RunSplit(base + " -s 42");
  const Split fixed2 = RunSplit(base + " -s 42");
  CHECK(ReportedSeed(fixed1.err) == "42");
  CHECK(fixed1.out == fixed2.out);
}

TEST_CASE("cli: the statistics say dense without a sidecar", "[cli][model]") {
  const std::string model = kx::test::DefaultModelOrSkip();
  const Split r = RunSplit("-m " + ShellQuote(model) + " --no-sparse --temp 0 -n 2 -t 2 -p Hi");
  REQUIRE(r.exit_code == 0);
  CHECK(Contains(r.err, "; dense\n"));
}

TEST_CASE("cli: a context that fills before -n tokens says so", "[cli][model]") {
  const std::string model = kx::test::DefaultModelOrSkip();
  const Split r = RunSplit("-m " + ShellQuote(model) +
                           " --temp 0 --logit-bias 2-inf -c 16 -n 1000 -t 2 -p 'Once upon a time'");
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(Contains(r.err, "the context is full (16 tokens, -c)"));
  CHECK(Contains(r.err, "of 1000 tokens"));
  // Enough room: no notice.
  const Split roomy = RunSplit("-m " + ShellQuote(model) + " --temp 0 -c 64 -n 4 -t 2 -p Hi");
  CHECK(roomy.exit_code == 0);
  CHECK(!Contains(roomy.err, "context is full"));
}

TEST_CASE("cli: a RAM budget below what the session needs names the minimum", "[cli][model]") {
  const std::string model = kx::test::DefaultModelOrSkip();
  const std::string base = "-m " + ShellQuote(model) + " -n 2 -t 2 -p Hi --no-sparse ";
  auto small = RunProgram(kCli, base + "--ram-budget 8M -c 256", true);
  INFO(small.out);
  CHECK(small.exit_code == 1);
  CHECK(Contains(small.out, "RAM budget 8.0 MiB is too small: this session needs at least "));
  CHECK(Contains(small.out, "KV cache"));
  CHECK(Contains(small.out, "model tables"));
  // A percentage is a share of the sidecar's bundles: without one it is refused, saying why.
  auto share = RunProgram(kCli, base + "--ram-budget 50%", true);
  INFO(share.out);
  CHECK(share.exit_code == 1);
  CHECK(Contains(share.out, "--ram-budget 50% is a share of the sidecar's FFN bundles"));
}
