// Global functions every chat template can call: jinja2's range, namespace and dict, and the
// two that transformers adds, raise_exception(message) (-> tachyon::Error carrying the
// message) and strftime_now(format) (local time, C strftime).
#pragma once

#include "tachyon/tokenizer/jinja/value.h"

namespace tachyon::tokenizer::jinja {

ValueDict builtin_globals();

}  // namespace tachyon::tokenizer::jinja
