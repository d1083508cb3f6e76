# The problem builders, preset table and measurements shared by the moegrad tool and the benchmark suite.
include_guard(GLOBAL)
file(GLOB MOEGRAD_TOOL_COMMON_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/moegrad/common/*.cc)
add_library(moegrad_tool_common STATIC ${MOEGRAD_TOOL_COMMON_SOURCES})
target_include_directories(moegrad_tool_common PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(moegrad_tool_common PUBLIC moegrad moegrad_ref OpenMP::OpenMP_CXX Threads::Threads)
# Highway: the streaming copy of the yardstick (stream_copy.cc), dispatched per SIMD target.
target_link_libraries(moegrad_tool_common PRIVATE hwy::hwy)
