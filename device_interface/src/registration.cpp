#include "softhca/device_interface/registration.hpp"

#include "softhca/device_interface/control.hpp" // kPortCapabilityMask

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <system_error>
#include <unistd.h>

namespace softhca::device_interface {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& what) {
    throw std::system_error(errno, std::generic_category(), what);
}

void write_file(const fs::path& path, const std::string& content) {
    std::ofstream out(path, std::ios::trunc);
    out << content;
    out.close();
    if (!out)
        fail("writing " + path.string());
}

// Creates every missing directory on the way to `dir`, recording each one created.
void make_dirs(const fs::path& dir, Manifest& manifest, Manifest::Kind kind) {
    std::vector<fs::path> missing;
    for (fs::path p = dir; !p.empty() && !fs::exists(p); p = p.parent_path())
        missing.push_back(p);
    for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
        if (::mkdir(it->c_str(), 0755) != 0 && errno != EEXIST)
            fail("mkdir " + it->string());
        manifest.record(kind, *it);
    }
}

void write_port(const fs::path& port_dir, const PortRegistration& port) {
    fs::create_directories(port_dir / "gids");
    fs::create_directories(port_dir / "gid_attrs" / "types");
    fs::create_directories(port_dir / "gid_attrs" / "ndevs");
    fs::create_directories(port_dir / "pkeys");
    // The GID table, every entry RoCE v2 (the engine's gid_table.hpp builds it). An
    // empty ndev means "no kernel netdev" to libibverbs (ndev_ifindex 0).
    const std::string ndev = port.netdev.empty() ? std::string() : port.netdev + "\n";
    for (size_t i = 0; i < port.gids.size(); ++i) {
        const std::string index = std::to_string(i);
        write_file(port_dir / "gids" / index, transport::gid_to_sysfs_string(port.gids[i]) + "\n");
        write_file(port_dir / "gid_attrs" / "types" / index, "RoCE v2\n");
        write_file(port_dir / "gid_attrs" / "ndevs" / index, ndev);
    }
    // The default partition key, full membership (IBTA 10.9.1.2).
    write_file(port_dir / "pkeys" / "0", "0xffff\n");
    write_file(port_dir / "link_layer", "Ethernet\n");
    write_file(port_dir / "state", "4: ACTIVE\n");
    write_file(port_dir / "phys_state", "5: LinkUp\n");
    write_file(port_dir / "lid", "0x0\n");
    write_file(port_dir / "sm_lid", "0x0\n");
    write_file(port_dir / "lid_mask_count", "0\n");
    write_file(port_dir / "sm_sl", "0\n");
    write_file(port_dir / "rate", "10 Gb/sec (1X QDR)\n");
    char cap_mask[16];
    std::snprintf(cap_mask, sizeof(cap_mask), "0x%08x\n", kPortCapabilityMask);
    write_file(port_dir / "cap_mask", cap_mask);
}

// The `device` link of every device, as a real HCA's links to its PCI function. With a
// kernel netdev, the netdev's own device (a NIC's PCI function, whose net/ names the
// interface); programs find a device's interface through it (rdma-core's tests list
// /sys/class/infiniband/DEV/device/net/). Otherwise (the built-in wire, or a netdev with
// no device: veth, bridge, tap) a virtual device of the tree,
// devices/virtual/softhca/DEV_0000 (with net/NETDEV where there is one), whose subsystem
// is not PCI. NCCL takes realpath() of the link for each device: without one it warns on
// every start; it then writes '0' over the last character and the third and fourth from
// last (merging a NIC's ports and virtual functions), which "_0000" leaves as it is, so
// each device keeps a path of its own; and a path whose subsystem is not PCI puts the NIC
// under the CPU, where NCCL never turns GPUDirect on by itself.
void write_device_link(const fs::path& root, const DeviceRegistration& device,
                       const fs::path& ib_dir) {
    const std::string netdev = device.ports.empty() ? std::string() : device.ports[0].netdev;
    std::error_code ec;
    fs::path target;
    if (!netdev.empty() && !device.netdev_elsewhere)
        target = fs::canonical(fs::path("/sys/class/net") / netdev / "device", ec);
    if (netdev.empty() || ec || !fs::is_directory(target / "net" / netdev)) {
        target = root / "devices" / "virtual" / "softhca" / (device.ibdev_name + "_0000");
        fs::create_directories(target);
        if (!netdev.empty())
            fs::create_directories(target / "net" / netdev);
        const fs::path subsystem = root / "class" / "softhca";
        fs::create_directories(subsystem);
        fs::create_directory_symlink(subsystem, target / "subsystem", ec);
        if (ec && ec != std::errc::file_exists)
            fail("symlink " + (target / "subsystem").string());
    }
    fs::create_directory_symlink(target, ib_dir / "device", ec);
    if (ec)
        fail("symlink " + (ib_dir / "device").string());
}

// The device's files in the tree at `root`.
void write_device_tree(const fs::path& root, const DeviceRegistration& device) {
    const fs::path verbs_dir = root / "class" / "infiniband_verbs" / device.uverbs_name;
    const fs::path ib_dir = root / "class" / "infiniband" / device.ibdev_name;
    fs::create_directories(verbs_dir);
    fs::create_directories(ib_dir / "ports");

    const std::string dev =
        std::to_string(kCmdDeviceMajor) + ":" + std::to_string(kCmdDeviceMinor) + "\n";
    write_file(verbs_dir / "ibdev", device.ibdev_name + "\n");
    write_file(verbs_dir / "dev", dev);
    write_file(verbs_dir / "abi_version", std::to_string(kUverbsAbiVersion) + "\n");

    write_file(ib_dir / "node_type", "1: CA\n");
    write_file(ib_dir / "node_guid", transport::guid_to_sysfs_string(device.node_guid) + "\n");
    write_file(ib_dir / "sys_image_guid", transport::guid_to_sysfs_string(device.node_guid) + "\n");
    write_file(ib_dir / "fw_ver", device.fw_ver + "\n");
    write_file(ib_dir / "hca_type", "softhca\n");
    write_file(ib_dir / "hw_rev", "0\n");
    write_file(ib_dir / "board_id", "softhca\n");
    write_file(ib_dir / "node_desc", device.ibdev_name + " softhca\n");
    write_file(ib_dir / kEngineSocketFile, device.engine_socket + "\n");
    if (device.index)
        write_file(ib_dir / kDeviceIndexFile, std::to_string(device.index) + "\n");
    for (size_t i = 0; i < device.ports.size(); ++i) {
        write_port(ib_dir / "ports" / std::to_string(i + 1), device.ports[i]);
        // tc/PORT/traffic_class as MLNX_OFED's mlx5 has it (NVSHMEM reads it): "Global
        // tclass=N" when the port has one, else empty. Read-only here: the engine's
        // --traffic-class sets it.
        const int tclass = device.ports[i].traffic_class;
        const fs::path tc_dir = ib_dir / "tc" / std::to_string(i + 1);
        fs::create_directories(tc_dir);
        write_file(tc_dir / "traffic_class",
                   tclass >= 0 ? "Global tclass=" + std::to_string(tclass) + "\n" : "");
    }
    write_device_link(root, device, ib_dir);
}

// The files of class/infiniband_verbs and class/misc that every tree has.
void write_tree_top(const fs::path& root, const InstanceRegistration& instance) {
    write_file(root / "class" / "infiniband_verbs" / "abi_version",
               std::to_string(kUverbsAbiVersion) + "\n");
    if (!instance.rdma_cm_socket.empty()) {
        const fs::path misc = root / "class" / "misc" / "rdma_cm";
        fs::create_directories(misc);
        write_file(misc / "abi_version", std::to_string(kRdmaCmAbiVersion) + "\n");
        write_file(misc / "softhca_engine_socket", instance.rdma_cm_socket + "\n");
    }
}

void write_device(const InstanceRegistration& instance, const DeviceRegistration& device,
                  Manifest& manifest) {
    write_device_tree(instance.sysfs_root, device);

    // The character node libibverbs opens as cmd_fd; its number must match `dev`.
    const fs::path node = fs::path(instance.cdev_dir) / device.uverbs_name;
    ::unlink(node.c_str());
    if (::mknod(node.c_str(), S_IFCHR | 0666, makedev(kCmdDeviceMajor, kCmdDeviceMinor)) != 0)
        fail("mknod " + node.string());
    // Every user may open it, as rdma-core's udev rule makes the kernel's uverbs nodes:
    // mknod's mode went through the umask.
    if (::chmod(node.c_str(), 0666) != 0)
        fail("chmod " + node.string());
    manifest.record(Manifest::Kind::File, node);
}

} // namespace

void register_instance(const InstanceRegistration& instance, Manifest& manifest) {
    const fs::path root(instance.sysfs_root);
    if (fs::exists(root))
        fs::remove_all(root);
    make_dirs(root / "class" / "infiniband_verbs", manifest, Manifest::Kind::Directory);
    manifest.record(Manifest::Kind::Tree, root);
    write_tree_top(root, instance);
    // The character-node directory is shared by every instance (and by a real RDMA
    // stack if there is one). If we create it, we mark it; any instance then removes it
    // when only the mark is left, and never a directory someone else made.
    const fs::path cdev_dir(instance.cdev_dir);
    if (!fs::exists(cdev_dir)) {
        make_dirs(cdev_dir.parent_path(), manifest, Manifest::Kind::Directory);
        if (::mkdir(cdev_dir.c_str(), 0755) != 0 && errno != EEXIST)
            fail("mkdir " + cdev_dir.string());
        write_file(cdev_dir / Manifest::kSharedMark, "");
    }
    if (fs::exists(cdev_dir / Manifest::kSharedMark))
        manifest.record(Manifest::Kind::Shared, cdev_dir);
    for (const auto& device : instance.devices)
        write_device(instance, device, manifest);
    // Each host's view: the same nodes, a tree of its own.
    if (!instance.host_views.empty()) {
        const fs::path dir(instance.host_views_dir);
        if (fs::exists(dir))
            fs::remove_all(dir);
        fs::create_directories(dir);
        manifest.record(Manifest::Kind::Tree, dir);
    }
    for (const HostView& view : instance.host_views) {
        const fs::path view_root(view.sysfs_root);
        fs::create_directories(view_root / "class" / "infiniband_verbs");
        write_tree_top(view_root, instance);
        for (const auto& device : view.devices)
            write_device_tree(view_root, device);
    }

    make_dirs(fs::path(instance.driver_file).parent_path(), manifest, Manifest::Kind::Directory);
    write_file(instance.driver_file, "driver " + instance.provider_prefix + "\n");
    manifest.record(Manifest::Kind::File, instance.driver_file);
}

void register_device(const InstanceRegistration& instance, const DeviceRegistration& device,
                     Manifest& manifest) {
    const fs::path root(instance.sysfs_root);
    manifest.record(Manifest::Kind::Tree, root / "class" / "infiniband" / device.ibdev_name);
    manifest.record(Manifest::Kind::Tree, root / "class" / "infiniband_verbs" / device.uverbs_name);
    manifest.record(Manifest::Kind::Tree,
                    root / "devices" / "virtual" / "softhca" / (device.ibdev_name + "_0000"));
    write_device(instance, device, manifest);
}

void unregister_device(const InstanceRegistration& instance, const DeviceRegistration& device) {
    const fs::path root(instance.sysfs_root);
    std::error_code ignored;
    // The verbs entry first: libibverbs finds devices through it.
    fs::remove_all(root / "class" / "infiniband_verbs" / device.uverbs_name, ignored);
    fs::remove_all(root / "class" / "infiniband" / device.ibdev_name, ignored);
    fs::remove_all(root / "devices" / "virtual" / "softhca" / (device.ibdev_name + "_0000"),
                   ignored);
    ::unlink((fs::path(instance.cdev_dir) / device.uverbs_name).c_str());
}

} // namespace softhca::device_interface
