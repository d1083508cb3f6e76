// How the CPU kernels split their work among threads, for tests that check the partitions directly
// (tests/work_split_test.cc): the inverse index over the tokens and the ranges of parallel.h. Header-only; the
// thread-team functions of parallel.h are not for tests to call.
#pragma once

#include "src/backend/cpu/inverse_index.h"
#include "src/backend/cpu/parallel.h"
