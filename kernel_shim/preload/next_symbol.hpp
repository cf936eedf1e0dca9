// The C library's own definition of a function this library interposes: the next one
// after us in the lookup order. Resolved once, on first use.
#pragma once

#include <dlfcn.h>

namespace softhca::preload {

template <typename Function> Function next_symbol(const char* name) {
    return reinterpret_cast<Function>(::dlsym(RTLD_NEXT, name));
}

} // namespace softhca::preload
