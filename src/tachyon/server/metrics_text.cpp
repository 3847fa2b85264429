// Text exposition writer: see metrics_text.h.
#include "tachyon/server/metrics_text.h"

#include <cmath>
#include <iterator>

#include <fmt/format.h>

namespace tachyon::server {

namespace {

std::string escape(std::string_view text, bool quotes) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quotes) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

void append_labels(std::string& out, std::string_view labels) {
  if (labels.empty()) return;
  out += '{';
  out += labels;
  out += '}';
}

}  // namespace

std::string escape_label_value(std::string_view value) { return escape(value, true); }
std::string escape_help(std::string_view help) { return escape(help, false); }

std::string format_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", value);
}

void append_family(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, escape_help(help), name, type);
}

void append_sample(std::string& out, std::string_view name, std::string_view labels, double value) {
  out += name;
  append_labels(out, labels);
  out += ' ';
  out += format_value(value);
  out += '\n';
}

void append_sample(std::string& out, std::string_view name, std::string_view labels, int64_t value) {
  out += name;
  append_labels(out, labels);
  fmt::format_to(std::back_inserter(out), " {}\n", value);
}

void append_histogram(std::string& out, std::string_view name, std::string_view labels, const HistogramSnapshot& snap) {
  std::string_view comma = labels.empty() ? "" : ",";
  for (size_t i = 0; i < snap.cumulative_counts.size(); ++i) {
    std::string le = i < snap.upper_bounds.size() ? format_value(snap.upper_bounds[i]) : "+Inf";
    fmt::format_to(std::back_inserter(out), "{}_bucket{{{}{}le=\"{}\"}} {}\n", name, labels, comma, le,
                   snap.cumulative_counts[i]);
  }
  fmt::format_to(std::back_inserter(out), "{}_sum", name);
  append_labels(out, labels);
  fmt::format_to(std::back_inserter(out), " {}\n{}_count", format_value(snap.sum), name);
  append_labels(out, labels);
  fmt::format_to(std::back_inserter(out), " {}\n", snap.count);
}

}  // namespace tachyon::server
