// A small command-line parser shared by kairox's programs: flags with one
// value ("-n 128", "--temp=0.7") or none ("--info"), typed accessors that
// report bad values by the flag's spelling, and the default model path.
// Header-only, for the programs only.
//
//   kx::cli::Args args(argc, argv, {"-m", "--model", "-n"}, {"--help"});
//   const long long n = args.Int("-n", "", 128, /*min=*/1);
//   if (!args.ok()) { fprintf(stderr, "%s\n", args.error().c_str()); return 1; }
#pragma once

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>

#include "common/model_path.h"

namespace kx::cli {

class Args {
 public:
  // `with_value` and `switches` list the accepted flags (all spellings).
  Args(int argc, char** argv, const std::set<std::string>& with_value,
       const std::set<std::string>& switches) {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      std::string val;
      bool has_eq = false;
      if (a.rfind("--", 0) == 0) {
        const size_t eq = a.find('=');
        if (eq != std::string::npos) {
          val = a.substr(eq + 1);
          a = a.substr(0, eq);
          has_eq = true;
        }
      }
      if (switches.count(a)) {
        if (has_eq) {
          Fail(a + " takes no value");
          return;
        }
        values_[a] = "1";
      } else if (with_value.count(a)) {
        if (!has_eq) {
          if (i + 1 >= argc) {
            Fail(a + " needs a value");
            return;
          }
          val = argv[++i];
        }
        values_[a] = val;
      } else {
        Fail("unknown argument '" + a + "' (see --help)");
        return;
      }
    }
  }

  // False after the first error; error() says what it was.
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  // Records an error found by the program (the first one wins).
  void Fail(const std::string& msg) {
    if (error_.empty()) error_ = msg;
  }

  bool Has(const std::string& a, const std::string& b = "") const {
    return values_.count(a) || (!b.empty() && values_.count(b));
  }
  std::string Str(const std::string& a, const std::string& b, const std::string& def) const {
    const std::string* v = Find(a, b, nullptr);
    return v ? *v : def;
  }
  // An integer in [min_value, max_value]; def when the flag is absent. The default range is
  // int32's, because most flags land in an int: a wider value is an error, never truncated
  // (`-c 4294967552` once ran with n_ctx 256). Flags that hold 64 bits pass their own range.
  long long Int(const std::string& a, const std::string& b, long long def,
                long long min_value = INT32_MIN, long long max_value = INT32_MAX) {
    std::string flag;
    const std::string* s = Find(a, b, &flag);
    if (s == nullptr) return def;
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(s->c_str(), &end, 10);
    if (errno != 0 || end == s->c_str() || *end != '\0' || v < min_value || v > max_value) {
      std::string range;
      if (min_value != LLONG_MIN) range = " >= " + std::to_string(min_value);
      if (max_value != LLONG_MAX) range += (range.empty() ? " <= " : " and <= ") + std::to_string(max_value);
      Fail(flag + " expects an integer" + range + ", got '" + *s + "'");
      return def;
    }
    return v;
  }
  double Float(const std::string& a, const std::string& b, double def) {
    std::string flag;
    const std::string* s = Find(a, b, &flag);
    if (s == nullptr) return def;
    char* end = nullptr;
    const double v = std::strtod(s->c_str(), &end);
    if (end == s->c_str() || *end != '\0') {
      Fail(flag + " expects a number, got '" + *s + "'");
      return def;
    }
    return v;
  }

 private:
  const std::string* Find(const std::string& a, const std::string& b, std::string* flag) const {
    for (const std::string* name : {&a, &b}) {
      if (name->empty()) continue;
      if (auto it = values_.find(*name); it != values_.end()) {
        if (flag) *flag = *name;
        return &it->second;
      }
    }
    return nullptr;
  }

  std::map<std::string, std::string> values_;
  std::string error_;
};

}  // namespace kx::cli
