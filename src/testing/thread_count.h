// The library's thread-count limit and MOEGRAD_NUM_THREADS syntax (core::ParseThreadCount), for the tests and
// the tool. tests/thread_count_test.cc checks them.
#pragma once

#include "src/core/thread_count.h"
