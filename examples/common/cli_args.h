// A small command-line parser shared by kairox's programs: flags with one
// value ("-n 128", "--temp=0.7") or none ("--info"), with typed accessors
// that report bad values by flag name. Header-only, for the programs only.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

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
          Fail("flag " + a + " takes no value");
          return;
        }
        values_[a] = "1";
      } else if (with_value.count(a)) {
        if (!has_eq) {
          if (i + 1 >= argc) {
            Fail("flag " + a + " needs a value");
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

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

  bool Has(const std::string& a, const std::string& b = "") const {
    return values_.count(a) || (!b.empty() && values_.count(b));
  }
  std::string Str(const std::string& a, const std::string& b, const std::string& def) const {
    if (auto it = values_.find(a); it != values_.end()) return it->second;
    if (auto it = values_.find(b); it != values_.end()) return it->second;
    return def;
  }
  long long Int(const std::string& a, const std::string& b, long long def) {
    const std::string s = Str(a, b, "");
    if (s.empty()) return def;
    char* end = nullptr;
    long long v = std::strtoll(s.c_str(), &end, 10);
    if (*end != '\0') Fail("flag " + a + " expects an integer, got '" + s + "'");
    return v;
  }
  double Float(const std::string& a, const std::string& b, double def) {
    const std::string s = Str(a, b, "");
    if (s.empty()) return def;
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    if (*end != '\0') Fail("flag " + a + " expects a number, got '" + s + "'");
    return v;
  }

 private:
  void Fail(const std::string& msg) {
    if (error_.empty()) error_ = msg;
  }
  std::map<std::string, std::string> values_;
  std::string error_;
};

// The default model path: $KAIROX_MODEL, else the cache cmake/fetch_model.sh fills.
inline std::string DefaultModelPath() {
  if (const char* m = std::getenv("KAIROX_MODEL"); m && *m) return m;
  std::string dir;
  if (const char* d = std::getenv("KAIROX_MODEL_DIR"); d && *d) {
    dir = d;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    dir = std::string(x) + "/kairox/models";
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    dir = std::string(h) + "/.cache/kairox/models";
  }
  return dir + "/SmolLM2-135M-Instruct.Q4_1.gguf";
}

}  // namespace kx::cli
