#include "tests/support/api.h"

#include <gtest/gtest.h>

namespace moegrad::testing {

const char* ApiName(Api api) {
  switch (api) {
    case Api::kCpp: return "cpp";
    case Api::kCppPlan: return "cpp-plan";
    case Api::kAclnn: return "aclnn";
  }
  return "?";
}

aclTensor* AclOf(TestTensor& t, bool null_data) {
  const int64_t storage = t.storage_elements();
  return aclCreateTensor(t.sizes_vector().data(), t.sizes_vector().size(), static_cast<aclDataType>(t.dtype()),
                         t.strides_vector().data(), t.offset_elements(), ACL_FORMAT_ND, &storage, 1,
                         null_data ? nullptr : t.storage());
}

aclTensor* AclOfOver(TestTensor& t, TestTensor& other) {
  const int64_t storage = t.storage_elements();
  EXPECT_LE(storage * static_cast<int64_t>(ElementSize(t.dtype())),
            other.storage_elements() * static_cast<int64_t>(ElementSize(other.dtype())));
  return aclCreateTensor(t.sizes_vector().data(), t.sizes_vector().size(), static_cast<aclDataType>(t.dtype()),
                         t.strides_vector().data(), t.offset_elements(), ACL_FORMAT_ND, &storage, 1, other.storage());
}

void ExpectErrorMessage(const std::string& message, const std::string& op, const std::string& part) {
  EXPECT_EQ(message.rfind(op + ": ", 0), 0u) << "the message does not start with \"" << op << ": \": " << message;
  EXPECT_NE(message.find(part), std::string::npos) << "message: " << message << "\nexpected: " << part;
  EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
}

Workspace::Workspace(uint64_t bytes) {
  // aclrtMalloc's blocks are 64-byte aligned.
  EXPECT_EQ(aclrtMalloc(&data_, bytes > 0 ? bytes : 1, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
}

Workspace::~Workspace() {
  if (data_ != nullptr) aclrtFree(data_);
}

}  // namespace moegrad::testing
