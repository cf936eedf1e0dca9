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
// What the engine says when it refuses `args` (after --run-dir and --provider-prefix);
// "(taken)" when it takes them.
std::string refusal(std::vector<std::string> args) {
    args.insert(args.begin(), {"--run-dir", "/r", "--provider-prefix", "/p"});
    std::string error;
    return parse(args, error) ? "(taken)" : error;
}
using Catch::Matchers::Contains;
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

TEST_CASE("a port may have IPv6 addresses, with or without an IPv4 one") {
    std::string error;
    auto config = parse({"--run-dir", "/r", "--provider-prefix", "/p", "--port",
                         "net_af_packet0,iface=veth0@2001:2::3,198.18.0.1,2001:2:0:1::3%v",
                         "--port", "net_af_packet1,iface=veth1@2001:2::4"},
                        error);
    REQUIRE(config);
    REQUIRE(config->ports.size() == 2);
    CHECK(config->ports[0].devargs == "net_af_packet0,iface=veth0");
    CHECK(config->ports[0].ipv4 == 0xc6120001u);
    CHECK(config->ports[0].netdev == "v");
    REQUIRE(config->ports[0].ipv6.size() == 2);
    const softhca::transport::Gid first{0x20, 0x01, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3};
    const softhca::transport::Gid second{0x20, 0x01, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 3};
    CHECK(config->ports[0].ipv6[0] == first);
    CHECK(config->ports[0].ipv6[1] == second);
    CHECK(config->ports[1].ipv4 == 0); // IPv6 only
    CHECK(config->ports[1].ipv6.size() == 1);
    CHECK(config->ports[1].netdev == "veth1");
}

TEST_CASE("addresses a port cannot have are refused") {
    for (const char* addresses :
         {"fe80::1", "ff02::1", "::", "::1", "::ffff:198.18.0.1", "198.18.0.1,198.18.0.2",
          "0.0.0.0", "2001:2::1,", "2001:2::zz", "198.18.0.1,,2001:2::1"}) {
        std::string error;
        CHECK_FALSE(parse({"--run-dir", "/r", "--provider-prefix", "/p", "--port",
                           std::string("net_tap0@") + addresses},
                          error));
        CHECK_FALSE(error.empty());
    }
}

TEST_CASE("bad engine arguments are refused with a reason") {
    std::string error;
    CHECK_FALSE(parse({"--run-dir", "/r"}, error));
    CHECK_FALSE(error.empty());
    CHECK_THAT(refusal({"--port", "net_tap0"}), Contains("DEVARGS@ADDRESS"));
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

TEST_CASE("congestion options: a shaped link, ECN marking, DCQCN, all off by default") {
    std::string error;
    auto plain = parse({"--run-dir", "/r", "--provider-prefix", "/p"}, error);
    REQUIRE(plain);
    CHECK_FALSE(plain->congestion_point.shaper.enabled());
    CHECK_FALSE(plain->congestion_point.ecn_marking);
    CHECK_FALSE(plain->dcqcn);
    auto c = parse({"--run-dir", "/r", "--provider-prefix", "/p", "--shape",
                    "rate_mbps=2000,queue_kb=512", "--ecn", "kmin_kb=16,kmax_kb=64,pmax=0.2",
                    "--dcqcn", "ai_mbps=2,b=524288", "--cnp-interval-us", "20"},
                   error);
    REQUIRE(c);
    CHECK(c->congestion_point.shaper.rate_bps == 2e9);
    CHECK(c->congestion_point.shaper.queue_limit_bytes == 512 * 1024);
    REQUIRE(c->congestion_point.ecn_marking);
    CHECK(c->congestion_point.ecn_marking->kmin_bytes == 16 * 1024);
    CHECK(c->congestion_point.ecn_marking->kmax_bytes == 64 * 1024);
    CHECK(c->congestion_point.ecn_marking->pmax == 0.2);
    CHECK(c->dcqcn);
    CHECK(c->dcqcn_parameters.additive_increase_bps == 2e6);
    CHECK(c->dcqcn_parameters.byte_counter == 524288);
    CHECK(c->dcqcn_parameters.g == 1.0 / 256); // the rest keep the paper's defaults
    CHECK(c->cnp_interval_ns == 20'000);
    auto lanes =
        parse({"--run-dir", "/r", "--provider-prefix", "/p", "--shape", "rate_mbps=1000",
               "--vl-arbitration", "high=1:255;low=0:64,2:32;limit=8", "--sl-to-vl", "3:1,4:2"},
              error);
    REQUIRE(lanes);
    CHECK(lanes->congestion_point.arbitration.high ==
          std::vector<softhca::transport::VlArbitrationEntry>{{1, 255}});
    CHECK(lanes->congestion_point.arbitration.low.size() == 2);
    CHECK(lanes->congestion_point.arbitration.limit_of_high_priority == 8);
    CHECK(lanes->sl_to_vl.vl(3) == 1);
    CHECK(lanes->sl_to_vl.vl(4) == 2);
    CHECK(lanes->sl_to_vl.vl(0) == 0);
    CHECK(plain->sl_to_vl.vl(5) == 5); // the default: SL n on VL n
    CHECK_FALSE(parse({"--run-dir", "/r", "--provider-prefix", "/p", "--sl-to-vl", "3:15"}, error));
    CHECK_FALSE(
        parse({"--run-dir", "/r", "--provider-prefix", "/p", "--vl-arbitration", "high=x"}, error));
    // Lanes arbitrate a shaped link's queues; SL 0's VL must be in a table.
    CHECK_THAT(refusal({"--sl-to-vl", "3:1"}), Contains("--shape"));
    CHECK_THAT(refusal({"--shape", "rate_mbps=1000", "--vl-arbitration", "high=1:255"}),
               Contains("VL 0 (SL 0's)"));
    CHECK_THAT(
        refusal({"--shape", "rate_mbps=1000", "--vl-arbitration", "low=0:64", "--sl-to-vl", "0:2"}),
        Contains("VL 2 (SL 0's)"));
    // One port's own tables (PORT@), over the every-port ones; a port that is not there
    // and a port whose tables leave out SL 0's VL are refused.
    auto per_port = parse({"--run-dir", "/r", "--provider-prefix", "/p", "--shape",
                           "rate_mbps=1000", "--vl-arbitration", "low=0:64,1:64",
                           "--vl-arbitration", "1@high=2:255;low=0:16", "--sl-to-vl", "1@5:2"},
                          error);
    REQUIRE(per_port);
    CHECK(per_port->arbitration_for(0).low.size() == 2);
    CHECK(per_port->arbitration_for(0).high.empty());
    CHECK(per_port->arbitration_for(1).high ==
          std::vector<softhca::transport::VlArbitrationEntry>{{2, 255}});
    CHECK(per_port->sl_to_vl_for(0).vl(5) == 5);
    CHECK(per_port->sl_to_vl_for(1).vl(5) == 2);
    CHECK_THAT(refusal({"--shape", "rate_mbps=1000", "--sl-to-vl", "2@5:2"}),
               Contains("there is no port 2"));
    CHECK_THAT(refusal({"--shape", "rate_mbps=1000", "--vl-arbitration", "1@low=3:64"}),
               Contains("table of port 1"));
    auto on = parse({"--run-dir", "/r", "--provider-prefix", "/p", "--dcqcn", "on"}, error);
    REQUIRE(on);
    CHECK(on->dcqcn);
    CHECK(on->dcqcn_parameters.additive_increase_bps == 40e6);
    // ECN marking needs a queue to look at; bad values are refused with a reason.
    CHECK_THAT(refusal({"--ecn", "on"}), Contains("--shape"));
    CHECK_THAT(refusal({"--shape", "rate_mbps=1", "--ecn", "kmin_kb=64,kmax_kb=16"}),
               Contains("kmax"));
    error.clear();
    CHECK_FALSE(parse({"--run-dir", "/r", "--provider-prefix", "/p", "--dcqcn", "g=2"}, error));
    CHECK_FALSE(error.empty());
}

TEST_CASE("link credits: off by default, a lossless queue per VL, refused where they cannot "
          "work") {
    std::string error;
    auto plain = parse({"--run-dir", "/r", "--provider-prefix", "/p"}, error);
    REQUIRE(plain);
    CHECK(plain->congestion_point.credit_buffer_bytes == 0);
    // "on": 64 KiB per VL, and a queue (no rate) twice that to hold the senders back.
    auto on = parse({"--run-dir", "/r", "--provider-prefix", "/p", "--link-credits", "on"}, error);
    REQUIRE(on);
    CHECK(on->congestion_point.credit_buffer_bytes == 64 * 1024);
    CHECK(on->congestion_point.credit_refresh_ns == 1'000'000);
    CHECK(on->congestion_point.shaper.enabled());
    CHECK(on->congestion_point.shaper.rate_bps == 0);
    CHECK(on->congestion_point.shaper.queue_limit_bytes == 128 * 1024);
    // With a shaped link its queue is the one, and lanes may be given without --shape.
    auto shaped = parse({"--run-dir", "/r", "--provider-prefix", "/p", "--shape",
                         "rate_mbps=2000,queue_kb=512", "--link-credits",
                         "buffer_kb=16,refresh_us=200", "--vl-arbitration", "high=1:255;low=0:64"},
                        error);
    REQUIRE(shaped);
    CHECK(shaped->congestion_point.credit_buffer_bytes == 16 * 1024);
    CHECK(shaped->congestion_point.credit_refresh_ns == 200'000);
    CHECK(shaped->congestion_point.shaper.queue_limit_bytes == 512 * 1024);
    CHECK(parse(
        {"--run-dir", "/r", "--provider-prefix", "/p", "--link-credits", "on", "--sl-to-vl", "3:1"},
        error));
    // Past 2048 blocks (C7-63), unknown keys, and kernel UDP ports (no link to credit).
    for (const char* bad : {"buffer_kb=129", "buffer_kb=0", "refresh_us=1", "size=4", "x"}) {
        error.clear();
        CHECK_FALSE(
            parse({"--run-dir", "/r", "--provider-prefix", "/p", "--link-credits", bad}, error));
        CHECK(error.find("--link-credits") != std::string::npos);
    }
    CHECK_THAT(refusal({"--port", "udp@198.18.0.1", "--link-credits", "on"}),
               Contains("--link-credits is for DPDK ports"));
}

TEST_CASE("the traffic-class option: the ports' global traffic class, none by default") {
    std::string error;
    auto plain = parse({"--run-dir", "/r", "--provider-prefix", "/p"}, error);
    REQUIRE(plain);
    CHECK(plain->traffic_class == -1);
    auto set =
        parse({"--run-dir", "/r", "--provider-prefix", "/p", "--traffic-class", "106"}, error);
    REQUIRE(set);
    CHECK(set->traffic_class == 106);
    CHECK(parse({"--run-dir", "/r", "--provider-prefix", "/p", "--traffic-class", "0"}, error)
              ->traffic_class == 0);
    for (const char* bad : {"256", "-1", "x", ""}) {
        error.clear();
        CHECK_FALSE(
            parse({"--run-dir", "/r", "--provider-prefix", "/p", "--traffic-class", bad}, error));
        CHECK(error.find("--traffic-class") != std::string::npos);
    }
}

TEST_CASE("the priority-tag and pfc options: off by default, DPDK ports only") {
    std::string error;
    auto plain = parse({"--run-dir", "/r", "--provider-prefix", "/p"}, error);
    REQUIRE(plain);
    CHECK_FALSE(plain->priority_tag);
    auto tagged = parse({"--run-dir", "/r", "--provider-prefix", "/p", "--priority-tag"}, error);
    REQUIRE(tagged);
    CHECK(tagged->priority_tag);
    CHECK_THAT(refusal({"--port", "udp@198.18.0.1", "--priority-tag"}),
               Contains("--priority-tag is for DPDK ports"));
    // --pfc: off by default, DPDK ports only, and not with link credits (a softhca peer).
    CHECK_FALSE(plain->pfc);
    auto pfc = parse({"--run-dir", "/r", "--provider-prefix", "/p", "--pfc"}, error);
    REQUIRE(pfc);
    CHECK(pfc->pfc);
    CHECK(pfc->pfc_priorities == 0xff); // every priority
    // --pfc-priorities: enabled for those only, and PFC on.
    auto some =
        parse({"--run-dir", "/r", "--provider-prefix", "/p", "--pfc-priorities", "3,0"}, error);
    REQUIRE(some);
    CHECK(some->pfc);
    CHECK(some->pfc_priorities == 0x09);
    for (const char* bad : {"8", "", "3,", ",3", "3,3", "03", "a", "-1"})
        CHECK_THAT(refusal({"--pfc-priorities", bad}),
                   Contains("--pfc-priorities must be a list of priorities 0..7"));
    error.clear();
    CHECK_FALSE(
        parse({"--run-dir", "/r", "--provider-prefix", "/p", "--port", "udp@198.18.0.1", "--pfc"},
              error));
    CHECK(error.find("--pfc and --pfc-priorities are for DPDK ports") != std::string::npos);
    error.clear();
    CHECK_FALSE(parse(
        {"--run-dir", "/r", "--provider-prefix", "/p", "--pfc", "--link-credits", "on"}, error));
    CHECK(error.find("--link-credits") != std::string::npos);
}

TEST_CASE("PCI devargs are told apart from virtual devices") {
    CHECK(is_pci_devargs("0000:3b:00.0"));
    CHECK(is_pci_devargs("3b:00.1,txq_inline=128"));
    CHECK_FALSE(is_pci_devargs("net_af_packet0,iface=veth0"));
    CHECK_FALSE(is_pci_devargs("net_ring0"));
}
