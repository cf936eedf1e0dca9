// What each user holds of one kind of thing the engine caps per user (resource_limits.hpp):
// taken one at a time below a cap, given back, no entry kept for a user that holds none.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <sys/types.h>

namespace softhca::engine {

class UserCounts {
  public:
    // One more for `user` when it holds fewer than `cap`; false, and nothing taken, else.
    bool take(uid_t user, uint64_t cap) {
        if (of(user) >= cap)
            return false;
        ++counts_[user];
        return true;
    }
    void add(uid_t user, uint64_t n = 1) { counts_[user] += n; }
    void give_back(uid_t user, uint64_t n = 1) {
        auto it = counts_.find(user);
        if (it == counts_.end())
            return;
        it->second -= std::min(it->second, n);
        if (it->second == 0)
            counts_.erase(it);
    }
    uint64_t of(uid_t user) const {
        auto it = counts_.find(user);
        return it == counts_.end() ? 0 : it->second;
    }

  private:
    std::map<uid_t, uint64_t> counts_;
};

} // namespace softhca::engine
