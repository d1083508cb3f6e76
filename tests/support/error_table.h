// A bad-argument table of one operator: a valid case, the rows that each change one thing about it, and the
// check of every row through the C++ API and the aclnn API (where the change is expressible there): its
// status, a piece of its one-line message, the phase that fails (aclnn: metadata errors in phase one, leaving
// *executor null; index-data errors in phase two), and no byte of any tensor changed.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "moegrad/op_info.hpp"
#include "tests/support/api.h"
#include "tests/support/test_tensor.h"

namespace moegrad::testing {

constexpr int kNullptr = 161001, kInvalid = 161002;

// One call's tensors in OpInfo<Args>'s order (the C signature's); slot i is passed as tensor `source[i]`
// (aliasing tests). Attributes and integer arrays in OpInfo's order.
template <typename Args>
struct Case {
  static constexpr int kSlots = static_cast<int>(kNumTensors<Args>);
  std::optional<TestTensor> t[kSlots];
  int source[kSlots];
  std::array<int64_t, kNumAttrs<Args>> attrs{};
  IntArrays<Args> arrays{};  // kIntArrays order (nullopt: absent)
  std::function<void(int, TensorView*)> tweak;  // C++ only: edits the view of a slot
  Case() {
    for (int i = 0; i < kSlots; ++i) source[i] = i;
  }
  std::optional<TensorView> View(int i) const {
    if (!t[source[i]]) return std::nullopt;
    TensorView v = t[source[i]]->view();
    if (tweak) tweak(i, &v);
    return v;
  }
  // The C++ API's arguments (an absent required tensor gets an empty view).
  Args CppArgs() const {
    std::optional<TensorView> views[kSlots];
    const TensorView* p[kSlots];
    for (int i = 0; i < kSlots; ++i) {
      views[i] = View(i);
      p[i] = views[i] ? &*views[i] : nullptr;
    }
    return MakeArgs<Args>(p, attrs.data(), &arrays);
  }
};

enum Where { kBoth, kCppOnly, kAclOnly };

template <typename Args>
struct ErrorRow {
  const char* name;
  std::function<void(Case<Args>&)> mutate;
  int code;
  std::string message;
  int phase;  // 1 or 2
  Where where = kBoth;
};

struct Outcome {
  int code = 0;
  std::string message;
  int phase = 0;  // the phase that failed (aclnn path)
};

template <typename Args>
Outcome CppOutcome(const Case<Args>& c) {
  const Status s = OpInfo<Args>::kRun(c.CppArgs());
  return {static_cast<int>(s.code()), s.message(), 0};
}

// Phase one then phase two through aclnn, with a workspace of the reported size.
template <typename Args>
Outcome AclOutcome(Case<Args>& c) {
  AclTensorPtr t[Case<Args>::kSlots];
  aclTensor* raw[Case<Args>::kSlots];
  for (int i = 0; i < Case<Args>::kSlots; ++i) {
    if (c.t[c.source[i]]) t[i].reset(AclOf(*c.t[c.source[i]]));
    raw[i] = t[i].get();
  }
  uint64_t ws_size = 0;
  aclOpExecutor* ex = reinterpret_cast<aclOpExecutor*>(&ws_size);  // must be overwritten
  aclnnStatus st = AclnnPhaseOne<Args>(raw, c.attrs.data(), &ws_size, &ex, &c.arrays);
  if (st != ACLNN_SUCCESS) {
    EXPECT_EQ(ex, nullptr) << "a failed phase one must leave *executor null";
    return {st, aclGetRecentErrMsg(), 1};
  }
  std::vector<char> ws(ws_size + 64);
  char* aligned = ws.data() + (64 - reinterpret_cast<uintptr_t>(ws.data()) % 64) % 64;
  st = OpEntry<Args>::kAclnnPhaseTwo(ws_size ? aligned : nullptr, ws_size, ex, nullptr);
  if (st != ACLNN_SUCCESS) return {st, aclGetRecentErrMsg(), 2};
  return {0, "", 0};
}

// Runs every row on a fresh valid case through both APIs and checks status, message and untouched tensors.
template <typename Args, typename MakeCase>
void CheckTable(const std::vector<ErrorRow<Args>>& rows, MakeCase make) {
  {
    Case<Args> ok = make();
    ASSERT_EQ(CppOutcome(ok).code, 0) << "the base case must be valid: " << CppOutcome(ok).message;
    Case<Args> ok2 = make();
    ASSERT_EQ(AclOutcome(ok2).code, 0) << "the base case must be valid: " << AclOutcome(ok2).message;
  }
  for (const auto& row : rows) {
    for (int api = 0; api < 2; ++api) {
      if ((api == 0 && row.where == kAclOnly) || (api == 1 && row.where == kCppOnly)) continue;
      SCOPED_TRACE(std::string(row.name) + (api == 0 ? " (C++)" : " (aclnn)"));
      Case<Args> c = make();
      row.mutate(c);
      std::vector<std::vector<uint8_t>> before;
      for (auto& t : c.t) before.push_back(t ? t->Snapshot() : std::vector<uint8_t>());
      const Outcome o = api == 0 ? CppOutcome(c) : AclOutcome(c);
      EXPECT_EQ(o.code, row.code) << o.message;
      ExpectErrorMessage(o.message, OpInfo<Args>::kName, row.message);
      if (api == 1) {
        EXPECT_EQ(o.phase, row.phase) << o.message;
      }
      for (int i = 0; i < Case<Args>::kSlots; ++i) {
        if (c.t[i]) {
          EXPECT_TRUE(c.t[i]->SameBytes(before[static_cast<size_t>(i)])) << "tensor " << i << " changed";
        }
      }
    }
  }
}

// A dropless routing map of 3 tokens and 100 experts, K = 2, so that its rows are read in vectors of 64 and 16
// bytes and a scalar tail: rows {3, 70} | {64, 99} | {0, 95} (1 = routed, row-major).
inline std::vector<uint8_t> WideRouting() {
  std::vector<uint8_t> routed(300, 0);
  for (int i : {3, 70, 100 + 64, 100 + 99, 200, 200 + 95}) routed[static_cast<size_t>(i)] = 1;
  return routed;
}

// The row count check on a WideRouting map in slot `map`: every extra or missing entry is counted wherever it
// lies in the row, and the first bad row is named. `mode`: the attribute that chose dropless.
template <typename Args>
std::vector<ErrorRow<Args>> WideRoutingMapRows(int map, const std::string& mode) {
  using C = Case<Args>;
  return {
      {"extra entry in the first 64 columns", [map](C& c) { c.t[map]->SetI(100 + 5, 1); }, kInvalid,
       "routingMapOptional row 1 has 3 routed entries but " + mode + " false needs K = N / T = 2", 2},
      {"extra entry in the 16-column part", [map](C& c) { c.t[map]->SetI(200 + 66, 1); }, kInvalid,
       "routingMapOptional row 2 has 3 routed entries", 2},
      {"extra entry in the scalar tail", [map](C& c) { c.t[map]->SetI(98, 1); }, kInvalid,
       "routingMapOptional row 0 has 3 routed entries", 2},
      {"every entry of a row", [map](C& c) { for (int64_t e = 0; e < 100; ++e) c.t[map]->SetI(200 + e, 1); },
       kInvalid, "routingMapOptional row 2 has 100 routed entries", 2},
      {"missing entry in the tail", [map](C& c) { c.t[map]->SetI(100 + 99, 0); }, kInvalid,
       "routingMapOptional row 1 has 1 routed entries", 2},
      {"the first bad row is named", [map](C& c) { c.t[map]->SetI(200, 0); c.t[map]->SetI(100 + 1, 1); },
       kInvalid, "routingMapOptional row 1 has 3 routed entries", 2},
  };
}

}  // namespace moegrad::testing
