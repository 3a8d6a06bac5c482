// kairox-perplexity and kairox-bench on the default model: the golden
// perplexity, the short-text error, batch invariance, and the bench's JSON.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "catch2/catch.hpp"
#include "nlohmann/json.hpp"
#include "run_program.h"

namespace kx::test {
namespace {

// The golden (transformers, F32) and kairox (Q4_1 weights, quantized
// activations) differ by quantization; llama.cpp's Q4_1 lands within 1%.
constexpr double kGoldenRelTolerance = 0.01;
// Batch size changes only the order of float sums inside attention.
constexpr double kBatchRelTolerance = 1e-3;

std::string TempPath(const std::string& name) {
  return EnvOr("TMPDIR", "/tmp") + "/kx_tools_test_" + std::to_string(::getpid()) + "_" + name;
}

bool ReadFile(const std::string& path, std::string& dst) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  dst = ss.str();
  return true;
}

// The value printed on the last line, "PPL = <value> +/- <err>"; NaN if absent.
double LastLinePpl(const std::string& out) {
  std::string s = out;
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  const size_t nl = s.rfind('\n');
  const std::string last = nl == std::string::npos ? s : s.substr(nl + 1);
  if (last.rfind("PPL = ", 0) != 0) return std::nan("");
  return std::strtod(last.c_str() + 6, nullptr);
}

// Ordinary English prose, long enough for a few 64-token chunks.
std::string SampleText() {
  const std::string para =
      "The village stood at the edge of a wide valley, where the river turned slowly "
      "toward the sea. In the mornings the farmers walked to their fields, and the "
      "children ran along the road to the small stone school. ";
  std::string text;
  for (int i = 0; i < 12; ++i) text += para;
  return text;
}

TEST_CASE("perplexity: a text shorter than one chunk is a clear error", "[tools][model]") {
  const std::string model = DefaultModelOrSkip();
  const std::string path = TempPath("short.txt");
  std::ofstream(path) << "Hello world.";
  ProgramResult r = RunProgram(
      "kairox-perplexity", "-m " + ShellQuote(model) + " -f " + ShellQuote(path) + " -c 512", true);
  std::remove(path.c_str());
  INFO(r.out);
  REQUIRE(r.exit_code == 1);
  REQUIRE(r.out.find("fewer than one chunk") != std::string::npos);
}

TEST_CASE("perplexity: plausible and independent of the batch size", "[tools][model]") {
  const std::string model = DefaultModelOrSkip();
  const std::string path = TempPath("text.txt");
  std::ofstream(path) << SampleText();
  const std::string base =
      "-m " + ShellQuote(model) + " -f " + ShellQuote(path) + " -c 64 --chunks 2 -t 2";
  ProgramResult a = RunProgram("kairox-perplexity", base + " -b 64", false);
  ProgramResult b = RunProgram("kairox-perplexity", base + " -b 7", false);
  std::remove(path.c_str());
  INFO(a.out);
  INFO(b.out);
  REQUIRE(a.exit_code == 0);
  REQUIRE(b.exit_code == 0);
  const double ppl_a = LastLinePpl(a.out), ppl_b = LastLinePpl(b.out);
  // Repetitive plain English: far below the vocabulary size, above 1.
  REQUIRE(ppl_a > 1.0);
  REQUIRE(ppl_a < 100.0);
  REQUIRE(std::abs(ppl_a - ppl_b) <= kBatchRelTolerance * ppl_a);
}

TEST_CASE("perplexity: within 1% of the transformers golden", "[tools][model][golden]") {
  const std::string model = DefaultModelOrSkip();
  const std::string dir = EnvOr("KAIROX_SOURCE_DIR", ".") + "/tests/golden/smollm2/";
  std::string golden_text;
  if (!ReadFile(dir + "perplexity.json", golden_text) ||
      !std::ifstream(dir + "perplexity_tokens.json")) {
    Skip("no perplexity golden in " + dir);
  }
  const nlohmann::json golden = nlohmann::json::parse(golden_text);
  double expected = 0.0;
  for (const char* key : {"ppl", "perplexity", "PPL"}) {
    if (golden.contains(key)) expected = golden[key].get<double>();
  }
  int n_ctx = 256, n_chunks = 16;
  for (const char* key : {"n_ctx", "ctx", "context"}) {
    if (golden.contains(key)) n_ctx = golden[key].get<int>();
  }
  for (const char* key : {"n_chunks", "chunks"}) {
    if (golden.contains(key)) n_chunks = golden[key].get<int>();
  }
  INFO("golden: " << golden_text);
  REQUIRE(expected > 1.0);
  ProgramResult r = RunProgram("kairox-perplexity",
                               "-m " + ShellQuote(model) + " --tokens-json " +
                                   ShellQuote(dir + "perplexity_tokens.json") + " -c " +
                                   std::to_string(n_ctx) + " --chunks " + std::to_string(n_chunks),
                               false);
  INFO(r.out);
  REQUIRE(r.exit_code == 0);
  const double ppl = LastLinePpl(r.out);
  INFO("kairox PPL " << ppl << ", golden " << expected);
  REQUIRE(std::abs(ppl - expected) <= kGoldenRelTolerance * expected);
}

TEST_CASE("bench: JSON output has llama-bench's fields and sane values", "[tools][model]") {
  const std::string model = DefaultModelOrSkip();
  ProgramResult r = RunProgram(
      "kairox-bench", "-m " + ShellQuote(model) + " -p 16 -n 4 -r 2 -t 2 -o json --e2e", false);
  INFO(r.out);
  REQUIRE(r.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  REQUIRE_FALSE(j.is_discarded());
  REQUIRE(j.is_array());
  REQUIRE(j.size() == 3);  // pp16, tg4, tg4 e2e
  for (const nlohmann::json& t : j) {
    for (const char* key : {"model_filename", "model_type", "model_size", "model_n_params",
                            "n_threads", "n_prompt", "n_gen", "n_depth", "avg_ns", "stddev_ns",
                            "avg_ts", "stddev_ts", "samples_ns", "samples_ts"}) {
      INFO(key);
      REQUIRE(t.contains(key));
    }
    REQUIRE(t["n_threads"].get<int>() == 2);
    REQUIRE(t["samples_ns"].size() == 2);
    REQUIRE(t["avg_ts"].get<double>() > 0.0);
    REQUIRE(t["model_size"].get<uint64_t>() > 0);
  }
  REQUIRE(j[0]["n_prompt"].get<int>() == 16);
  REQUIRE(j[0]["kx_flops_per_token"].get<double>() > 0.0);
  REQUIRE(j[1]["n_gen"].get<int>() == 4);
  REQUIRE(j[1]["kx_bw_dram_gbps"].get<double>() > 0.0);
  REQUIRE(j[1]["kx_ceiling_dram_ts"].get<double>() > 0.0);
  REQUIRE(j[2]["kx_e2e"].get<bool>());
}

}  // namespace
}  // namespace kx::test
