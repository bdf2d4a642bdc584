// dtrain/core/options.cpp — the error of an unknown enum option value (core/options.hpp).
#include "dtrain/core/options.hpp"

#include "dtrain/core/error.hpp"

namespace dtrain {

void throw_invalid_choice(std::string_view option, std::string_view text,
                          const std::string& choices) {
  throw InputError("option --" + std::string(option) + ": invalid value '" + std::string(text) +
                   "' (expected " + choices + ")");
}

}  // namespace dtrain
