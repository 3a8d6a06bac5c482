// How kairox's programs declare and parse their flags: CLI11 (Debian's libcli11-dev, header-only)
// with the habits they share. A program makes a CLI::App, gives it the shared conventions with
// SetUp, declares its flags on it (integers through AddInt, choices through OneOf), and calls
// Parse:
//
//   CLI::App app("what it does", "kairox-foo");
//   kx::cli::SetUp(app);
//   int64_t n = 128;
//   kx::cli::AddInt(app, "-n,--n-predict", &n, -1, kx::cli::kMaxCount, "tokens to generate");
//   if (const int rc = kx::cli::Parse(app, argc, argv); rc >= 0) return rc;  // help, error
//
// Integers are parsed as 64-bit and range-checked before they land in their variable, so a
// value that does not fit is refused, never truncated (`-c 4294967552` once ran with n_ctx 256).
// Errors print "<program>: error: <flag>: <what is wrong>" on stderr and exit 1; --help prints
// every flag with its default on stdout and exits 0. Header-only, for the programs.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/model_path.h"

namespace kx::cli {

// The largest count most flags accept (tokens, chunks, threads...): far beyond any real use,
// and small enough that sums and products of two of them stay inside 64 bits.
inline constexpr int64_t kMaxCount = int64_t{1} << 30;
inline constexpr int64_t kMaxThreads = 4096;
inline constexpr int64_t kMaxContext = int64_t{1} << 24;

// Parse returns this when the program should go on.
inline constexpr int kContinue = -1;

// An integer in [lo, hi], parsed as 64-bit. The validator checks the text itself, so "abc",
// "12x", a value beyond 64 bits and one out of range all get the same message with the range.
inline CLI::Validator IntIn(int64_t lo, int64_t hi) {
  std::string range;
  if (hi == std::numeric_limits<int64_t>::max()) {
    range = ">= " + std::to_string(lo);
  } else {
    range = "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  }
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(text.c_str(), &end, 10);
        if (errno != 0 || end == text.c_str() || *end != '\0' || v < lo || v > hi) {
          return "expects an integer " + range + ", got '" + text + "'";
        }
        return {};
      },
      "");
}

// A number (strtod's syntax, so nan and inf pass: the sampler's own check names the range).
inline CLI::Validator Number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0') return "expects a number, got '" + text + "'";
        return {};
      },
      "");
}

// One of `choices`, spelled exactly (name them in the option's type_name, e.g. "f16|q8_0").
inline CLI::Validator OneOf(std::vector<std::string> choices) {
  std::string list;
  for (size_t i = 0; i < choices.size(); ++i) {
    list += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
  }
  return CLI::Validator(
      [choices, list](std::string& text) -> std::string {
        for (const std::string& c : choices) {
          if (text == c) return {};
        }
        return "expects " + list + ", got '" + text + "'";
      },
      "");
}

// Declares an integer flag: parsed into 64 bits, checked against [lo, hi], then stored in *dst
// (whose type must hold the whole range).
template <typename T>
CLI::Option* AddInt(CLI::App& app, const std::string& names, T* dst, int64_t lo, int64_t hi,
                    const std::string& help) {
  static_assert(std::is_integral_v<T>);
  if (lo < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
      static_cast<uint64_t>(hi) > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
    throw std::logic_error(names + ": the range does not fit the variable");
  }
  const std::string range = hi == std::numeric_limits<int64_t>::max()
                                ? ">=" + std::to_string(lo)
                                : std::to_string(lo) + ".." + std::to_string(hi);
  return app.add_option(names, *dst, help)->check(IntIn(lo, hi))->type_name("INT " + range);
}

// Declares a floating-point flag.
template <typename T>
CLI::Option* AddNumber(CLI::App& app, const std::string& names, T* dst, const std::string& help) {
  static_assert(std::is_floating_point_v<T>);
  return app.add_option(names, *dst, help)->check(Number())->type_name("NUM");
}

// --help as kairox prints it: "-n,--n-predict INT -1..1073741824 [128]", descriptions wrapped to
// the terminal's usual 100 columns.
class HelpFormatter : public CLI::Formatter {
 public:
  static constexpr size_t kNameColumn = 34;
  static constexpr size_t kLineWidth = 100;

  std::string make_option_opts(const CLI::Option* opt) const override {
    std::string out;
    if (opt->get_type_size() == 0) return out;  // a switch
    if (!opt->get_type_name().empty()) out += " " + opt->get_type_name();
    if (!opt->get_default_str().empty()) out += " [" + opt->get_default_str() + "]";
    return out;
  }
  std::string make_option_desc(const CLI::Option* opt) const override {
    return Wrap(opt->get_description(), kLineWidth - kNameColumn);
  }

  // `text` with its spaces turned into line breaks where a line would pass `width`.
  static std::string Wrap(const std::string& text, size_t width) {
    std::string out;
    size_t line = 0;
    size_t i = 0;
    while (i < text.size()) {
      size_t end = text.find(' ', i);
      if (end == std::string::npos) end = text.size();
      const std::string word = text.substr(i, end - i);
      if (line > 0 && line + 1 + word.size() > width) {
        out += '\n';
        line = 0;
      } else if (line > 0) {
        out += ' ';
        ++line;
      }
      out += word;
      line += word.size();
      i = end + 1;
    }
    return out;
  }
};

// Gives `app` kairox's conventions: -h/--help, the last of a repeated flag wins (as before, and
// as llama.cpp users expect), every flag's default shown in --help.
inline void SetUp(CLI::App& app) {
  app.set_help_flag("-h,--help", "print this help and exit");
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.option_defaults()->always_capture_default();
  auto help = std::make_shared<HelpFormatter>();
  help->label("Usage", "usage");
  help->column_width(HelpFormatter::kNameColumn);
  app.formatter(help);
}

// Spellings CLI11 cannot declare (a single dash before several letters), as llama.cpp users
// type them, rewritten to the long spelling each program declares.
inline std::vector<std::string> NormalizeArgs(int argc, char** argv) {
  static const std::pair<const char*, const char*> kSingleDashLong[] = {
      {"-ngl", "--n-gpu-layers"},
      {"-cnv", "--conversation"},
      {"-if", "--interactive-first"},
      {"-np", "--parallel"}};
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    for (const auto& [from, to] : kSingleDashLong) {
      if (a == from) a = to;
    }
    args.push_back(std::move(a));
  }
  return args;
}

// What a CLI11 error says, in kairox's words: a missing value says so.
inline std::string DescribeError(const CLI::Error& e) {
  std::string what = e.what();
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr &&
      what.find(" required ") != std::string::npos && what.find(" missing") != std::string::npos) {
    return what.substr(0, what.find(':')) + " needs a value";
  }
  return what;
}

// Parses argv into `app`'s variables. Returns kContinue to go on, else the exit code (0 after
// --help, 1 after an error, which is printed as "<program>: error: ..." on stderr).
inline int Parse(CLI::App& app, int argc, char** argv) {
  std::vector<std::string> args = NormalizeArgs(argc, argv);
  std::reverse(args.begin(), args.end());  // CLI11 takes the arguments from the back
  app.allow_extras();                      // what is left is named below, the first of it only
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: error: %s\n", app.get_name().c_str(), DescribeError(e).c_str());
    return 1;
  }
  if (const std::vector<std::string> extra = app.remaining(); !extra.empty()) {
    std::fprintf(stderr, "%s: error: unknown argument '%s' (see --help)\n", app.get_name().c_str(),
                 extra.front().c_str());
    return 1;
  }
  return kContinue;
}

}  // namespace kx::cli
