#include "environment.hpp"

#include <cstdlib>
#include <cstring>

namespace softhca::engine {

bool environment_switch_on(const char* name) {
    const char* value = std::getenv(name);
    return !value || std::strcmp(value, "0") != 0;
}

} // namespace softhca::engine
