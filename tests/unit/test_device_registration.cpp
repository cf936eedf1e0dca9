// The device interface's registration: the device tree libibverbs reads, and removing exactly what
// was made.
#include "softhca/device_interface/registration.hpp"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace softhca::device_interface;

namespace {
std::string slurp(const fs::path& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
}
} // namespace

TEST_CASE("registration writes the tree libibverbs reads and removal takes it all away") {
    const fs::path base = fs::temp_directory_path() / ("shim-test-" + std::to_string(getpid()));
    fs::remove_all(base);
    fs::create_directories(base);

    InstanceRegistration reg;
    reg.sysfs_root = base / "run" / "sysfs";
    reg.cdev_dir = base / "dev" / "infiniband";
    reg.driver_file = base / "etc" / "libibverbs.d" / "shimtest.driver";
    reg.provider_prefix = "/opt/softhca/libsofthca";
    DeviceRegistration dev;
    dev.ibdev_name = "shimtest0";
    dev.uverbs_name = "shimtest0_uverbs";
    dev.node_guid = 0x005348fffe000001ull;
    dev.fw_ver = "9.9.9";
    dev.engine_socket = "/run/x.sock";
    dev.ports.push_back({{softhca::transport::gid_from_ipv4(0xc6120001u)}, "", 106});
    reg.devices.push_back(dev);

    Manifest manifest((base / "manifest").string());
    register_instance(reg, manifest);

    const fs::path sys(reg.sysfs_root);
    CHECK(slurp(sys / "class/infiniband_verbs/abi_version") == "6\n");
    CHECK(slurp(sys / "class/infiniband_verbs/shimtest0_uverbs/ibdev") == "shimtest0\n");
    CHECK(slurp(sys / "class/infiniband_verbs/shimtest0_uverbs/dev") == "1:7\n");
    const fs::path ib = sys / "class/infiniband/shimtest0";
    CHECK(slurp(ib / "node_type") == "1: CA\n");
    CHECK(slurp(ib / "node_guid") == "0053:48ff:fe00:0001\n");
    CHECK(slurp(ib / "softhca_engine_socket") == "/run/x.sock\n");
    CHECK(slurp(ib / "ports/1/gids/0") == "0000:0000:0000:0000:0000:ffff:c612:0001\n");
    CHECK(slurp(ib / "ports/1/gid_attrs/types/0") == "RoCE v2\n");
    CHECK(slurp(ib / "ports/1/gid_attrs/ndevs/0").empty());
    CHECK(slurp(ib / "ports/1/pkeys/0") == "0xffff\n");
    // The port's global traffic class where MLNX_OFED's mlx5 has it (NVSHMEM reads it).
    CHECK(slurp(ib / "tc/1/traffic_class") == "Global tclass=106\n");
    CHECK(slurp(reg.driver_file) == "driver /opt/softhca/libsofthca\n");

    struct stat st {};
    REQUIRE(stat((fs::path(reg.cdev_dir) / "shimtest0_uverbs").c_str(), &st) == 0);
    CHECK(S_ISCHR(st.st_mode));
    CHECK((st.st_mode & 0777) == 0666); // any user may open the device, umask or not
    CHECK(major(st.st_rdev) == kCmdDeviceMajor);
    CHECK(minor(st.st_rdev) == kCmdDeviceMinor);

    CHECK(manifest.remove_all() == 0);
    // Everything created is gone, including the directories made on the way.
    CHECK_FALSE(fs::exists(base / "run"));
    CHECK_FALSE(fs::exists(base / "dev"));
    CHECK_FALSE(fs::exists(base / "etc"));
    CHECK_FALSE(fs::exists(base / "manifest"));
    fs::remove_all(base);
}

TEST_CASE("removal leaves directories that others still use") {
    const fs::path base = fs::temp_directory_path() / ("shim-keep-" + std::to_string(getpid()));
    fs::remove_all(base);
    fs::create_directories(base);
    Manifest manifest((base / "manifest").string());
    fs::create_directories(base / "shared");
    manifest.record(Manifest::Kind::Directory, (base / "shared").string());
    std::ofstream(base / "shared" / "someone-elses").put('x');
    CHECK(manifest.remove_all() == 0);
    CHECK(fs::exists(base / "shared" / "someone-elses"));
    fs::remove_all(base);
}

TEST_CASE("the shared node directory goes with the last instance that used it") {
    const fs::path base = fs::temp_directory_path() / ("shim-shared-" + std::to_string(getpid()));
    fs::remove_all(base);
    fs::create_directories(base);
    auto registration = [&](const std::string& name) {
        InstanceRegistration reg;
        reg.sysfs_root = base / name / "sysfs";
        reg.cdev_dir = base / "dev" / "infiniband";
        reg.driver_file = base / "etc" / (name + ".driver");
        reg.provider_prefix = "/p/libsofthca";
        DeviceRegistration dev;
        dev.ibdev_name = name + "0";
        dev.uverbs_name = name + "0_uverbs";
        dev.engine_socket = "/run/x.sock";
        dev.ports.push_back({{softhca::transport::gid_from_ipv4(0xc6120001u)}, ""});
        reg.devices.push_back(dev);
        return reg;
    };
    Manifest first((base / "first.manifest").string());
    Manifest second((base / "second.manifest").string());
    register_instance(registration("one"), first);
    register_instance(registration("two"), second);
    const fs::path cdev = base / "dev" / "infiniband";
    CHECK(fs::exists(cdev / "one0_uverbs"));
    CHECK(fs::exists(cdev / "two0_uverbs"));
    // The creator goes first: the directory stays for the other instance ...
    CHECK(first.remove_all() == 0);
    CHECK(fs::exists(cdev / "two0_uverbs"));
    // ... which takes it away when it leaves.
    CHECK(second.remove_all() == 0);
    CHECK_FALSE(fs::exists(cdev));

    // A directory that existed before is never removed.
    fs::create_directories(cdev);
    Manifest third((base / "third.manifest").string());
    register_instance(registration("three"), third);
    CHECK(third.remove_all() == 0);
    CHECK(fs::exists(cdev));
    CHECK(fs::is_empty(cdev));
    fs::remove_all(base);
}
