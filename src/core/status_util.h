// Building error statuses with one-line printf-style messages.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <string>

#include "src/core/types.h"

namespace moegrad::core {

// Cold: the paths that build an error leave the hot code of the checks and index passes that call this.
__attribute__((cold, format(printf, 2, 3))) inline Status MakeStatus(StatusCode code, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return Status(code, buf);
}

}  // namespace moegrad::core

#define MOEGRAD_RETURN_IF_ERROR(expr)                    \
  do {                                                   \
    ::moegrad::core::Status moegrad_status_ = (expr);    \
    if (!moegrad_status_.ok()) return moegrad_status_;   \
  } while (0)
