#include "tools/moegrad/common/model_presets.h"

#include <algorithm>
#include <cstdio>

namespace moegrad::tool {

const std::vector<ModelPreset>& ModelPresets() {
  // Token counts: one micro-batch of a few thousand tokens is typical in training; the defaults are kept
  // small enough that `moegrad bench` on a 2-core machine finishes in about a minute.
  static const std::vector<ModelPreset> presets = {
      {"deepseek-v3", 7168, 256, 8, 512},
      {"mixtral-8x7b", 4096, 8, 2, 1024},
      {"qwen3-30b-a3b", 2048, 128, 8, 1024},
      {"qwen2-57b-a14b", 3584, 64, 8, 1024},
      {"olmoe-1b-7b", 2048, 64, 8, 1024},
  };
  return presets;
}

const ModelPreset* FindPreset(const std::string& name) {
  for (const ModelPreset& p : ModelPresets()) {
    if (name == p.name) return &p;
  }
  return nullptr;
}

const char* DefaultPresetName() { return "deepseek-v3"; }

int64_t DefaultCapacity(int64_t tokens, int64_t experts, int64_t topk) {
  if (experts <= 0) return 1;
  const int64_t c = (tokens * topk + experts - 1) / experts;
  return std::max<int64_t>(1, std::min(c, std::max<int64_t>(tokens, 1)));
}

std::string ShapeString(int64_t tokens, int64_t hidden, int64_t experts, int64_t topk, int64_t capacity) {
  char buf[128];
  if (capacity > 0) {
    std::snprintf(buf, sizeof(buf), "T=%lld H=%lld E=%lld K=%lld C=%lld", static_cast<long long>(tokens),
                  static_cast<long long>(hidden), static_cast<long long>(experts), static_cast<long long>(topk),
                  static_cast<long long>(capacity));
  } else {
    std::snprintf(buf, sizeof(buf), "T=%lld H=%lld E=%lld K=%lld", static_cast<long long>(tokens),
                  static_cast<long long>(hidden), static_cast<long long>(experts), static_cast<long long>(topk));
  }
  return buf;
}

}  // namespace moegrad::tool
