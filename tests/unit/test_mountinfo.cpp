// Wire-codec layer: the mountinfo lines the engine reads to name a filesystem.
#include "mountinfo.hpp"

#include <catch2/catch.hpp>

using softhca::engine::MountinfoLine;
using softhca::engine::parse_mountinfo_line;

TEST_CASE("mountinfo: a line's mount ID, device and filesystem type, past optional tags "
          "and escaped spaces") {
    MountinfoLine m;
    REQUIRE(parse_mountinfo_line("36 35 98:0 /mnt1 /mnt\\040two rw,noatime master:1 shared:7 - "
                                 "ext3 /dev/root rw,errors=continue",
                                 m));
    CHECK(m.id == "36");
    CHECK(m.device == "98:0");
    CHECK(m.type == "ext3");
    // No tags, a FUSE subtype.
    REQUIRE(parse_mountinfo_line("812 29 0:58 / /tmp/x rw,nosuid,nodev - fuse.sshfs a@b rw", m));
    CHECK(m.device == "0:58");
    CHECK(m.type == "fuse.sshfs");
    // Not a mountinfo line: no separator, or nothing after it.
    CHECK_FALSE(parse_mountinfo_line("36 35 98:0 /mnt1 /mnt2 rw", m));
    CHECK_FALSE(parse_mountinfo_line("36 35 98:0 / / rw - ", m));
    CHECK_FALSE(parse_mountinfo_line("", m));
}
