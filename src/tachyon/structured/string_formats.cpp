#include "tachyon/structured/string_formats.h"

#include <map>

namespace tachyon::structured {
namespace {

// Regexes for the supported string formats (RFC 3339 date/time, RFC 4122 uuid). Each allows only
// strings that every validator takes: a date is a day of the calendar (the days each month has,
// 29 February in leap years only; "2023-02-30" is no date), the year 0001-9999 (validators built
// on a date library, Python's among them, refuse year 0), and the seconds 00-59 (a leap second,
// ":60", is refused by some validators and allowed at 23:59 UTC alone by others). The corpus test
// (test_structured_schema_corpus.cpp) checks the outputs with Python's jsonschema.
const std::string kYear = "([0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)";
const std::string kLeapYear = "([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00)";
const std::string kDate = "(" + kYear + "-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|" +
                          "02-(0[1-9]|1[0-9]|2[0-8]))|" + kLeapYear + "-02-29)";
const std::string kTime = R"(([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9]))";
// An IPv4 address as every validator takes it: four decimal octets 0-255 without leading zeros
// (Python's ipaddress refuses "01"). An IPv6 address in RFC 4291's text forms, full or with one
// "::", without the embedded IPv4 and zone forms. An e-mail address: a dot-atom local part and a
// host name of at least two labels (RFC 5321's common form; validators that check e-mail at all
// check less), each part bounded (a local part of up to four dot-separated atoms of up to 64
// characters, up to five labels of up to 63) so that an output always ends.
const std::string kOctet = "(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])";
const std::string kHex4 = "[0-9a-fA-F]{1,4}";
const std::string kIpv6 = "((" + kHex4 + ":){7}" + kHex4 + "|(" + kHex4 + ":){1,7}:|(" + kHex4 + ":){1,6}:" + kHex4 +
                          "|(" + kHex4 + ":){1,5}(:" + kHex4 + "){1,2}|(" + kHex4 + ":){1,4}(:" + kHex4 + "){1,3}|(" +
                          kHex4 + ":){1,3}(:" + kHex4 + "){1,4}|(" + kHex4 + ":){1,2}(:" + kHex4 + "){1,5}|" + kHex4 +
                          ":(:" + kHex4 + "){1,6}|:((:" + kHex4 + "){1,7}|:))";
const std::string kLabel = "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
const std::string kHost = kLabel + "(\\." + kLabel + "){0,4}";
// A URI (RFC 3986) in its common absolute form: scheme "://" host [":" port] path [? query]
// [# fragment], the host a name of up to five labels (dotted IPv4 among them), path segments
// and query of unreserved characters, sub-delims, ":" and "@", and %-escapes of two hex digits.
// Bounded (at most 1,890 characters) so that an output ends, and so that Pydantic's HttpUrl
// (a uri of 1 to 2,083 characters) is served.
const std::string kPchar = "([A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})";
const std::string kUri = "[A-Za-z][A-Za-z0-9+.-]{0,15}://" + kHost + "(:[0-9]{1,5})?(/" + kPchar + "{0,48}){0,8}(\\?(" +
                         kPchar + "|/|\\?){0,96})?(#(" + kPchar + "|/|\\?){0,32})?";

const std::map<std::string, StringFormat, std::less<>> kFormats = {
    {"date", {kDate, 10, 10}},
    {"time", {kTime, 9, -1}},
    {"date-time", {kDate + "T" + kTime, 20, -1}},
    {"uuid", {R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})", 36, 36}},
    {"ipv4", {kOctet + "(\\." + kOctet + "){3}", 7, 15}},
    {"ipv6", {kIpv6, 2, 39}},
    {"email", {"[A-Za-z0-9_%+-]{1,64}(\\.[A-Za-z0-9_%+-]{1,64}){0,3}@" + kLabel + "(\\." + kLabel + "){1,4}", 5, 579}},
    {"uri", {kUri, 5, 1890}},
};

}  // namespace

const StringFormat* find_string_format(std::string_view name) {
  const auto it = kFormats.find(name);
  return it == kFormats.end() ? nullptr : &it->second;
}

std::string supported_string_formats() {
  std::string names;
  for (const auto& [name, format] : kFormats) names += (names.empty() ? "" : ", ") + name;
  return names;
}

}  // namespace tachyon::structured
