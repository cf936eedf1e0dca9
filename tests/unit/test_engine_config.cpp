// Engine: the command line that names the instance and its ports.
#include "engine_config.hpp"

#include <catch2/catch.hpp>
#include <vector>

using namespace softhca::engine;

namespace {
std::optional<EngineConfig> parse(std::vector<std::string> args, std::string& error) {
    args.insert(args.begin(), "softhca-engine");
    std::vector<char*> argv;
    for (auto& a : args)
        argv.push_back(a.data());
    return parse_engine_args(static_cast<int>(argv.size()), argv.data(), error);
}
} // namespace

TEST_CASE("no --port means the built-in wire") {
    std::string error;
    auto config = parse({"--run-dir", "/tmp/x", "--provider-prefix", "/p/libsofthca"}, error);
    REQUIRE(config);
    CHECK(config->ports.empty());
    CHECK(config->prefix == "softhca");
    CHECK(config->socket_path() == "/tmp/x/engine.sock");
}

TEST_CASE("a port is given as DPDK devargs, an IPv4 address and the kernel interface") {
    std::string error;
    auto config = parse({"--run-dir", "/r", "--provider-prefix", "/p", "--port",
                         "net_af_packet0,iface=veth0@198.18.0.1", "--port",
                         "net_memif0,role=server@198.18.0.3%mif"},
                        error);
    REQUIRE(config);
    REQUIRE(config->ports.size() == 2);
    CHECK(config->ports[0].devargs == "net_af_packet0,iface=veth0");
    CHECK(config->ports[0].ipv4 == 0xc6120001u);
    CHECK(config->ports[0].netdev == "veth0"); // from iface=
    CHECK(config->ports[1].netdev == "mif");
}

TEST_CASE("bad engine arguments are refused with a reason") {
    std::string error;
    CHECK_FALSE(parse({"--run-dir", "/r"}, error));
    CHECK_FALSE(error.empty());
    error.clear();
    CHECK_FALSE(parse({"--run-dir", "/r", "--provider-prefix", "/p", "--port", "net_tap0"}, error));
    CHECK(error.find("DEVARGS@IPV4") != std::string::npos);
    error.clear();
    CHECK_FALSE(
        parse({"--run-dir", "/r", "--provider-prefix", "/p", "--port", "net_tap0@1.2.3"}, error));
    error.clear();
    CHECK_FALSE(parse({"--run-dir", "/r", "--provider-prefix", "/p", "--mtu", "70000"}, error));
    error.clear();
    CHECK_FALSE(
        parse({"--run-dir", "/r", "--provider-prefix", "/p", "--prefix", "Bad/Name"}, error));
    error.clear();
    CHECK_FALSE(parse({"--run-dir", "/r", "--provider-prefix", "/p", "--bogus"}, error));
}

TEST_CASE("PCI devargs are told apart from virtual devices") {
    CHECK(is_pci_devargs("0000:3b:00.0"));
    CHECK(is_pci_devargs("3b:00.1,txq_inline=128"));
    CHECK_FALSE(is_pci_devargs("net_af_packet0,iface=veth0"));
    CHECK_FALSE(is_pci_devargs("net_ring0"));
}
