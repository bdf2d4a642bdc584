// src/io/input_fail.hpp — private to src/io: DT_INPUT_FAIL(msg) throws dtrain::InputError with the
// formatted message, for the many schema checks whose condition reads better as an if.
#pragma once

#include "dtrain/core/error.hpp"

#define DT_INPUT_FAIL(msg) \
  throw ::dtrain::InputError(::dtrain::format_error((msg), __FILE__, __LINE__))
