// The Prometheus text exposition format, version 0.0.4: `# HELP`, `# TYPE`, then one sample
// per line as `name{label="value",...} number`. Only writing, no parsing; the caller owns the
// string so one render reuses a single buffer. Label values are escaped once, when a series is
// created, never per render. Test: ctest -R metrics.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tachyon/server/metrics_histogram.h"

namespace tachyon::server {

// Backslash, double quote and newline become \\, \" and \n (label values).
std::string escape_label_value(std::string_view value);
// Backslash and newline become \\ and \n (HELP text).
std::string escape_help(std::string_view help);
// Shortest text that reads back to the same double; +Inf, -Inf and NaN as Prometheus spells them.
std::string format_value(double value);

// `labels` is a ready label list without braces (`model_name="m"`), or empty for none.
void append_family(std::string& out, std::string_view name, std::string_view type, std::string_view help);
void append_sample(std::string& out, std::string_view name, std::string_view labels, double value);
void append_sample(std::string& out, std::string_view name, std::string_view labels, int64_t value);
// A family of one unlabeled sample: its HELP and TYPE lines, then the sample (the value's type
// picks append_sample's overload, as at a direct call).
template <typename Value>
void append_metric(std::string& out, std::string_view name, std::string_view type, std::string_view help, Value value) {
  append_family(out, name, type, help);
  append_sample(out, name, "", value);
}
// The `_bucket` lines (cumulative, `le` last, ending with +Inf), then `_sum` and `_count`.
void append_histogram(std::string& out, std::string_view name, std::string_view labels, const HistogramSnapshot& snap);

}  // namespace tachyon::server
