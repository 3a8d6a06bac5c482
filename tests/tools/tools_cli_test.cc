// kairox-perplexity, kairox-bench (and kairox-prepare's layout flags):
// argument errors exit 1 with a message
// naming the problem; --help and --version exit 0. No model needed.
#include <filesystem>
#include <fstream>
#include <string>

#include "catch2/catch.hpp"
#include "run_program.h"

namespace kx::test {
namespace {

constexpr const char* kPerplexity = "kairox-perplexity";
constexpr const char* kBench = "kairox-bench";
constexpr const char* kPrepare = "kairox-prepare";
constexpr const char* kMissingModel = "/nonexistent/dir/no-such-model.gguf";

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST_CASE("--help and --version exit 0", "[tools]") {
  for (const char* program : {kPerplexity, kBench, kPrepare}) {
    INFO(program);
    ProgramResult help = RunProgram(program, "--help", true);
    REQUIRE(help.exit_code == 0);
    REQUIRE(Contains(help.out, "usage:"));
    REQUIRE(Contains(help.out, "-m"));
    ProgramResult version = RunProgram(program, "--version", true);
    REQUIRE(version.exit_code == 0);
    REQUIRE(Contains(version.out, program));
  }
}

TEST_CASE("a missing model file is an error that names it", "[tools]") {
  const std::string model = ShellQuote(kMissingModel);
  // A text file that exists (__FILE__ is relative when ccache rewrites paths under its base dir).
  const std::string text =
      (std::filesystem::temp_directory_path() / "kx_tools_cli_test_text.txt").string();
  std::ofstream(text) << "some text to score\n";
  ProgramResult ppl = RunProgram(kPerplexity, "-m " + model + " -f " + ShellQuote(text), true);
  INFO(ppl.out);
  REQUIRE(ppl.exit_code == 1);
  REQUIRE(Contains(ppl.out, kMissingModel));
  REQUIRE_FALSE(Contains(ppl.out, "PPL ="));

  ProgramResult bench = RunProgram(kBench, "-m " + model + " -p 8 -n 2 -r 1", true);
  INFO(bench.out);
  REQUIRE(bench.exit_code == 1);
  REQUIRE(Contains(bench.out, kMissingModel));
}

TEST_CASE("perplexity: a missing text file is an error that names it", "[tools]") {
  ProgramResult r = RunProgram(
      kPerplexity, "-m " + ShellQuote(kMissingModel) + " -f /nonexistent/text.txt", true);
  INFO(r.out);
  REQUIRE(r.exit_code == 1);
  REQUIRE(Contains(r.out, "/nonexistent/text.txt"));
  REQUIRE(Contains(r.out, "No such file or directory"));
  // A directory is named as one (it read as an empty text: "the text has 0 tokens").
  const std::string dir = std::filesystem::temp_directory_path().string();
  ProgramResult d =
      RunProgram(kPerplexity, "-m " + ShellQuote(kMissingModel) + " -f " + ShellQuote(dir), true);
  INFO(d.out);
  REQUIRE(d.exit_code == 1);
  REQUIRE(Contains(d.out, "is a directory"));
}

TEST_CASE("bad arguments exit 1 with a message", "[tools]") {
  struct Case {
    const char* program;
    const char* args;
    const char* message;
  };
  const Case cases[] = {
      {kPerplexity, "", "no model"},
      {kPerplexity, "-m x.gguf", "no text"},
      {kPerplexity, "-m x.gguf -f t.txt -c abc", "--ctx-size: expects an integer"},
      {kPerplexity, "-m x.gguf -f t.txt -c 1",
       "--ctx-size: expects an integer in [2, 16777216], got '1'"},
      {kPerplexity, "-m x.gguf -f t.txt -c 4294967552", "--ctx-size: expects an integer in [2,"},
      {kPerplexity, "-m x.gguf -f t.txt -t 4294967296", "--threads: expects an integer in [1,"},
      {kPerplexity, "-m x.gguf -f t.txt -ngl x", "--n-gpu-layers: expects an integer"},
      {kPerplexity, "-m x.gguf -f t.txt --ram-budget", "--ram-budget needs a value"},
      {kPerplexity, "-m x.gguf -f t.txt --chunks 0", "--chunks: expects"},
      {kPerplexity, "-m x.gguf -f t.txt --bogus", "unknown argument '--bogus'"},
      {kPerplexity, "-m", "--model needs a value"},
      {kBench, "-m x.gguf -o xml", "--output: expects md, csv, json or jsonl, got 'xml'"},
      {kBench, "-m x.gguf -r 0", "--repetitions: expects an integer in [1, 100000], got '0'"},
      {kBench, "-m x.gguf -p 0 -n 0", "nothing to run"},
      {kBench, "-m x.gguf -t two", "--threads: expects an integer in [1, 4096], got 'two'"},
      {kBench, "-m x.gguf -t 1,two", "--threads: expects an integer in [1, 4096], got 'two'"},
      {kBench, "-m x.gguf -p 64,-1", "--n-prompt: expects an integer in [0, 16777216]"},
      {kBench, "-m x.gguf -d 1,x", "--n-depth: expects an integer in [0, 16777216], got 'x'"},
      {kBench, "-m x.gguf --frobnicate", "unknown argument '--frobnicate'"},
      {kPrepare, "-m x.gguf --down-layout sideways",
       "--down-layout: expects auto, rows or blocks, got 'sideways'"},
      {kPrepare, "-m x.gguf --grouping best", "--grouping: expects metis, frequency or random"},
      {kPrepare, "-m x.gguf --group-size 64", "--group-size: expects an integer in [1, 32]"},
      {kPrepare, "-m x.gguf --tokens 4294967296000000000000", "--tokens: expects an integer"},
      {kPrepare, "-m x.gguf --levels 0.1,x", "--levels: expects a number, got 'x'"},
      {kPrepare, "-m x.gguf --sparsity 1", "--sparsity: expects a number in (0, 1)"},
      {kPrepare, "-m x.gguf --down-type q3", "--down-type: expects auto, q8_0"},
      {kPrepare, "-m x.gguf --frobnicate", "unknown argument '--frobnicate'"},
      {kPrepare, "-m x.gguf --down-layout blocks --group-size 16",
       "--down-layout blocks fixes the groups"},
      {kPrepare, "-m x.gguf --down-layout blocks --down-type q8_0",
       "--down-layout blocks fixes the groups"},
  };
  for (const Case& c : cases) {
    INFO(c.program << " " << c.args);
    ProgramResult r = RunProgram(c.program, c.args, true);
    INFO(r.out);
    REQUIRE(r.exit_code == 1);
    REQUIRE(Contains(r.out, c.message));
  }
}

}  // namespace
}  // namespace kx::test
