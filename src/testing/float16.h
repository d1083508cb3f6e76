// The scalar fp32 <-> fp16 / bf16 conversions of the library (round-to-nearest-even, NaNs kept quiet), for tests,
// tools and fuzzers that build inputs or read results bit by bit. tests/float16_test.cc checks them exhaustively.
#pragma once

#include "src/core/float16.h"
