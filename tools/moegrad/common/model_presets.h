// The MoE layer shapes of real models: the one table `moegrad bench`, `moegrad check` and the Google
// Benchmark suite all read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moegrad::tool {

struct ModelPreset {
  const char* name;
  int64_t hidden;          // H
  int64_t experts;         // E (routed experts)
  int64_t topk;            // K
  int64_t default_tokens;  // T used when --tokens is not given
};

// The table, in the order `moegrad bench --help` lists it.
const std::vector<ModelPreset>& ModelPresets();
// nullptr when no preset has this name.
const ModelPreset* FindPreset(const std::string& name);
const char* DefaultPresetName();

// Expert capacity of the drop-and-pad modes: capacity factor 1.0, i.e. C = ceil(T*K / E), the slots a
// perfectly balanced router would fill (at least 1, and at most T, as the permute forward requires C <= T).
// With random routing some experts get more than C tokens (those pairs are dropped) and some fewer (their
// slots are padding), as in training with a capacity factor.
int64_t DefaultCapacity(int64_t tokens, int64_t experts, int64_t topk);

// A readable shape: "T=1024 H=7168 E=256 K=8 C=32" (C only when capacity > 0).
std::string ShapeString(int64_t tokens, int64_t hidden, int64_t experts, int64_t topk, int64_t capacity);

}  // namespace moegrad::tool
