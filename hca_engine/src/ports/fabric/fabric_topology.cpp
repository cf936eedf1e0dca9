#include "fabric_topology.hpp"

#include "softhca/transport/settings_text.hpp"

#include <cmath>
#include <sstream>

namespace softhca::engine::fabric {

namespace {

bool within(double v, double low, double high) {
    return v >= low && v <= high;
}

} // namespace

const char* routing_name(Routing routing) {
    switch (routing) {
    case Routing::Ecmp:
        return "ecmp";
    case Routing::Adaptive:
        return "adaptive";
    case Routing::Spray:
        return "spray";
    }
    return "?";
}

std::optional<FabricSpec> parse_fabric_spec(const std::string& text, std::string& error) {
    FabricSpec spec;
    const size_t colon = text.find(':');
    const std::string kind = text.substr(0, colon);
    if (kind == "leaf-spine") {
        spec.kind = FabricSpec::Kind::LeafSpine;
    } else if (kind == "fat-tree") {
        spec.kind = FabricSpec::Kind::FatTree;
    } else if (kind == "rail") {
        spec.kind = FabricSpec::Kind::Rail;
        spec.hosts = 4;
        spec.spines = 1;
    } else {
        error = "--fabric: '" + kind + "' is not leaf-spine, fat-tree or rail";
        return std::nullopt;
    }
    std::string settings = colon == std::string::npos ? "" : text.substr(colon + 1);
    // routing= takes a name; every other key a number.
    std::string numeric;
    error = transport::for_each_item(settings, [&](const std::string& item) -> std::string {
        if (item.rfind("routing=", 0) != 0) {
            numeric += item + ",";
            return {};
        }
        const std::string name = item.substr(8);
        for (Routing r : {Routing::Ecmp, Routing::Adaptive, Routing::Spray})
            if (name == routing_name(r)) {
                spec.routing = r;
                return {};
            }
        return "'" + item + "': routing is ecmp, adaptive or spray";
    });
    transport::EcnMarkingParameters ecn;
    bool ecn_given = false;
    if (error.empty())
        error = transport::for_each_setting(numeric, [&](const std::string& key, double v) {
            const auto whole = [&](double low, double high) {
                return within(v, low, high) && v == std::floor(v);
            };
            if (key == "hosts" && whole(1, 1024))
                spec.hosts = static_cast<uint32_t>(v);
            else if (key == "leaves" && whole(1, 64))
                spec.leaves = static_cast<uint32_t>(v);
            else if (key == "spines" && whole(1, 64))
                spec.spines = static_cast<uint32_t>(v);
            else if (key == "oversubscription" && within(v, 0.1, 64))
                spec.oversubscription = v;
            else if (key == "k" && whole(2, 16) && static_cast<uint32_t>(v) % 2 == 0)
                spec.k = static_cast<uint32_t>(v);
            else if (key == "rails" && whole(1, 16))
                spec.rails = static_cast<uint32_t>(v);
            else if (key == "rate_gbps" && within(v, 0.001, 400))
                spec.link.rate_bps = v * 1e9;
            else if (key == "delay_us" && within(v, 0, 100'000))
                spec.link.delay_ns = static_cast<uint64_t>(v * 1000);
            else if (key == "queue_kb" && within(v, 16, 65536)) // a few full frames
                spec.link.queue_bytes = static_cast<uint64_t>(v * 1024);
            else if (key == "flowlet_us" && within(v, 0, 1e6))
                spec.flowlet_gap_ns = static_cast<uint64_t>(v * 1000);
            else if (key == "converge_ms" && within(v, 0, 60'000))
                spec.convergence_ns = static_cast<uint64_t>(v * 1e6);
            else if (key == "pfc" && whole(0, 1))
                spec.pfc = v == 1;
            else if (key == "pfc_xoff_kb" && within(v, 4, 65536))
                spec.pfc_xoff_bytes = static_cast<uint64_t>(v * 1024);
            else if (key == "nic_queue_kb" && within(v, 16, 65536))
                spec.nic_queue_limit = static_cast<uint64_t>(v * 1024);
            else if (key == "netns" && whole(0, 1))
                spec.host_namespaces = v == 1;
            else if (key == "seed" && whole(0, 1e15))
                spec.seed = static_cast<uint64_t>(v);
            else if (key == "ecn_kmin_kb" && within(v, 0, 65536))
                ecn.kmin_bytes = static_cast<uint32_t>(v * 1024), ecn_given = true;
            else if (key == "ecn_kmax_kb" && within(v, 0, 65536))
                ecn.kmax_bytes = static_cast<uint32_t>(v * 1024), ecn_given = true;
            else if (key == "ecn_pmax" && within(v, 0, 1))
                ecn.pmax = v, ecn_given = true;
            else
                return false;
            return true;
        });
    if (error.empty() && ecn_given && ecn.kmin_bytes > ecn.kmax_bytes)
        error = "ecn_kmin_kb is above ecn_kmax_kb";
    if (error.empty() && spec.kind == FabricSpec::Kind::FatTree &&
        spec.hosts > spec.k * spec.k * spec.k / 4)
        error = "a " + std::to_string(spec.k) + "-ary fat-tree holds at most " +
                std::to_string(spec.k * spec.k * spec.k / 4) + " hosts";
    if (error.empty() && spec.kind == FabricSpec::Kind::LeafSpine && spec.leaves > spec.hosts)
        error = "more leaves than hosts";
    if (error.empty() && spec.endpoint_count() > 1024)
        error = "at most 1024 endpoints";
    // One bridge joins the hosts' namespaces (host_namespaces.hpp), and a Linux bridge
    // has 1023 ports.
    if (error.empty() && spec.host_namespaces && spec.endpoint_count() > 1023)
        error = "at most 1023 endpoints with netns=1";
    if (error.empty() && spec.endpoint_count() < 2)
        error = "a fabric needs two endpoints";
    if (!error.empty()) {
        error = "--fabric: " + error;
        return std::nullopt;
    }
    if (ecn_given)
        spec.ecn = ecn;
    return spec;
}

std::string describe(const FabricSpec& spec) {
    std::ostringstream out;
    switch (spec.kind) {
    case FabricSpec::Kind::LeafSpine:
        out << "leaf-spine: " << spec.hosts << " hosts, " << spec.leaves << " leaves, "
            << spec.spines << " spines, oversubscription " << spec.oversubscription;
        break;
    case FabricSpec::Kind::FatTree:
        out << spec.k << "-ary fat-tree: " << spec.hosts << " hosts";
        break;
    case FabricSpec::Kind::Rail:
        out << "rail: " << spec.hosts << " hosts of " << spec.rails << " NICs, " << spec.spines
            << " spines";
        break;
    }
    out << "; links " << spec.link.rate_bps / 1e9 << " Gb/s, " << spec.link.delay_ns / 1000.0
        << " us, queues " << spec.link.queue_bytes / 1024 << " KiB";
    if (spec.nic_queue_limit)
        out << " (NICs " << spec.nic_queue_limit / 1024 << " KiB)";
    out << "; routing " << routing_name(spec.routing);
    if (spec.routing == Routing::Adaptive)
        out << " (flowlet gap " << spec.flowlet_gap_ns / 1000.0 << " us)";
    if (spec.pfc)
        out << "; PFC at " << spec.pfc_xoff_bytes / 1024 << " KiB";
    if (spec.host_namespaces)
        out << "; hosts in network namespaces";
    if (spec.ecn)
        out << "; ECN " << spec.ecn->kmin_bytes / 1024 << "-" << spec.ecn->kmax_bytes / 1024
            << " KiB, pmax " << spec.ecn->pmax;
    return out.str();
}

uint32_t Topology::node(const std::string& name) const {
    for (uint32_t i = 0; i < nodes.size(); ++i)
        if (nodes[i].name == name)
            return i;
    return UINT32_MAX;
}

Topology build_topology(const FabricSpec& spec) {
    Topology t;
    const auto add_node = [&](std::string name, bool is_switch, uint32_t tier,
                              std::string host = {}) {
        t.nodes.push_back({std::move(name), is_switch, tier, std::move(host)});
        return static_cast<uint32_t>(t.nodes.size() - 1);
    };
    const auto add_link = [&](uint32_t a, uint32_t b, double rate_bps) {
        LinkParameters p = spec.link;
        p.rate_bps = rate_bps;
        t.links.push_back({a, b, p});
    };
    const double rate = spec.link.rate_bps;
    switch (spec.kind) {
    case FabricSpec::Kind::LeafSpine: {
        for (uint32_t h = 0; h < spec.hosts; ++h) {
            const std::string name = "h" + std::to_string(h);
            t.endpoints.push_back(add_node(name, false, 0, name));
        }
        const uint32_t per_leaf = (spec.hosts + spec.leaves - 1) / spec.leaves;
        std::vector<uint32_t> leaves, spines;
        for (uint32_t l = 0; l < spec.leaves; ++l)
            leaves.push_back(add_node("leaf" + std::to_string(l), true, 1));
        for (uint32_t s = 0; s < spec.spines; ++s)
            spines.push_back(add_node("spine" + std::to_string(s), true, 2));
        for (uint32_t h = 0; h < spec.hosts; ++h)
            add_link(t.endpoints[h], leaves[h / per_leaf], rate);
        const double uplink = per_leaf * rate / (spec.spines * spec.oversubscription);
        for (uint32_t leaf : leaves)
            for (uint32_t spine : spines)
                add_link(leaf, spine, uplink);
        break;
    }
    case FabricSpec::Kind::FatTree: {
        const uint32_t half = spec.k / 2;
        for (uint32_t h = 0; h < spec.hosts; ++h) {
            const std::string name = "h" + std::to_string(h);
            t.endpoints.push_back(add_node(name, false, 0, name));
        }
        std::vector<uint32_t> edges, aggregations, cores;
        for (uint32_t p = 0; p < spec.k; ++p)
            for (uint32_t i = 0; i < half; ++i)
                edges.push_back(add_node("edge" + std::to_string(p * half + i), true, 1));
        for (uint32_t p = 0; p < spec.k; ++p)
            for (uint32_t i = 0; i < half; ++i)
                aggregations.push_back(add_node("agg" + std::to_string(p * half + i), true, 2));
        for (uint32_t c = 0; c < half * half; ++c)
            cores.push_back(add_node("core" + std::to_string(c), true, 3));
        for (uint32_t h = 0; h < spec.hosts; ++h)
            add_link(t.endpoints[h], edges[h / half], rate); // k/2 hosts per edge
        for (uint32_t p = 0; p < spec.k; ++p)
            for (uint32_t e = 0; e < half; ++e)
                for (uint32_t a = 0; a < half; ++a)
                    add_link(edges[p * half + e], aggregations[p * half + a], rate);
        // Aggregation switch a of every pod reaches cores a*k/2 .. a*k/2 + k/2 - 1.
        for (uint32_t p = 0; p < spec.k; ++p)
            for (uint32_t a = 0; a < half; ++a)
                for (uint32_t j = 0; j < half; ++j)
                    add_link(aggregations[p * half + a], cores[a * half + j], rate);
        break;
    }
    case FabricSpec::Kind::Rail: {
        for (uint32_t h = 0; h < spec.hosts; ++h)
            for (uint32_t r = 0; r < spec.rails; ++r)
                t.endpoints.push_back(add_node("h" + std::to_string(h) + "n" + std::to_string(r),
                                               false, 0, "h" + std::to_string(h)));
        std::vector<uint32_t> rails, spines;
        for (uint32_t r = 0; r < spec.rails; ++r)
            rails.push_back(add_node("rail" + std::to_string(r), true, 1));
        for (uint32_t s = 0; s < spec.spines; ++s)
            spines.push_back(add_node("spine" + std::to_string(s), true, 2));
        for (uint32_t h = 0; h < spec.hosts; ++h)
            for (uint32_t r = 0; r < spec.rails; ++r)
                add_link(t.endpoints[h * spec.rails + r], rails[r], rate);
        for (uint32_t rail : rails)
            for (uint32_t spine : spines)
                add_link(rail, spine, rate * spec.hosts / spec.spines);
        break;
    }
    }
    return t;
}

} // namespace softhca::engine::fabric
