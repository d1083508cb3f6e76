#include "tools/moegrad/common/op_names.h"

#include <strings.h>

#include "moegrad/op_info.hpp"

namespace moegrad::tool {

const std::vector<OpName>& OpNames() {
  static const std::vector<OpName> names = [] {
    std::vector<OpName> v;
    ForEachOp([&](auto info) { v.push_back({info.kName, info.kKey}); });
    return v;
  }();
  return names;
}

const std::vector<OpAlias>& OpAliases() {
  // The short keys of the first releases, kept so that existing scripts go on working.
  static const std::vector<OpAlias> aliases = {
      {"finalize-grad", OpInfo<FinalizeRoutingV2GradArgs>::kKey},
      {"permute-grad", OpInfo<TokenPermuteWithRoutingMapGradArgs>::kKey},
      {"finalize", OpInfo<FinalizeRoutingV2Args>::kKey},
      {"permute", OpInfo<TokenPermuteWithRoutingMapArgs>::kKey},
  };
  return aliases;
}

bool OpSelected(const std::string& selector, const OpName& op) {
  const char* s = selector.c_str();
  if (strcasecmp(s, "all") == 0 || strcasecmp(s, op.name) == 0 || strcasecmp(s, op.key) == 0) return true;
  for (const OpAlias& a : OpAliases()) {
    if (strcasecmp(s, a.alias) == 0 && strcasecmp(a.key, op.key) == 0) return true;
  }
  return false;
}

std::string OpChoices() {
  std::string keys, names, aliases;
  for (const OpName& op : OpNames()) {
    keys += std::string(", ") + op.key;
    names += std::string(names.empty() ? "" : ", ") + op.name;
  }
  for (const OpAlias& a : OpAliases()) aliases += std::string(aliases.empty() ? "" : ", ") + a.alias;
  return "all" + keys + "; or a CANN name (" + names + "); older spellings: " + aliases;
}

}  // namespace moegrad::tool
