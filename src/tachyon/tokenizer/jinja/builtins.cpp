// Template globals; see builtins.h.
#include "tachyon/tokenizer/jinja/builtins.h"

#include <ctime>

#include "tachyon/base/check.h"

namespace tachyon::tokenizer::jinja {
namespace {

// jinja2's sandbox refuses ranges longer than this; so do we, so a template cannot stall us.
constexpr int64_t kMaxRange = 100000;

Value range(const CallArgs& args) {
  TACHYON_CHECK(!args.positional.empty() && args.positional.size() <= 3 && args.keyword.empty())
      << "range() takes 1 to 3 positional integer arguments";
  for (const Value& v : args.positional) {
    TACHYON_CHECK(v.is_integral()) << "range(): '" << type_name(v) << "' object cannot be interpreted as an integer";
  }
  int64_t start = 0, stop = 0, step = 1;
  if (args.positional.size() == 1) {
    stop = args.positional[0].as_int();
  } else {
    start = args.positional[0].as_int();
    stop = args.positional[1].as_int();
    if (args.positional.size() == 3) step = args.positional[2].as_int();
  }
  TACHYON_CHECK(step != 0) << "range() arg 3 must not be zero";
  ValueList out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    TACHYON_CHECK(static_cast<int64_t>(out.size()) < kMaxRange) << "range() is too large (limit " << kMaxRange << ")";
    out.push_back(Value::from_int(i));
  }
  return Value::from_list(std::move(out));
}

// namespace(dict?, **kwargs) and dict(dict?, **kwargs) share their argument handling.
ValueDict collect(const CallArgs& args, const char* fn) {
  ValueDict d;
  TACHYON_CHECK(args.positional.size() <= 1) << fn << "() takes at most one positional argument";
  if (!args.positional.empty()) {
    const Value& init = args.positional[0];
    TACHYON_CHECK(init.kind == Kind::kDict) << fn << "() positional argument must be a dict, not " << type_name(init);
    d = *init.dict;
  }
  for (const auto& [k, v] : args.keyword) d.set(k, v);
  return d;
}

Value raise_exception(const CallArgs& args) {
  const Value* message = args.get(0, "message");
  TACHYON_FAIL() << "template raised an exception: " << (message ? to_str(*message) : std::string());
  return Value::none();
}

Value strftime_now(const CallArgs& args) {
  const Value* format = args.get(0, "format");
  TACHYON_CHECK(format != nullptr && format->is_string()) << "strftime_now(format) needs a format string";
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[512];
  size_t n = std::strftime(buf, sizeof(buf), format->text.c_str(), &local);
  TACHYON_CHECK(n > 0 || format->text.empty()) << "strftime_now: cannot format '" << format->text << "'";
  return Value::from_string(std::string(buf, n));
}

}  // namespace

ValueDict builtin_globals() {
  ValueDict g;
  g.set("range", Value::from_function("range", range));
  g.set("namespace", Value::from_function("namespace", [](const CallArgs& a) {
          return Value::make_object("namespace", collect(a, "namespace"));
        }));
  g.set("dict", Value::from_function("dict", [](const CallArgs& a) { return Value::from_dict(collect(a, "dict")); }));
  g.set("raise_exception", Value::from_function("raise_exception", raise_exception));
  g.set("strftime_now", Value::from_function("strftime_now", strftime_now));
  return g;
}

}  // namespace tachyon::tokenizer::jinja
