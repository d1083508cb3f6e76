#include "tools/moegrad/common/problem.h"

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "src/testing/float16.h"
#include "tools/moegrad/common/routing.h"

namespace moegrad::tool {

HostTensor TensorMaker::Make(DType dtype, std::vector<int64_t> sizes, bool may_broadcast) {
  Layout layout = Layout::kContiguous;
  const uint64_t seed = rng_();
  if (policy_ != LayoutPolicy::kContiguous) {
    const int choices = policy_ == LayoutPolicy::kMixed ? 4 : 3;
    int pick = static_cast<int>(rng_() % static_cast<uint64_t>(choices));
    if (policy_ == LayoutPolicy::kMixed) --pick;  // -1: contiguous
    if (pick == 2 && (!may_broadcast || rng_() % 3 != 0)) pick = 0;  // broadcast now and then
    if (pick == 0) layout = Layout::kPadded;
    if (pick == 1) layout = Layout::kTransposed;
    if (pick == 2) layout = Layout::kBroadcast;
  }
  return HostTensor(dtype, std::move(sizes), layout, seed);
}

namespace {

float AsFloat(uint32_t bits, DType dtype) {
  if (dtype == DType::kFloat32) {
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  return dtype == DType::kFloat16 ? F32FromF16Bits(static_cast<uint16_t>(bits))
                                  : F32FromBF16Bits(static_cast<uint16_t>(bits));
}

}  // namespace

void Problem::PrepareExpected() {
  for (OutputPair& o : outputs_) {
    const TensorView& v = o.actual->view();
    o.expected = HostTensor(v.dtype, std::vector<int64_t>(v.sizes, v.sizes + v.rank));
    o.expected.FillBytes(0x5a);
  }
}

uint64_t CountDistinct(const HostTensor& index, int64_t lo, int64_t hi) {
  if (hi <= lo) return 0;
  std::vector<bool> seen(static_cast<size_t>(hi - lo), false);
  uint64_t n = 0;
  for (int64_t i = 0; i < index.numel(); ++i) {
    const int64_t v = index.GetI(i);
    if (v < lo || v >= hi || seen[static_cast<size_t>(v - lo)]) continue;
    seen[static_cast<size_t>(v - lo)] = true;
    ++n;
  }
  return n;
}

std::string SetBadIndex(HostTensor* index, const char* name, int64_t flat, int64_t value) {
  index->SetI(flat, value);
  return Format("%s[%lld] = %lld", name, static_cast<long long>(flat), static_cast<long long>(value));
}

int64_t OutsideRange(int64_t hi, std::mt19937_64& rng) {
  return rng() % 2 ? hi + static_cast<int64_t>(rng() % 3) : -1 - static_cast<int64_t>(rng() % 3);
}

std::string FlipRoutingMapEntry(HostTensor* map, std::mt19937_64& rng, const char* why) {
  const int64_t i = static_cast<int64_t>(rng() % static_cast<uint64_t>(map->numel()));
  const int64_t v = map->GetI(i) != 0 ? 0 : 1;
  map->SetI(i, v);
  return Format("routingMap flat[%lld] = %lld (%s)", static_cast<long long>(i), static_cast<long long>(v), why);
}

void FillFinalizeIndices(IndexData index, const Shape& s, int64_t capacity, bool expert_major, int64_t lo,
                         int64_t hi, std::mt19937_64& rng, HostTensor* row_idx, HostTensor* expert_idx) {
  const int64_t R = s.tokens, K = s.topk, pairs = R * K;
  if (index == IndexData::kRouted) {
    const Routing routing = RandomRouting(R, s.experts, K, rng);
    const std::vector<int32_t> idx = InitRoutingRowIdx(routing, capacity);
    for (int64_t i = 0; i < pairs; ++i) {
      row_idx->SetI(expert_major ? (i % K) * R + i / K : i, idx[static_cast<size_t>(i)]);
    }
    if (expert_idx != nullptr) {
      for (int64_t i = 0; i < pairs; ++i) expert_idx->SetI(i, routing.expert[static_cast<size_t>(i)]);
    }
    return;
  }
  std::uniform_int_distribution<int64_t> value(lo, hi);
  for (int64_t i = 0; i < pairs; ++i) row_idx->SetI(i, value(rng));
  if (expert_idx != nullptr) {
    std::uniform_int_distribution<int64_t> expert(0, s.experts - 1);
    for (int64_t i = 0; i < pairs; ++i) expert_idx->SetI(i, expert(rng));
  }
}

void RedrawExperts(int64_t experts, std::mt19937_64& rng, HostTensor* expert_idx) {
  std::uniform_int_distribution<int64_t> expert(0, experts - 1);
  for (int64_t i = 0; i < expert_idx->numel(); ++i) expert_idx->SetI(i, expert(rng));
}

void FillRoutingMap(const std::vector<uint8_t>& routed, bool any_nonzero, std::mt19937_64& rng, HostTensor* map) {
  for (size_t i = 0; i < routed.size(); ++i) {
    int64_t v = routed[i] != 0 ? 1 : 0;
    if (v != 0 && any_nonzero) v = (static_cast<int64_t>(rng() % 255) - 127) | 1;
    map->SetI(static_cast<int64_t>(i), v);
  }
}

bool CompareOutputs(const Problem& p, int64_t sample, std::string* message) {
  for (const OutputPair& o : p.outputs()) {
    if (!o.written) continue;
    const int64_t n = o.actual->numel();
    const bool is_float = o.actual->dtype() == DType::kFloat32 || o.actual->dtype() == DType::kFloat16 ||
                          o.actual->dtype() == DType::kBFloat16;
    const int64_t count = sample > 0 && sample + 2 < n ? sample + 2 : n;
    for (int64_t s = 0; s < count; ++s) {
      // Sampled: the first, the last, and `sample` elements at pseudo-random places.
      const int64_t i = count == n ? s : s == 0 ? 0 : s == 1 ? n - 1 : static_cast<int64_t>(Mix64(s) % n);
      if (!is_float) {
        const int64_t a = o.actual->GetI(i), e = o.expected.GetI(i);
        if (a == e) continue;
        *message = Format("%s[%lld] = %lld, reference %lld", o.name.c_str(), static_cast<long long>(i),
                          static_cast<long long>(a), static_cast<long long>(e));
        return false;
      }
      const uint32_t a = o.actual->Bits(i), e = o.expected.Bits(i);
      if (a == e) continue;
      const float fa = AsFloat(a, o.actual->dtype()), fe = AsFloat(e, o.actual->dtype());
      if (std::isnan(fa) && std::isnan(fe)) continue;  // NaN sign and payload are not part of the contract
      const bool finite = std::isfinite(fa) && std::isfinite(fe);
      const float tol = o.tolerance && finite ? o.tolerance(i) : 0.0f;
      if (o.tolerance && finite && std::fabs(fa - fe) <= tol) continue;
      *message = Format("%s[%lld] = %.9g (bits 0x%x), reference %.9g (bits 0x%x)%s", o.name.c_str(),
                        static_cast<long long>(i), fa, a, fe, e,
                        o.tolerance && finite ? Format(", tolerance %.3g", tol).c_str() : "");
      return false;
    }
  }
  return true;
}

std::vector<std::vector<uint8_t>> SnapshotOutputs(const Problem& p) {
  std::vector<std::vector<uint8_t>> bytes;
  for (const OutputPair& o : p.outputs()) bytes.push_back(o.actual->Snapshot());
  return bytes;
}

std::string VerifyRun(Problem& p, const Status& s, const std::vector<std::vector<uint8_t>>& before) {
  if (!s.ok()) return Format("status %d: %s", static_cast<int>(s.code()), s.message().c_str());
  p.RunReference();
  std::string mismatch;
  if (!CompareOutputs(p, 0, &mismatch)) return mismatch;
  for (size_t i = 0; i < before.size(); ++i) {
    const OutputPair& o = p.outputs()[i];
    if (!o.written && !o.actual->SameBytes(before[i])) return o.name + " was written although it is unused";
    if (!o.actual->OutsideViewUnchanged(before[i])) return o.name + ": a byte outside its view changed";
  }
  return "";
}

std::string Format(const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, args);
  va_end(args);
  return buf;
}

}  // namespace moegrad::tool
