// Engine memory room: the stall watch's cut-off list (its aborts: tests/security/
// test_fuse_memory.sh).
#include "stall_watch.hpp"

#include <catch2/catch.hpp>

using softhca::engine::StallWatch;

TEST_CASE("stall watch: nobody is cut off until the watch aborts a FUSE connection") {
    CHECK_FALSE(StallWatch::cut_off(0));
    CHECK_FALSE(StallWatch::cut_off(65534));
    CHECK(StallWatch::aborted() == 0);
    CHECK(StallWatch::penalty_epoch() == 0);
}
