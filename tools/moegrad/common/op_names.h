// The operators' names on the command line (`--op`), in JSON output and in benchmark names: each operator
// has one, OpInfo<Args>::kKey (e.g. "finalize-routing-v2-grad"), next to its CANN name OpInfo<Args>::kName.
// `--op` also takes the CANN name, "all", and the older short spellings of the first releases.
#pragma once

#include <string>
#include <vector>

namespace moegrad::tool {

struct OpName {
  const char* name;  // CANN name, e.g. "MoeFinalizeRoutingV2Grad"
  const char* key;   // command-line name, e.g. "finalize-routing-v2-grad"
};

// Every operator, in the order of the README's operator table (ForEachOp).
const std::vector<OpName>& OpNames();

// An older spelling of a key that `--op` still accepts.
struct OpAlias {
  const char* alias;  // e.g. "finalize-grad"
  const char* key;    // the key it stands for
};
const std::vector<OpAlias>& OpAliases();

// True when the `--op` value `selector` picks the operator `op`: "all", its CANN name, its key or an older
// spelling of the key, case-insensitive.
bool OpSelected(const std::string& selector, const OpName& op);

// The one-line list of what `--op` accepts, for error messages.
std::string OpChoices();

}  // namespace moegrad::tool
