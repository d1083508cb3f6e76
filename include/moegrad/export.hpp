// moegrad/export.hpp: symbol visibility of the public C++ API.
#pragma once

#if defined(_WIN32)
#define MOEGRAD_API
#else
#define MOEGRAD_API __attribute__((visibility("default")))
#endif
